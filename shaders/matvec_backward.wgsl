// dx[t, c] (+)= Σ_r W[r, c] · dy[t, row_offset + r]: the input gradient of matvec.wgsl's
// y = W·x for a frozen weight, read from its blocks as stored, with the forward's decoders
// (common/quant.wgsl), so the gradient flows through exactly the weights the forward used.
// A decoded unit is 8 weights of one row whose columns are the same in every row: one thread
// owns a unit's columns and TILE tokens, walks down the rows, and reuses each decoded unit for
// all of its tokens. Neighbouring threads read neighbouring units of the same row.
// A dispatch covers rows row_begin .. row_end of one weight chunk, and every dispatch after
// a weight's first adds its rows' share (ACCUMULATE): CPU adapters cut a loop short after
// 65535 iterations per invocation (llvmpipe's loop limiter, shared by all of a shader's
// loops), so no invocation walks more than a few thousand rows. The token loop has a
// constant bound so that it unrolls.
// Macros: one weight type flag, WG, TILE, ACCUMULATE.

#include "common/step.wgsl"

struct Params {
    row_begin: u32,   // rows of this weight chunk that this dispatch covers
    row_end: u32,
    cols: u32,
    row_offset: u32,  // the chunk's first row: its column in dy
    dy_stride: u32,   // floats per token in dy
}

@group(0) @binding(0) var<storage, read> w_q: array<u32>;
@group(0) @binding(1) var<storage, read> w_s: array<u32>;
@group(0) @binding(2) var<storage, read> dy: array<f32>;
@group(0) @binding(3) var<storage, read_write> dx: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> step: Step;

#include "common/quant.wgsl"

@compute @workgroup_size(WG)
fn matvec_backward(@builtin(global_invocation_id) gid: vec3<u32>) {
    let u = gid.x;
    let t0 = gid.y * TILE;
    if u >= p.cols / 8u || t0 >= step.n_tokens {
        return;
    }
    let nt = min(TILE, step.n_tokens - t0);
    var acc_a: array<vec4<f32>, TILE>;
    var acc_b: array<vec4<f32>, TILE>;
    for (var r = p.row_begin; r < p.row_end; r++) {
        let w = load_unit(r, u, p.cols);
        for (var k = 0u; k < TILE; k++) {
            let g = dy[(t0 + min(k, nt - 1u)) * p.dy_stride + p.row_offset + r];
            acc_a[k] += w.a * g;
            acc_b[k] += w.b * g;
        }
    }
    // The unit's columns (as vec4 indices within a row), the same in every row.
    let w = load_unit(0u, u, p.cols);
    let row4 = p.cols / 4u;
    for (var k = 0u; k < TILE; k++) {
        if k >= nt {
            break;
        }
        let ia = (t0 + k) * row4 + w.ia;
        let ib = (t0 + k) * row4 + w.ib;
#if ACCUMULATE
        dx[ia] += acc_a[k];
        dx[ib] += acc_b[k];
#else
        dx[ia] = acc_a[k];
        dx[ib] = acc_b[k];
#endif
    }
}
