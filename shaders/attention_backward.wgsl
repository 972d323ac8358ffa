// Gradients of attention.wgsl's causal grouped-query attention for a step of one sequence,
// from the forward's saved log-sum-exp (no softmax pass is repeated):
//   P[t, j] = exp(scale · q_t · k_j − lse[t])       for the cache rows j that token t sees
//   delta[t] = Σ_d dO_t · O_t                        (= Σ_j P[t, j] · dP[t, j])
//   dS[t, j] = P[t, j] · (dO_t · v_j − delta[t])
//   dq_t = scale · Σ_j dS[t, j] · k_j
//   dk_j += scale · Σ_{t, heads of j's group} dS[t, j] · q_t
//   dv_j += Σ_{t, heads of j's group} P[t, j] · dO_t
// dk and dv have the cache's layout [ctx, n_kv, head_dim] and are added to: a step's queries
// also see rows that earlier steps wrote, whose gradients are finished when those steps' own
// backward runs (last step first).
// Two entry points, each owning what it writes (no atomics): `attention_backward_dq`, a thread
// per (query head, token), writes dq and delta; `attention_backward_dkv`, a thread per
// (cache row, KV head), reads delta and adds to dk and dv. CPU adapters cut a loop short
// after 65535 iterations per invocation (llvmpipe's loop limiter, shared by all of a shader's
// loops), so each dispatch covers a block of positions (dq, the first block setting dq and
// delta, the others adding) or of query tokens (dk, dv), sized by the host to stay under it.
// DELTA_GIVEN: delta is already there (gated attention: attn_gate_backward.wgsl computes it
// from the gated output, which is what the forward keeps) and o is not read.
// Macros: WG, HD (the head dim: the size of each thread's accumulators), DELTA_GIVEN.

#include "common/step.wgsl"

struct Params {
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    scale: f32,
    begin: u32,  // dq: the first position of this dispatch's block; dk/dv: the first token
    end: u32,    // one past the last
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> o: array<f32>;
@group(0) @binding(4) var<storage, read> d_o: array<f32>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> delta: array<f32>;
@group(0) @binding(7) var<storage, read_write> dq: array<f32>;
@group(0) @binding(8) var<storage, read_write> dk: array<f32>;
@group(0) @binding(9) var<storage, read_write> dv: array<f32>;
@group(0) @binding(10) var<uniform> p: Params;
@group(0) @binding(11) var<uniform> step: Step;

@compute @workgroup_size(WG)
fn attention_backward_dq(@builtin(global_invocation_id) gid: vec3<u32>) {
    let head = gid.x;
    let t = gid.y;
    if head >= p.n_head || t >= step.n_tokens {
        return;
    }
    let hd = p.head_dim;
    let kv_head = head / (p.n_head / p.n_kv);
    let base = (t * p.n_head + head) * hd;
    let info = step.tok[t];
    let first = info.y - info.x;
    let first_block = p.begin == 0u;
#if DELTA_GIVEN
    let dl = delta[t * p.n_head + head];
#else
    var dl = 0.0;
    if first_block {
        for (var d = 0u; d < hd; d++) {
            dl += d_o[base + d] * o[base + d];
        }
        delta[t * p.n_head + head] = dl;
    } else {
        dl = delta[t * p.n_head + head];
    }
#endif
    let m = lse[t * p.n_head + head];
    var acc: array<f32, HD>;
    for (var j = p.begin; j < min(p.end, info.x + 1u); j++) {
        let kb = ((first + j) * p.n_kv + kv_head) * hd;
        var s = 0.0;
        var dp = 0.0;
        for (var d = 0u; d < hd; d++) {
            s += q[base + d] * k[kb + d];
            dp += d_o[base + d] * v[kb + d];
        }
        let ds = exp(s * p.scale - m) * (dp - dl);
        for (var d = 0u; d < hd; d++) {
            acc[d] += ds * k[kb + d];
        }
    }
    for (var d = 0u; d < hd; d++) {
        if first_block {
            dq[base + d] = acc[d] * p.scale;
        } else {
            dq[base + d] += acc[d] * p.scale;
        }
    }
}

@compute @workgroup_size(WG)
fn attention_backward_dkv(@builtin(global_invocation_id) gid: vec3<u32>) {
    // Row j (a position of the step's sequence) of KV head g.
    let j = gid.x;
    let g = gid.y;
    let n_tokens = step.n_tokens;
    if g >= p.n_kv || n_tokens == 0u || j > step.tok[n_tokens - 1u].x {
        return;
    }
    let hd = p.head_dim;
    let group = p.n_head / p.n_kv;
    let first = step.tok[0].y - step.tok[0].x;
    let kb = ((first + j) * p.n_kv + g) * hd;
    var ak: array<f32, HD>;
    var av: array<f32, HD>;
    // This dispatch's block of query tokens; those at positions before j do not see it.
    for (var t = p.begin; t < min(p.end, n_tokens); t++) {
        if step.tok[t].x < j {
            continue;
        }
        for (var h = g * group; h < (g + 1u) * group; h++) {
            let base = (t * p.n_head + h) * hd;
            var s = 0.0;
            var dp = 0.0;
            for (var d = 0u; d < hd; d++) {
                s += q[base + d] * k[kb + d];
                dp += d_o[base + d] * v[kb + d];
            }
            let pr = exp(s * p.scale - lse[t * p.n_head + h]);
            let ds = pr * (dp - delta[t * p.n_head + h]);
            for (var d = 0u; d < hd; d++) {
                ak[d] += ds * q[base + d];
                av[d] += pr * d_o[base + d];
            }
        }
    }
    for (var d = 0u; d < hd; d++) {
        dk[kb + d] += ak[d] * p.scale;
        dv[kb + d] += av[d];
    }
}
