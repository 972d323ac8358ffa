// Causal grouped-query attention over a KV cache, one workgroup per (query head, token).
// q: [T, n_head, head_dim]; k, v: the layer's cache [ctx, n_kv, head_dim]; out like q.
// Token t at position pos, whose own K/V went to cache row r, sees its sequence's rows
// r − pos ..= r (Step.tok): a step may hold one token each of several sequences.
// Positions are visited in chunks of WG with an online softmax (running max and sum), so
// no score buffer is needed and the context length is bounded only by the cache.
// Macros: WG (chunk size and threads), MAX_D = ceil(head_dim / WG) accumulators per thread;
// or PER_THREAD (CPU adapters, below) with HD4 = head_dim / 4, GROUP = query heads per KV
// head and optionally SUBGROUPS.
// KV_F16: the cache holds packed f16 pairs (common/kv.wgsl).
// SEGMENTS: each workgroup walks one segment of `seg_len` positions (workgroup_id.z) and
// writes its running max, sum and unnormalised output to `part`; `attention_merge` combines
// a token's segments into out (and lse). For adapters that cut long loops short (llvmpipe
// ends an invocation's loops after 65,535 iterations in all): no walk gets that long.
// SAVE_LSE: lse[t, head] = log Σ exp(scaled scores), the softmax statistics a backward pass
// recomputes the probabilities from.

#include "common/step.wgsl"

struct Params {
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    scale: f32,
    // SEGMENTS: positions per segment, tokens per segment in `part`, and where its
    // statistics (max, sum per token, head and segment) begin.
    seg_len: u32,
    part_tokens: u32,
    stats_at: u32,
    _pad: u32,
}

// Where segment `seg` of (token t, head) keeps its output (head_dim values from here) and its
// statistics (two values at stats_at + 2 × this).
fn part_index(seg: u32, t: u32, head: u32) -> u32 {
    return (seg * p.part_tokens + t) * p.n_head + head;
}

// The positions [x, y) that this workgroup walks of a token that sees `n_pos`: all of them,
// or with SEGMENTS those of segment `seg` (none past the token's last).
fn walk_range(seg: u32, n_pos: u32) -> vec2<u32> {
#if SEGMENTS
    let begin = seg * p.seg_len;
    return vec2(begin, max(begin, min(n_pos, begin + p.seg_len)));
#else
    return vec2(0u, n_pos);
#endif
}

#if SEGMENTS
// Output vec4 i of segment slot `at`.
fn write_part4(at: u32, i: u32, o: vec4<f32>) {
    let b = at * p.head_dim + 4u * i;
    part[b] = o.x;
    part[b + 1u] = o.y;
    part[b + 2u] = o.z;
    part[b + 3u] = o.w;
}

fn write_stats(at: u32, m: f32, l: f32) {
    part[p.stats_at + 2u * at] = m;
    part[p.stats_at + 2u * at + 1u] = l;
}
#endif

#if PER_THREAD
// CPU adapters (lavapipe): a workgroup is one SIMD vector of 8 lanes, every barrier a
// coroutine switch and every storage load issued lane by lane, at many times the cost of the
// arithmetic on what it brings. So a thread owns one token's queries of GROUP heads that read
// the same KV head, with their head_dim accumulators in registers, the 8 lanes are 8
// consecutive tokens, and each K/V row (the same for all of them) is loaded once per
// workgroup for all GROUP heads: lane i loads vec4s i, i + 8, … and subgroup shuffles hand
// them to the others (without subgroups every lane loads the whole row). No barriers, no
// shared memory.
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<KvVec4>;
@group(0) @binding(2) var<storage, read> v: array<KvVec4>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> step: Step;
#if SAVE_LSE
@group(0) @binding(6) var<storage, read_write> lse: array<f32>;
#endif
#if SEGMENTS
@group(0) @binding(7) var<storage, read_write> part: array<f32>;
#endif

const NEG_BIG: f32 = -3.0e38;
// Positions `attention_split` scores before its running max and accumulators are rescaled.
const CHUNK = 8u;

#include "common/kv.wgsl"
#include "common/attention_rows.wgsl"

// Element i of K (which = 0) or V (1): one row loader for both, folded at each call.
fn load(which: u32, i: u32) -> vec4<f32> {
    if which == 0u {
        return k4(i);
    }
    return v4(i);
}

