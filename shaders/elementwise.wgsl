// Elementwise ops over the first n_tokens * row values of a step.
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

fn index(wid: vec3<u32>, nwg: vec3<u32>, tid: u32) -> u32 {
    return (wid.x + wid.z * nwg.x) * WG + tid;
}

// a += b (the residual connection).
@compute @workgroup_size(WG)
fn add(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) tid: u32) {
    let i = index(wid, nwg, tid);
    if i < step.n_tokens * p.row {
        a[i] += b[i];
    }
}

// out = silu(a) * b (SwiGLU's gate).
@compute @workgroup_size(WG)
fn silu_mul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) tid: u32) {
    let i = index(wid, nwg, tid);
    if i < step.n_tokens * p.row {
        let g = a[i];
        out[i] = g / (1.0 + exp(-g)) * b[i];
    }
}
