// Elementwise ops over the first n_tokens * row values of a step: workgroups along y are
// tokens, so a step's grid grows with its tokens (idle workgroups cost time on CPU adapters).
// Macros: WG.

#include "common/step.wgsl"

struct Params {
    row: u32,  // values per token
}

@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
@group(0) @binding(4) var<uniform> step: Step;

// Element c of token wid.y's row, or none past the row.
fn index(wid: vec3<u32>, nwg: vec3<u32>, tid: u32) -> u32 {
    let c = (wid.x + wid.z * nwg.x) * WG + tid;
    return select(NONE, wid.y * p.row + c, c < p.row && wid.y < step.n_tokens);
}

const NONE = 0xffffffffu;
// a += b (the residual connection).
@compute @workgroup_size(WG)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) tid: u32) {
    let i = index(wid, nwg, tid);
    if i != NONE {
        a[i] += b[i];
    }
}

// out = silu(a) * b (SwiGLU's gate).
@compute @workgroup_size(WG)
fn silu_mul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) tid: u32) {
    let i = index(wid, nwg, tid);
    if i != NONE {
        let g = a[i];
        out[i] = g / (1.0 + exp(-g)) * b[i];
    }
}
