// Causal grouped-query attention over a KV cache, one workgroup per (query head, token).
// q: [T, n_head, head_dim]; k, v: the layer's cache [ctx, n_kv, head_dim]; out like q.
// Token t sits at position pos0 + t and sees cache positions 0 ..= pos0 + t.
// Positions are visited in chunks of WG with an online softmax (running max and sum), so
// no score buffer is needed and the context length is bounded only by the cache.
// Macros: WG (chunk size and threads), MAX_D = ceil(head_dim / WG) accumulators per thread.

#include "common/step.wgsl"

struct Params {
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    scale: f32,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> step: Step;

const NEG_BIG: f32 = -3.0e38;

var<workgroup> q_sh: array<f32, 256>;
var<workgroup> probs: array<f32, WG>;
var<workgroup> chunk_max: array<f32, WG>;

@compute @workgroup_size(WG)
fn attention(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let head = wid.x;
    let t = wid.y;
    let live = t < step.n_tokens;
    let hd = p.head_dim;
    let kv_head = head / (p.n_head / p.n_kv);
    let kv_stride = p.n_kv * hd;
    let q_base = (t * p.n_head + head) * hd;
    let n_pos = select(0u, step.pos0 + t + 1u, live);

    for (var d = tid; d < hd; d += WG) {
        q_sh[d] = select(0.0, q[q_base + d], live);
    }
    workgroupBarrier();

    var m = NEG_BIG;
    var l = 0.0;
    var acc: array<f32, MAX_D>;
    for (var c0 = 0u; c0 < n_pos; c0 += WG) {
        let pos = c0 + tid;
        var s = NEG_BIG;
        if pos < n_pos {
            let kb = pos * kv_stride + kv_head * hd;
            var dotv = 0.0;
            for (var d = 0u; d < hd; d++) {
                dotv += q_sh[d] * k[kb + d];
            }
            s = dotv * p.scale;
        }
        chunk_max[tid] = s;
        for (var r = WG / 2u; r > 0u; r >>= 1u) {
            workgroupBarrier();
            if tid < r {
                chunk_max[tid] = max(chunk_max[tid], chunk_max[tid + r]);
            }
        }
        workgroupBarrier();
        let m_new = max(m, chunk_max[0]);
        probs[tid] = select(0.0, exp(s - m_new), pos < n_pos);
        workgroupBarrier();
        let corr = exp(m - m_new);
        let n_here = min(WG, n_pos - c0);
        var sum = 0.0;
        for (var j = 0u; j < n_here; j++) {
            sum += probs[j];
        }
        l = l * corr + sum;
        for (var i = 0u; i < MAX_D; i++) {
            let d = tid + i * WG;
            if d < hd {
                var a = acc[i] * corr;
                for (var j = 0u; j < n_here; j++) {
                    a += probs[j] * v[(c0 + j) * kv_stride + kv_head * hd + d];
                }
                acc[i] = a;
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    if live {
        for (var i = 0u; i < MAX_D; i++) {
            let d = tid + i * WG;
            if d < hd {
                out[q_base + d] = acc[i] / l;
            }
        }
    }
}