@compute @workgroup_size(LANES)
fn attention(@builtin(workgroup_id) wid: vec3<u32>, ids: LaneIds) {
    let tid = enter(ids);
    // GROUP query heads that read one KV head share each of its rows.
    let head0 = wid.x * GROUP;
    let kv_head = head0 / (p.n_head / p.n_kv);
    let t0 = wid.y * LANES;
    if t0 >= step.n_tokens {
        return;
    }
    let a = query_lane(t0, tid);
    let t = a.t;
    // A segment past every lane's last position has nothing to walk; lanes whose token sees
    // fewer positions than the segment's first write statistics the merge ignores.
    let seg = wid.z;
    let range = walk_range(seg, a.n_pos_all);
    if range.x >= range.y {
        return;
    }
    let begin = range.x;
    let end = range.y;
#repeat GROUP
    var q$i: Row;
    for (var i = 0u; i < HD4; i++) {
        q$i[i] = q[(t * p.n_head + head0 + $iu) * HD4 + i] * p.scale;
    }
    var m$i = NEG_BIG;
    var l$i = 0.0;
    var acc$i: Row;
#endrepeat
    // One position at a time, rescaling as the max grows: on a CPU adapter the rescale's
    // arithmetic costs less than keeping a chunk's scores in an array.
    for (var pos = begin; pos < end; pos++) {
        let row = (a.first + min(pos, a.last_pos)) * p.n_kv + kv_head;
        let live = pos < a.n_pos;
        let kr = load_row(0u, row * HD4);
        let vr = load_row(1u, row * HD4);
#repeat GROUP
        {
            var d = vec4<f32>(0.0);
            for (var i = 0u; i < HD4; i++) {
                d += q$i[i] * kr[i];
            }
            // Positions past this lane's token do not count; the walk's first position counts
            // for every lane whose output is kept, so the max is finite from there on.
            let s = select(NEG_BIG, d.x + d.y + d.z + d.w, live);
            let m_new = max(m$i, s);
            let corr = exp(m$i - m_new);
            let pr = exp(s - m_new);
            l$i = l$i * corr + pr;
            for (var i = 0u; i < HD4; i++) {
                acc$i[i] = acc$i[i] * corr + pr * vr[i];
            }
            m$i = m_new;
        }
#endrepeat
    }
    if a.live {
#repeat GROUP
#if SEGMENTS
        {
            let at = part_index(seg, t, head0 + $iu);
            for (var i = 0u; i < HD4; i++) {
                write_part4(at, i, acc$i[i]);
            }
            write_stats(at, m$i, l$i);
        }
#else
        for (var i = 0u; i < HD4; i++) {
            out[(t * p.n_head + head0 + $iu) * HD4 + i] = acc$i[i] / l$i;
        }
#if SAVE_LSE
        lse[t * p.n_head + head0 + $iu] = m$i + log(l$i);
#endif
#endif
#endrepeat
    }
}

// Decode (a step of a few tokens): the layout above gives each token a lane, so one token
// leaves 7 of a workgroup's 8 lanes idle. Here a workgroup is one (head, token) and its lanes
// take positions lane, lane + LANES, …, each with its own running max, sum and output; the
// eight are merged at the end through workgroup memory (one barrier).
var<workgroup> part_m: array<f32, LANES>;
var<workgroup> part_l: array<f32, LANES>;
var<workgroup> part_acc: array<Row, LANES>;

@compute @workgroup_size(LANES)
fn attention_split(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) me: u32) {
    let head = wid.x;
    let t = wid.y;
    let kv_head = head / (p.n_head / p.n_kv);
    let n_pos = step.tok[t].x + 1u;
    let first = step.tok[t].y - step.tok[t].x;
    let q_base = (t * p.n_head + head) * HD4;
    let seg = wid.z;
    let range = walk_range(seg, n_pos);
    if range.x >= range.y {
        return;
    }
    let begin = range.x;
    let end = range.y;
    var qv: Row;
    for (var i = 0u; i < HD4; i++) {
        qv[i] = q[q_base + i] * p.scale;
    }
    var m = NEG_BIG;
    var l = 0.0;
    var acc: Row;
    // CHUNK positions per rescale, LANES apart.
    for (var c0 = begin + me; c0 < end; c0 += LANES * CHUNK) {
        var s: array<f32, CHUNK>;
        var m_new = m;
        for (var j = 0u; j < CHUNK; j++) {
            let pos = c0 + j * LANES;
            let base = ((first + min(pos, end - 1u)) * p.n_kv + kv_head) * HD4;
            var d = vec4<f32>(0.0);
            for (var i = 0u; i < HD4; i++) {
                d += qv[i] * k4(base + i);
            }
            s[j] = select(NEG_BIG, d.x + d.y + d.z + d.w, pos < end);
            m_new = max(m_new, s[j]);
        }
        // The chunk's first position is valid, so m_new is finite.
        let corr = exp(m - m_new);
        l *= corr;
        for (var i = 0u; i < HD4; i++) {
            acc[i] *= corr;
        }
        for (var j = 0u; j < CHUNK; j++) {
            let pos = c0 + j * LANES;
            let base = ((first + min(pos, end - 1u)) * p.n_kv + kv_head) * HD4;
            let pr = select(0.0, exp(s[j] - m_new), pos < end);
            l += pr;
            for (var i = 0u; i < HD4; i++) {
                acc[i] += pr * v4(base + i);
            }
        }
        m = m_new;
    }
    // A lane that saw no position keeps m = NEG_BIG and weighs 0 below; lane 0 saw the walk's
    // first position.
    part_m[me] = m;
    part_l[me] = l;
    part_acc[me] = acc;
    workgroupBarrier();
    if me == 0u {
        var m_all = NEG_BIG;
        for (var j = 0u; j < LANES; j++) {
            m_all = max(m_all, part_m[j]);
        }
        var l_all = 0.0;
        var o: Row;
        for (var j = 0u; j < LANES; j++) {
            let f = exp(part_m[j] - m_all);
            l_all += part_l[j] * f;
            for (var i = 0u; i < HD4; i++) {
                o[i] += part_acc[j][i] * f;
            }
        }
#if SEGMENTS
        let at = part_index(seg, t, head);
        for (var i = 0u; i < HD4; i++) {
            write_part4(at, i, o[i]);
        }
        write_stats(at, m_all, l_all);
#else
        for (var i = 0u; i < HD4; i++) {
            out[q_base + i] = o[i] / l_all;
        }
#if SAVE_LSE
        lse[t * p.n_head + head] = m_all + log(l_all);
#endif
#endif
    }
}

