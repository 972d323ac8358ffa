// out[t, c] = W[ids[t], c]: token embedding lookup, dequantizing one row per token.
// One id per token of the step. With ids = 0..rows it dequantizes a whole tensor (the bit-exactness tests use that).
// Macros: one weight type flag (see common/quant.wgsl), WG.

struct Params {
    rows: u32,       // rows in this weight chunk
    cols: u32,
    row_start: u32,  // first table row held by this chunk
    _pad: u32,
}


#include "common/step.wgsl"

@group(0) @binding(0) var<storage, read> w_q: array<u32>;
@group(0) @binding(1) var<storage, read> w_s: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> step: Step;

#include "common/quant.wgsl"

@compute @workgroup_size(WG)
fn get_rows(@builtin(global_invocation_id) gid: vec3<u32>) {
    let u = gid.x;
    let t = gid.y;
    if u >= p.cols / 8u || t >= step.n_tokens {
        return;
    }
    // A table split across buffers runs once per chunk; each writes the ids it holds.
    // Out-of-range ids are rejected on the host, so every id lands in some chunk.
    let id = ids[t];
    if id < p.row_start || id - p.row_start >= p.rows {
        return;
    }
    let row = id - p.row_start;
    let w = load_unit(row, u, p.cols);
    let ob = t * (p.cols / 4u);
    out[ob + w.ia] = w.a;
    out[ob + w.ib] = w.b;
}
