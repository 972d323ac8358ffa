// Gradients of elementwise.wgsl's ops over the first n_tokens * row values of a step
// (workgroups along y are tokens, as in the forward). The residual add passes its gradient
// through unchanged and needs no kernel.
// Macros: WG.

#include "common/step.wgsl"

struct Params {
    row: u32,  // values per token
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read> d_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> da: array<f32>;
@group(0) @binding(4) var<storage, read_write> db: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;
@group(0) @binding(6) var<uniform> step: Step;

// Element c of token wid.y's row, or none past the row.
fn index(wid: vec3<u32>, nwg: vec3<u32>, tid: u32) -> u32 {
    let c = (wid.x + wid.z * nwg.x) * WG + tid;
    return select(NONE, wid.y * p.row + c, c < p.row && wid.y < step.n_tokens);
}

const NONE = 0xffffffffu;

// out = silu(a) · b: da = d_out · b · silu'(a), db = d_out · silu(a), with
// silu'(a) = σ(a) · (1 + a · (1 − σ(a))).
@compute @workgroup_size(WG)
fn silu_mul_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) tid: u32) {
    let i = index(wid, nwg, tid);
    if i != NONE {
        let g = a[i];
        let s = 1.0 / (1.0 + exp(-g));
        let d = d_out[i];
        da[i] = d * b[i] * s * (1.0 + g * (1.0 - s));
        db[i] = d * g * s;
    }
}
