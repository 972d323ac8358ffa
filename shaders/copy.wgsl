// copy: dst = src, vec4 at a time: the bandwidth yardstick every kernel is measured against.
// step_rows: dst[t] = src[Step.tok[t].y] for the step's tokens, rows of `n_vec4` vec4s: the
//   step's own rows of a cache, made contiguous (a backward pass reads the gradient of the keys
//   and values that its step wrote into the cache).
// concat_rows: dst[t] = [a[t], b[t]] for the step's tokens (rows of `n_vec4` and `m_vec4` vec4s
//   into rows of both): the multi-token-prediction layer's input, two normed halves side by side.

#include "common/step.wgsl"

struct Params {
    n_vec4: u32,
    m_vec4: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
    let i = (wid.x + wid.z * nwg.x) * WG + tid;
    if i < p.n_vec4 {
        dst[i] = src[i];
    }
}

@compute @workgroup_size(WG)
fn step_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let j = wid.x * WG + tid;
    let t = wid.y;
    if j < p.n_vec4 && t < step.n_tokens {
        dst[t * p.n_vec4 + j] = src[step.tok[t].y * p.n_vec4 + j];
    }
}

// Bound in place of src/dst for concat_rows (dst is binding 1 there too; b's rows follow a's).
@group(0) @binding(4) var<storage, read> src_b: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn concat_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let j = wid.x * WG + tid;
    let t = wid.y;
    let row = p.n_vec4 + p.m_vec4;
    if t >= step.n_tokens || j >= row {
        return;
    }
    if j < p.n_vec4 {
        dst[t * row + j] = src[t * p.n_vec4 + j];
    } else {
        dst[t * row + j] = src_b[t * p.m_vec4 + j - p.n_vec4];
    }
}
