// Gradients of attn_gate.wgsl (Qwen3.5's gated attention), into dqg [T, n_head, 2 · head_dim],
// the gradient of attn_q's output (per head, the query's half then the gate's half).
// sigmoid_gate_backward, a thread per (head, token), from the gated output att = o · σ(g)
// (what the forward keeps) and d = ∂L/∂att, in place:
//   dqg[gate] = d · att · (1 − σ(g))      (= d · o · σ'(g))
//   d ← d · σ(g)                          (∂L/∂o, attention's output gradient)
//   delta[t, head] = Σ d · att            (= Σ ∂L/∂o · o, what attention_backward needs)
// so the ungated output is never divided back out of att.
// split_query_backward: dqg[query] = dq, the query's gradient after QK-norm and RoPE.
// Macros: WG.

#include "common/step.wgsl"

struct Params {
    n_head: u32,
    head_dim: u32,
}

@group(0) @binding(0) var<storage, read> qg: array<f32>;
@group(0) @binding(1) var<storage, read> att: array<f32>;
@group(0) @binding(2) var<storage, read_write> d: array<f32>;
@group(0) @binding(3) var<storage, read_write> dqg: array<f32>;
@group(0) @binding(4) var<storage, read_write> delta: array<f32>;
@group(0) @binding(5) var<storage, read> dq: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn sigmoid_gate_backward(@builtin(global_invocation_id) gid: vec3<u32>) {
    let head = gid.x;
    let t = gid.y;
    if head >= p.n_head || t >= step.n_tokens {
        return;
    }
    let hd = p.head_dim;
    let base = (t * p.n_head + head) * hd;
    let gate = (t * p.n_head + head) * 2u * hd + hd;
    var dl = 0.0;
    for (var i = 0u; i < hd; i++) {
        let s = 1.0 / (1.0 + exp(-qg[gate + i]));
        let da = d[base + i] * att[base + i];
        dl += da;
        dqg[gate + i] = da * (1.0 - s);
        d[base + i] *= s;
    }
    delta[t * p.n_head + head] = dl;
}

@compute @workgroup_size(WG)
fn split_query_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                        @builtin(local_invocation_index) tid: u32) {
    let row = p.n_head * p.head_dim;
    let c = (wid.x + wid.z * nwg.x) * WG + tid;
    if c >= row || wid.y >= step.n_tokens {
        return;
    }
    let i = wid.y * row + c;
    dqg[i / p.head_dim * 2u * p.head_dim + i % p.head_dim] = dq[i];
}
