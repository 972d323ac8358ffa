// y[t, row_offset + r] (+)= sum_c W[r, c] * x[t, c] for TILE tokens per workgroup.
// Each 8-weight unit is decoded once and reused for every token of the tile.
// Decode uses TILE = 1, prefill a larger tile.
// Macros: one weight type flag (see common/quant.wgsl), WG, TILE, ACCUMULATE (adds into y),
// ROW_PER_THREAD (the layout for CPU-like adapters, below).

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

fn store(row: u32, t: u32, v: f32) {
    let yi = (t + step.pos0 * p.pos_rows) * p.y_stride + p.row_offset + row;
#if ACCUMULATE
    y[yi] += v;
#else
    y[yi] = v;
#endif
}

#if ROW_PER_THREAD
// CPU-like adapters (lavapipe, SwiftShader): a thread owns a whole row, so there are no
// barriers or shared memory; neighbouring SIMD lanes walk neighbouring rows.
@compute @workgroup_size(WG)
fn matvec(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = gid.x + gid.z * nwg.x * WG;
    let t0 = gid.y * TILE;
    if row >= p.rows || t0 >= step.n_tokens {
        return;
    }
    let units = p.cols / 8u;
    let x_stride = p.cols / 4u;
    let n_tile = min(TILE, step.n_tokens - t0);
    var acc: array<f32, TILE>;
    for (var u = 0u; u < units; u++) {
        let w = load_unit(row, u, p.cols);
        for (var t = 0u; t < TILE; t++) {
            let xb = (t0 + min(t, n_tile - 1u)) * x_stride;
            acc[t] += dot(w.a, x[xb + w.ia]) + dot(w.b, x[xb + w.ib]);
        }
    }
    for (var t = 0u; t < n_tile; t++) {
        store(row, t0 + t, acc[t]);
    }
}
#else
// GPUs: one workgroup per row; threads stride over the row's units (coalesced loads) and
// partial sums are reduced in workgroup memory.
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
        store(row, t0 + tid, partial[tid * WG]);
    }
}
#endif
