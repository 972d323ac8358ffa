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
// per (query head, token), writes dq and delta (a workgroup holds TPG tokens' heads, so models
// with fewer heads than WG still fill it); `attention_backward_dkv`, a thread per
// (cache row, KV head), reads delta and adds to dk and dv. CPU adapters cut a loop short
// after 65535 iterations per invocation (llvmpipe's loop limiter, shared by all of a shader's
// loops), so each dispatch covers a block of positions (dq, the first block setting dq and
// delta, the others adding) or of query tokens (dk, dv), sized by the host to stay under it.
// KV_F16: the caches hold packed f16 pairs (common/kv.wgsl); dk and dv stay f32.
// DELTA_GIVEN: delta is already there (gated attention: attn_gate_backward.wgsl computes it
// from the gated output, which is what the forward keeps) and o is not read.
// Macros: WG, HD (the head dim: the size of each thread's accumulators), TPG (dq's tokens per
// workgroup: WG / n_head, or 1 with a workgroup column per WG heads), DELTA_GIVEN.
// PER_THREAD (CPU adapters, as in attention.wgsl) with HD4 = head_dim / 4 and optionally
// SUBGROUPS: the same two entry points, a workgroup of 8 lanes each, rows as vec4s in
// registers. dq: the lanes are 8 consecutive tokens of one head, each keeping its q, dO and
// dq rows, and each K/V row is loaded once for all of them. dk, dv: the lanes are 8
// consecutive cache rows of one KV head, each keeping its K, V, dK and dV rows, and each
// query token's q and dO rows are loaded once for all of them. Both walk their loop in
// chunks of CHUNK with one loaded row in use at a time: with two (K and V, or q and dO) at
// once llvmpipe kept every row in memory, and the kernels ran 20-40x slower.

#include "common/step.wgsl"

struct Params {
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    scale: f32,
    begin: u32,  // dq: the first position of this dispatch's block; dk/dv: the first token
    end: u32,    // one past the last
}

#if PER_THREAD
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<KvVec4>;
@group(0) @binding(2) var<storage, read> v: array<KvVec4>;
@group(0) @binding(3) var<storage, read> o: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> d_o: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> delta: array<f32>;
@group(0) @binding(7) var<storage, read_write> dq: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> dk: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> dv: array<vec4<f32>>;
@group(0) @binding(10) var<uniform> p: Params;
@group(0) @binding(11) var<uniform> step: Step;

// Positions (dq) or query heads (dk, dv) per chunk of a thread's loop.
const CHUNK = 8u;

#include "common/kv.wgsl"
#include "common/attention_rows.wgsl"

// Element i of K (which = 0), V (1), q (2) or dO (3).
fn load(which: u32, i: u32) -> vec4<f32> {
    switch which {
        case 0u: {
            return k4(i);
        }
        case 1u: {
            return v4(i);
        }
        case 2u: {
            return q[i];
        }
        default: {
            return d_o[i];
        }
    }
}

