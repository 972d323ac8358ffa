// y[t, row_offset + r] (+)= sum_c W[r, c] * x[t, c] for TILE tokens per workgroup.
// One workgroup per weight row: its threads stride over the row's 8-weight units, each
// unit is decoded once and reused for every token of the tile, then partial sums are
// reduced in workgroup memory. Decode uses TILE = 1, prefill a larger tile.
// Macros: one weight type flag (see common/quant.wgsl), WG, TILE, ACCUMULATE (adds into y).

struct Params {
    rows: u32,        // rows in this weight chunk
    cols: u32,
    row_offset: u32,  // first output column written by this chunk
    y_stride: u32,    // floats per token in y
    pos_rows: u32,    // 1: token t writes y row pos0 + t (K/V straight into the cache); 0: row t
}


#include "common/step.wgsl"

@group(0) @binding(0) var<storage, read> w_q: array<u32>;
@group(0) @binding(1) var<storage, read> w_s: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> step: Step;

#include "common/quant.wgsl"

var<workgroup> partial: array<f32, WG * TILE>;

@compute @workgroup_size(WG)
fn matvec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) tid: u32) {
    let row = wid.x + wid.z * nwg.x;
    let t0 = wid.y * TILE;
    // Uniform control flow: every thread reaches the barriers, out-of-range work is masked.
    let live = row < p.rows;
    let units = p.cols / 8u;
    let x_stride = p.cols / 4u;
    var acc: array<f32, TILE>;
    let n_tile = min(TILE, step.n_tokens - min(t0, step.n_tokens));
    if live {
        for (var u = tid; u < units; u += WG) {
            let w = load_unit(row, u, p.cols);
            for (var t = 0u; t < n_tile; t++) {
                let xb = (t0 + t) * x_stride;
                acc[t] += dot(w.a, x[xb + w.ia]) + dot(w.b, x[xb + w.ib]);
            }
        }
    }
    for (var t = 0u; t < TILE; t++) {
        partial[t * WG + tid] = acc[t];
    }
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if tid < s {
            for (var t = 0u; t < TILE; t++) {
                partial[t * WG + tid] += partial[t * WG + tid + s];
            }
        }
    }
    if live && tid < n_tile {
        let yi = (t0 + tid + step.pos0 * p.pos_rows) * p.y_stride + p.row_offset + row;
#if ACCUMULATE
        y[yi] += partial[tid * WG];
#else
        y[yi] = partial[tid * WG];
#endif
    }
}