#if SUBGROUPS
// Decode with subgroups: a workgroup is one (KV head, token) and serves the GROUP query
// heads that read that KV head, so each K/V row is loaded once for all of them (on lavapipe
// a storage load costs far more than the arithmetic on what it brings), and nothing is
// merged through workgroup memory. Scores: lane j scores position c0 + j for every head
// from its own whole K row. Output: lane j owns vec4s j, j + LANES, … of every head's
// output and receives each position's probability by a shuffle. Each head's running max is
// the subgroup's (the same in every lane); sums stay per lane until the end. Per-head values
// are written out per head (#repeat), not arrays indexed by a head loop (see kernels.rs).
const OUT_SLOTS = (HD4 + LANES - 1u) / LANES;

@compute @workgroup_size(LANES)
fn attention_decode(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(subgroup_invocation_id) me: u32) {
    let head0 = wid.x * GROUP;
    let kv_head = head0 / (p.n_head / p.n_kv);
    let t = wid.y;
    let n_pos = step.tok[t].x + 1u;
    let first = step.tok[t].y - step.tok[t].x;
    let seg = wid.z;
    let range = walk_range(seg, n_pos);
    if range.x >= range.y {
        return;
    }
    let begin = range.x;
    let end = range.y;
#repeat GROUP
    var q$i: Row;
    for (var i = 0u; i < HD4; i++) {
        q$i[i] = q[(t * p.n_head + head0 + $iu) * HD4 + i] * p.scale;
    }
    var m$i = NEG_BIG;
    var l$i = 0.0;
    var p$i = 0.0;
    var acc$i: array<vec4<f32>, OUT_SLOTS>;
#endrepeat
    for (var c0 = begin; c0 < end; c0 += LANES) {
        let live = c0 + me < end;
        let kb = ((first + min(c0 + me, end - 1u)) * p.n_kv + kv_head) * HD4;
        var kr: Row;
        for (var i = 0u; i < HD4; i++) {
            kr[i] = k4(kb + i);
        }
#repeat GROUP
        {
            var d = vec4<f32>(0.0);
            for (var i = 0u; i < HD4; i++) {
                d += q$i[i] * kr[i];
            }
            let s = select(NEG_BIG, d.x + d.y + d.z + d.w, live);
            // Lane 0's position is valid (c0 < end), so the new max is finite.
            let m_new = max(m$i, subgroupMax(s));
            let corr = exp(m$i - m_new);
            p$i = select(0.0, exp(s - m_new), live);
            l$i = l$i * corr + p$i;
            for (var i = 0u; i < OUT_SLOTS; i++) {
                acc$i[i] *= corr;
            }
            m$i = m_new;
        }
#endrepeat
        for (var j = 0u; j < min(LANES, end - c0); j++) {
            let vb = ((first + c0 + j) * p.n_kv + kv_head) * HD4;
            var vr: array<vec4<f32>, OUT_SLOTS>;
            for (var i = 0u; i < OUT_SLOTS; i++) {
                vr[i] = v4(vb + min(i * LANES + me, HD4 - 1u));
            }
#repeat GROUP
            {
                let pj = subgroupShuffle(p$i, j);
                for (var i = 0u; i < OUT_SLOTS; i++) {
                    acc$i[i] += pj * vr[i];
                }
            }
#endrepeat
        }
    }
#repeat GROUP
    {
        let l_all = subgroupAdd(l$i);
#if SEGMENTS
        let at = part_index(seg, t, head0 + $iu);
        for (var i = 0u; i < OUT_SLOTS; i++) {
            if i * LANES + me < HD4 {
                write_part4(at, i * LANES + me, acc$i[i]);
            }
        }
        if me == 0u {
            write_stats(at, m$i, l_all);
        }
#else
        let base = (t * p.n_head + head0 + $iu) * HD4;
        for (var i = 0u; i < OUT_SLOTS; i++) {
            if i * LANES + me < HD4 {
                out[base + i * LANES + me] = acc$i[i] / l_all;
            }
        }
#if SAVE_LSE
        if me == 0u {
            lse[t * p.n_head + head0 + $iu] = m$i + log(l_all);
        }
#endif
#endif
    }
#endrepeat
}
#endif
#else
@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<KvScalar>;
@group(0) @binding(2) var<storage, read> v: array<KvScalar>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> step: Step;
#if SAVE_LSE
@group(0) @binding(6) var<storage, read_write> lse: array<f32>;
#endif
#if SEGMENTS
@group(0) @binding(7) var<storage, read_write> part: array<f32>;
#endif

