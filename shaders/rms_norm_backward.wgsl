// The input gradient of rms_norm.wgsl, per row r of n values (rows are (token, group)), from
// the forward's saved reciprocal RMS s = rstd[r]:
//   y = x · s · w (· silu(z) with GATED)
//   g = dy · w (· silu(z))
//   dx = s · g − x · s³ · Σ(g · x) / n        (added into dx with ACCUMULATE: the residual
//                                              stream's gradient already holds the skip path)
//   dz = dy · x · s · w · silu'(z)            (GATED)
// The weights are frozen: no dw. Qwen3.5's 1 + w norms are stored as 1 + w, so they are plain.
// Macros: WG, GATED, ACCUMULATE.

#include "common/step.wgsl"

struct Params {
    n: u32,       // values per row
    groups: u32,  // rows per token
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> rstd: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
@group(0) @binding(6) var<uniform> step: Step;
#if GATED
@group(0) @binding(7) var<storage, read> z: array<f32>;
@group(0) @binding(8) var<storage, read_write> dz: array<f32>;
#endif

var<workgroup> partial: array<f32, WG>;

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

// dy · w, times silu(z) when gated: the gradient reaching x · s.
fn g_at(i: u32, base: u32) -> f32 {
#if GATED
    let zi = z[base + i];
    return dy[base + i] * w[i] * zi * sigmoid(zi);
#else
    return dy[base + i] * w[i];
#endif
}

@compute @workgroup_size(WG)
fn rms_norm_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let live = wid.y < step.n_tokens;
    let row = wid.y * p.groups + wid.x;
    let base = row * p.n;
    var dot = 0.0;
    if live {
        for (var i = tid; i < p.n; i += WG) {
            dot += g_at(i, base) * x[base + i];
        }
    }
    partial[tid] = dot;
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        workgroupBarrier();
        if tid < h {
            partial[tid] += partial[tid + h];
        }
    }
    workgroupBarrier();
    if !live {
        return;
    }
    let s = rstd[row];
    let c = s * s * s * partial[0] / f32(p.n);
    for (var i = tid; i < p.n; i += WG) {
        let xi = x[base + i];
        let v = s * g_at(i, base) - xi * c;
#if ACCUMULATE
        dx[base + i] += v;
#else
        dx[base + i] = v;
#endif
#if GATED
        let zi = z[base + i];
        let sg = sigmoid(zi);
        dz[base + i] = dy[base + i] * xi * s * w[i] * sg * (1.0 + zi * (1.0 - sg));
#endif
    }
}
