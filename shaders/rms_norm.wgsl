// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for every row r of n values.
// Rows are (token, group): group > 1 normalises each head separately (per-head QK norm).
// GATED: y[r] *= silu(z[r]) (Qwen3.5's DeltaNet output norm, per value head).
// SAVE_RSTD: rstd[r] = 1 / sqrt(mean(x[r]^2) + eps), per (token, group) row, for a backward pass.
// Macros: WG, GATED, SAVE_RSTD; SUBGROUPS: the workgroup is one subgroup, which sums with
// subgroupAdd (no workgroup memory, no barriers).

#include "common/step.wgsl"

struct Params {
    n: u32,            // values per row
    groups: u32,       // rows per token
    eps: f32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
@group(0) @binding(4) var<uniform> step: Step;
#if GATED
@group(0) @binding(5) var<storage, read> z: array<f32>;
#endif
#if SAVE_RSTD
@group(0) @binding(6) var<storage, read_write> rstd: array<f32>;
#endif

#if !SUBGROUPS
var<workgroup> partial: array<f32, WG>;
#endif

@compute @workgroup_size(WG)
fn rms_norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let live = wid.y < step.n_tokens;
    let base = (wid.y * p.groups + wid.x) * p.n;
    var ss = 0.0;
    if live {
        for (var i = tid; i < p.n; i += WG) {
            let v = x[base + i];
            ss += v * v;
        }
    }
#if SUBGROUPS
    let total = subgroupAdd(ss);
#else
    partial[tid] = ss;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if tid < s {
            partial[tid] += partial[tid + s];
        }
    }
    workgroupBarrier();
    let total = partial[0];
#endif
    let scale = inverseSqrt(total / f32(p.n) + p.eps);
#if SAVE_RSTD
    if live && tid == 0u {
        rstd[wid.y * p.groups + wid.x] = scale;
    }
#endif
    if live {
        for (var i = tid; i < p.n; i += WG) {
#if GATED
            let g = z[base + i];
            y[base + i] = x[base + i] * scale * w[i] * (g / (1.0 + exp(-g)));
#else
            y[base + i] = x[base + i] * scale * w[i];
#endif
        }
    }
}