@compute @workgroup_size(LANES)
fn attention_backward_dq(@builtin(workgroup_id) wid: vec3<u32>, ids: LaneIds) {
    let tid = enter(ids);
    let head = wid.x;
    let t0 = wid.y * LANES;
    if t0 >= step.n_tokens {
        return;
    }
    let a = query_lane(t0, tid);
    let t = a.t;
    let kv_head = head / (p.n_head / p.n_kv);
    let at = t * p.n_head + head;
    let base = at * HD4;
    let first_block = p.begin == 0u;
    var qv: Row;
    var dov: Row;
    for (var i = 0u; i < HD4; i++) {
        qv[i] = q[base + i];
        dov[i] = d_o[base + i];
    }
#if DELTA_GIVEN
    let dl = delta[at];
#else
    var dl: f32;
    if first_block {
        var d = vec4<f32>(0.0);
        for (var i = 0u; i < HD4; i++) {
            d += dov[i] * o[base + i];
        }
        dl = d.x + d.y + d.z + d.w;
        if a.live {
            delta[at] = dl;
        }
    } else {
        dl = delta[at];
    }
#endif
    let m = lse[at];
    // Positions in chunks, each row loaded for one use at a time (as in the forward): the
    // chunk's scores from its K rows, then dO·v from its V rows, then dq from the K rows
    // again. Holding K and V rows together made llvmpipe spill every row to memory.
    let end = min(p.end, a.n_pos_all);
    var acc: Row;
    for (var c0 = p.begin; c0 < end; c0 += CHUNK) {
        // The chunk's cache rows (as vec4 indices), and each position's dS as it is built.
        var rb: array<u32, CHUNK>;
        var ds: array<f32, CHUNK>;
        for (var j = 0u; j < CHUNK; j++) {
            rb[j] = ((a.first + min(c0 + j, a.last_pos)) * p.n_kv + kv_head) * HD4;
            let kr = load_row(0u, rb[j]);
            var sv = vec4<f32>(0.0);
            for (var i = 0u; i < HD4; i++) {
                sv += qv[i] * kr[i];
            }
            // Positions past this lane's token, or past this block, do not count.
            let seen = c0 + j < a.n_pos && c0 + j < end;
            ds[j] = select(0.0, exp((sv.x + sv.y + sv.z + sv.w) * p.scale - m), seen);
        }
        for (var j = 0u; j < CHUNK; j++) {
            let vr = load_row(1u, rb[j]);
            var dpv = vec4<f32>(0.0);
            for (var i = 0u; i < HD4; i++) {
                dpv += dov[i] * vr[i];
            }
            ds[j] *= dpv.x + dpv.y + dpv.z + dpv.w - dl;
        }
        for (var j = 0u; j < CHUNK; j++) {
            let kr = load_row(0u, rb[j]);
            for (var i = 0u; i < HD4; i++) {
                acc[i] += ds[j] * kr[i];
            }
        }
    }
    if a.live {
        for (var i = 0u; i < HD4; i++) {
            if first_block {
                dq[base + i] = acc[i] * p.scale;
            } else {
                dq[base + i] += acc[i] * p.scale;
            }
        }
    }
}