const NEG_BIG: f32 = -3.0e38;

#include "common/kv.wgsl"

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
    let info = step.tok[min(t, 511u)];
    let n_pos = select(0u, info.x + 1u, live);
    // This token's sequence starts at cache row `first`.
    let first = info.y - info.x;
    let seg = wid.z;
    let range = walk_range(seg, n_pos);
    if range.x >= range.y {
        return;
    }
    let begin = range.x;
    let end = range.y;

    for (var d = tid; d < hd; d += WG) {
        q_sh[d] = select(0.0, q[q_base + d], live);
    }
    workgroupBarrier();

    var m = NEG_BIG;
    var l = 0.0;
    var acc: array<f32, MAX_D>;
    for (var c0 = begin; c0 < end; c0 += WG) {
        let pos = c0 + tid;
        var s = NEG_BIG;
        if pos < end {
            let kb = (first + pos) * kv_stride + kv_head * hd;
            var dotv = 0.0;
            for (var d = 0u; d < hd; d++) {
                dotv += q_sh[d] * k_at(kb + d);
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
        probs[tid] = select(0.0, exp(s - m_new), pos < end);
        workgroupBarrier();
        let corr = exp(m - m_new);
        let n_here = min(WG, end - c0);
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
                    a += probs[j] * v_at((first + c0 + j) * kv_stride + kv_head * hd + d);
                }
                acc[i] = a;
            }
        }
        m = m_new;
        workgroupBarrier();
    }
    if live {
#if SEGMENTS
        let at = part_index(seg, t, head);
        for (var i = 0u; i < MAX_D; i++) {
            let d = tid + i * WG;
            if d < hd {
                part[at * hd + d] = acc[i];
            }
        }
        if tid == 0u {
            write_stats(at, m, l);
        }
#else
        for (var i = 0u; i < MAX_D; i++) {
            let d = tid + i * WG;
            if d < hd {
                out[q_base + d] = acc[i] / l;
            }
        }
#if SAVE_LSE
        if tid == 0u {
            lse[t * p.n_head + head] = m + log(l);
        }
#endif
#endif
    }
}

#if SEGMENTS
// Combines the segments of (token, head) that hold positions: each segment's output and sum
// rescaled from its own max to the largest, then normalised. A workgroup per (head, token).
@compute @workgroup_size(WG)
fn attention_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let head = wid.x;
    let t = wid.y;
    if t >= step.n_tokens {
        return;
    }
    let hd = p.head_dim;
    let n_seg = (step.tok[t].x + 1u + p.seg_len - 1u) / p.seg_len;
    var m = NEG_BIG;
    for (var s = 0u; s < n_seg; s++) {
        m = max(m, part[p.stats_at + 2u * part_index(s, t, head)]);
    }
    var l = 0.0;
    var acc: array<f32, MAX_D>;
    for (var s = 0u; s < n_seg; s++) {
        let at = part_index(s, t, head);
        let f = exp(part[p.stats_at + 2u * at] - m);
        l += part[p.stats_at + 2u * at + 1u] * f;
        for (var i = 0u; i < MAX_D; i++) {
            let d = min(tid + i * WG, hd - 1u);
            acc[i] += part[at * hd + d] * f;
        }
    }
    for (var i = 0u; i < MAX_D; i++) {
        let d = tid + i * WG;
        if d < hd {
            out[(t * p.n_head + head) * hd + d] = acc[i] / l;
        }
    }
#if SAVE_LSE
    if tid == 0u {
        lse[t * p.n_head + head] = m + log(l);
    }
#endif
}
#endif
#endif
