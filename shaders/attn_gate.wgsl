// Qwen3.5's gated full attention. Its attn_q projection yields, per head, the query (head_dim
// values) followed by the output gate (head_dim values): qg is [T, n_head, 2 · head_dim].
// split_query: q[t, h, d] = qg[t, h, d], the contiguous query that QK-norm, RoPE and
//   attention read.
// sigmoid_gate: x[t, h, d] *= sigmoid(qg[t, h, head_dim + d]) on the attention output, read
//   in place from the projection (no separate gate buffer).
// Macros: WG.

#include "common/step.wgsl"

struct Params {
    n_head: u32,
    head_dim: u32,
}

@group(0) @binding(0) var<storage, read> qg: array<f32>;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> step: Step;

// Element c of token wid.y's row (workgroups along y are tokens), or none past the row.
fn index(wid: vec3<u32>, nwg: vec3<u32>, tid: u32) -> u32 {
    let row = p.n_head * p.head_dim;
    let c = (wid.x + wid.z * nwg.x) * WG + tid;
    return select(NONE, wid.y * row + c, c < row && wid.y < step.n_tokens);
}

const NONE = 0xffffffffu;
// Where x's element i (row i / head_dim) has its query in qg.
fn query_at(i: u32) -> u32 {
    return i / p.head_dim * 2u * p.head_dim + i % p.head_dim;
}

@compute @workgroup_size(WG)
fn split_query(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) tid: u32) {
    let i = index(wid, nwg, tid);
    if i != NONE {
        x[i] = qg[query_at(i)];
    }
}

@compute @workgroup_size(WG)
fn sigmoid_gate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) tid: u32) {
    let i = index(wid, nwg, tid);
    if i != NONE {
        x[i] *= 1.0 / (1.0 + exp(-qg[query_at(i) + p.head_dim]));
    }
}