@compute @workgroup_size(LANES)
fn attention_backward_dkv(@builtin(workgroup_id) wid: vec3<u32>, ids: LaneIds) {
    let tid = enter(ids);
    // Rows j0 .. j0 + 8 (positions of the step's one sequence) of KV head g.
    let g = wid.y;
    let j0 = wid.x * LANES;
    let n_tokens = step.n_tokens;
    if g >= p.n_kv || n_tokens == 0u || j0 > step.tok[n_tokens - 1u].x {
        return;
    }
    // Lanes past the last row repeat it and store nothing.
    let j_last = step.tok[n_tokens - 1u].x;
    let j = min(j0 + tid, j_last);
    let group = p.n_head / p.n_kv;
    let first = step.tok[0].y - step.tok[0].x;
    let kb = ((first + j) * p.n_kv + g) * HD4;
    var kr: Row;
    var vr: Row;
    for (var i = 0u; i < HD4; i++) {
        kr[i] = k4(kb + i);
        vr[i] = v4(kb + i);
    }
    var ak: Row;
    var av: Row;
    // This dispatch's block of query tokens, each with the group's heads: items
    // i = t · group + (h − g · group), in chunks whose rows are loaded for one use at a time
    // (q for the scores, dO for dO·v and dV, q again for dK), as in dq. Tokens at positions
    // before a lane's row do not see it.
    let i_end = min(p.end, n_tokens) * group;
    for (var c0 = p.begin * group; c0 < i_end; c0 += CHUNK) {
        // Positions grow with the token (one sequence): a chunk that ends before this
        // workgroup's first row adds nothing.
        if step.tok[(min(c0 + CHUNK, i_end) - 1u) / group].x < j0 {
            continue;
        }
        // Each item's (token, head) index, its probability, then its dS.
        var at: array<u32, CHUNK>;
        var pr: array<f32, CHUNK>;
        var ds: array<f32, CHUNK>;
        for (var c = 0u; c < CHUNK; c++) {
            let i = min(c0 + c, i_end - 1u);
            let t = i / group;
            at[c] = t * p.n_head + g * group + i % group;
            let qr = load_row(2u, at[c] * HD4);
            var sv = vec4<f32>(0.0);
            for (var d = 0u; d < HD4; d++) {
                sv += qr[d] * kr[d];
            }
            let seen = c0 + c < i_end && step.tok[t].x >= j;
            pr[c] = select(0.0, exp((sv.x + sv.y + sv.z + sv.w) * p.scale - lse[at[c]]), seen);
        }
        for (var c = 0u; c < CHUNK; c++) {
            let dor = load_row(3u, at[c] * HD4);
            var dpv = vec4<f32>(0.0);
            for (var d = 0u; d < HD4; d++) {
                dpv += dor[d] * vr[d];
                av[d] += pr[c] * dor[d];
            }
            ds[c] = pr[c] * (dpv.x + dpv.y + dpv.z + dpv.w - delta[at[c]]);
        }
        for (var c = 0u; c < CHUNK; c++) {
            let qr = load_row(2u, at[c] * HD4);
            for (var d = 0u; d < HD4; d++) {
                ak[d] += ds[c] * qr[d];
            }
        }
    }
    if j0 + tid <= j_last {
        for (var i = 0u; i < HD4; i++) {
            dk[kb + i] += ak[i] * p.scale;
            dv[kb + i] += av[i];
        }
    }
}
#else
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<KvScalar>;
@group(0) @binding(2) var<storage, read> v: array<KvScalar>;
@group(0) @binding(3) var<storage, read> o: array<f32>;
@group(0) @binding(4) var<storage, read> d_o: array<f32>;
@group(0) @binding(5) var<storage, read> lse: array<f32>;
@group(0) @binding(6) var<storage, read_write> delta: array<f32>;
@group(0) @binding(7) var<storage, read_write> dq: array<f32>;
@group(0) @binding(8) var<storage, read_write> dk: array<f32>;
@group(0) @binding(9) var<storage, read_write> dv: array<f32>;
@group(0) @binding(10) var<uniform> p: Params;
@group(0) @binding(11) var<uniform> step: Step;

#include "common/kv.wgsl"

@compute @workgroup_size(WG)
fn attention_backward_dq(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    var head = gid.x;
    var t = wid.y;
    if TPG > 1u {
        head = lid.x % p.n_head;
        t = wid.y * TPG + lid.x / p.n_head;
        if lid.x / p.n_head >= TPG {
            return;
        }
    }
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
        for (var d = 0u; d < HD; d++) {
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
        for (var d = 0u; d < HD; d++) {
            s += q[base + d] * k_at(kb + d);
            dp += d_o[base + d] * v_at(kb + d);
        }
        let ds = exp(s * p.scale - m) * (dp - dl);
        for (var d = 0u; d < HD; d++) {
            acc[d] += ds * k_at(kb + d);
        }
    }
    for (var d = 0u; d < HD; d++) {
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
            for (var d = 0u; d < HD; d++) {
                s += q[base + d] * k_at(kb + d);
                dp += d_o[base + d] * v_at(kb + d);
            }
            let pr = exp(s * p.scale - lse[t * p.n_head + h]);
            let ds = pr * (dp - delta[t * p.n_head + h]);
            for (var d = 0u; d < HD; d++) {
                ak[d] += ds * q[base + d];
                av[d] += pr * d_o[base + d];
            }
        }
    }
    for (var d = 0u; d < HD; d++) {
        dk[kb + d] += ak[d] * p.scale;
        dv[kb + d] += av[d];
    }
}
#endif
