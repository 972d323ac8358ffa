// Gated delta rule (Qwen3.5's Gated DeltaNet layers), GGUF head order. Per value head s, reading
// key head s mod n_k, with a state S [d_k, d_v] carried across steps:
//     q̂ = q / sqrt(Σq² + eps) / sqrt(d_k);   k̂ = k / sqrt(Σk² + eps)
//     γ = exp(softplus(alpha + dt_bias) · a);  β = sigmoid(beta_in)  (a = ssm_a = −exp(A_log))
//     S = γ S;  δ = (v − Sᵀ k̂) β;  S = S + k̂ ⊗ δ;  o = Sᵀ q̂
// qkv: [T, 2·n_k·d_k + n_v·d_v], the conv output (q heads, k heads, v heads);
// alpha, beta_in: [T, n_v]; a, dt_bias: [n_v]; state: [slots, n_v, d_k, d_v], token t using its
// sequence's slot (Step.tok[t].z); out: [T, n_v, d_v]. The recurrent form also writes the state
// after a token with a checkpoint (Step.tok[t].w = c > 0) into slot c − 1.
//
// delta_net: the recurrence token by token (decode, batched steps, and on CPU adapters prefill).
//   One workgroup per (value head, block of COLS state columns); each thread keeps MAX_R rows
//   of one column in registers (PER_THREAD: a lane keeps every row of four columns, below).
//   o = γ Sᵀq̂ + δ (k̂·q̂) and Sᵀk̂ both come from the state before the update, so one
//   reduction per token serves both, and the norms of q and k ride along in it.
// delta_chunk_prep + delta_chunk_scan: the same rule over chunks of CHUNK tokens (prefill).
//   With G_i the running sum of log γ inside a chunk and S₀ its incoming state, the chunk's δ
//   solve (I + A) Δ = βV − (β e^G K̂) S₀, A[i][j] = β_i e^(G_i − G_j) k̂_i·k̂_j for j < i, so
//   Δ = U − W S₀ with U = (I + A)⁻¹ βV and W = (I + A)⁻¹ β e^G K̂; then
//   o_i = e^(G_i) q̂_i S₀ + Σ_{j ≤ i} e^(G_i − G_j) (q̂_i·k̂_j) Δ_j and
//   S = e^(G_last) S₀ + Σ_j e^(G_last − G_j) k̂_j Δ_jᵀ.
//   prep computes U, W and the intra-chunk matrix per (head, chunk), all chunks in parallel, into
//   `scratch`; scan walks the chunks in order per (head, column block) with S in workgroup
//   memory. CHUNK is 32, not 64, to keep each workgroup within WebGPU's 16 KiB default.
//   SAVE_STATES: the scan also writes each chunk's incoming state S₀ to
//   states[chunk, head, d_k, d_v], what a backward pass restarts each chunk from.
// Macros: COLS, SPLIT (threads per column), MAX_R = ceil(d_k / SPLIT), CHUNK, SAVE_STATES;
// or PER_THREAD (the recurrent form on CPU adapters with subgroups, alone in the module) with
// COLS lanes, SPLIT = 1, MAX_R = d_k, and SAVE_STATES as the chunked form keeps them.

#include "common/step.wgsl"

struct Params {
    n_k: u32,
    n_v: u32,
    d_k: u32,
    d_v: u32,
    eps: f32,
    q_scale: f32,      // 1 / sqrt(d_k)
    chunk_words: u32,  // scratch words per (chunk, head)
    // The per-lane recurrent form walks the step's tokens [t_from, t_to): where loops are cut
    // short, a long step is several dispatches, each carrying the state on in `state`.
    t_from: u32,
    t_to: u32,
}

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read> alpha: array<f32>;
@group(0) @binding(2) var<storage, read> beta_in: array<f32>;
@group(0) @binding(3) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> dt_bias: array<f32>;
#if PER_THREAD
@group(0) @binding(5) var<storage, read_write> state: array<vec4<f32>>;  // d_v % 4 == 0
#else
@group(0) @binding(5) var<storage, read_write> state: array<f32>;
#endif
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(8) var<uniform> p: Params;
@group(0) @binding(9) var<uniform> step: Step;
#if SAVE_STATES
#if PER_THREAD
@group(0) @binding(10) var<storage, read_write> states: array<vec4<f32>>;
#else
@group(0) @binding(10) var<storage, read_write> states: array<f32>;
#endif
#endif

const WG = COLS * SPLIT;
const MAX_DK = MAX_R * SPLIT;

#include "common/delta_rule.wgsl"

fn beta_at(t: u32, s: u32) -> f32 {
    return 1.0 / (1.0 + exp(-beta_in[t * p.n_v + s]));
}

// A thread's place in a (value head, column block) workgroup: column col of head s's state,
// shared with the other SPLIT − 1 threads of that column (part 0 … SPLIT − 1).
struct Lane {
    s: u32,
    kh: u32,  // the key head it reads
    cl: u32,
    part: u32,
    col: u32,
    live: bool,  // col < d_v
}

fn lane(wid: vec3<u32>, tid: u32) -> Lane {
    let col = wid.y * COLS + tid % COLS;
    return Lane(wid.x, wid.x % p.n_k, tid % COLS, tid / COLS, col, col < p.d_v);
}

// The state slot of the sequence being processed.
var<private> slot: u32;

// ---- recurrent form ----

#if PER_THREAD
// CPU adapters (lavapipe) run a workgroup as SIMD lanes on one core, a barrier as a coroutine
// switch and every storage load lane by lane. Here a lane owns four whole columns of the state
// as one vec4 per row (COLS lanes side by side: 4·COLS consecutive columns of one value head;
// MAX_R = d_k rows), and every sum is its own: no barriers, no workgroup memory. A token's q
// and k rows are the same for every lane: lane j loads rows j, j + COLS, … and subgroup
// shuffles hand them to the others, each serving four columns. What a token costs besides its
// rows (its q and k loads, decay, β) is shared by 4·COLS columns. On these adapters prefill
// runs this form too (the state stays in the lanes across the step's tokens; heads × column
// blocks keep the cores busy). Needs subgroups of at least COLS lanes.

// Row i of slot sl's state, the lane's four columns.
fn state_index(sl: u32, l: Lane, i: u32) -> u32 {
    return ((sl * p.n_v + l.s) * p.d_k + i) * (p.d_v / 4u) + l.col / 4u;
}

fn load_rows4(sl: u32, l: Lane, sr: ptr<function, array<vec4<f32>, MAX_R>>) {
    for (var i = 0u; i < p.d_k; i++) {
        (*sr)[i] = select(vec4<f32>(0.0), state[state_index(sl, l, i)], l.live);
    }
}

fn store_rows4(sl: u32, l: Lane, sr: ptr<function, array<vec4<f32>, MAX_R>>) {
    if l.live {
        for (var i = 0u; i < p.d_k; i++) {
            state[state_index(sl, l, i)] = (*sr)[i];
        }
    }
}

@compute @workgroup_size(COLS)
fn delta_net(@builtin(workgroup_id) wid: vec3<u32>,
             @builtin(subgroup_invocation_id) me: u32) {
    let col = 4u * (wid.y * COLS + me);
    let l = Lane(wid.x, wid.x % p.n_k, 0u, 0u, col, col < p.d_v);
    let t_to = min(step.n_tokens, p.t_to);
    if p.t_from >= t_to {
        return;
    }
    slot = step.tok[p.t_from].z;
    var sr: array<vec4<f32>, MAX_R>;
    load_rows4(slot, l, &sr);
    for (var t = p.t_from; t < t_to; t++) {
        // A token of another sequence (batched decode): put this one's state back, take its.
        if step.tok[t].z != slot {
            store_rows4(slot, l, &sr);
            slot = step.tok[t].z;
            load_rows4(slot, l, &sr);
        }
#if SAVE_STATES
        // A prefill step (one sequence) of a training graph: each CHUNK tokens' incoming state,
        // as the chunked form keeps it, to states[chunk, head, d_k, d_v].
        if t % CHUNK == 0u && l.live {
            for (var i = 0u; i < p.d_k; i++) {
                states[state_index(t / CHUNK, l, i)] = sr[i];
            }
        }
#endif
        // Sᵀk, Sᵀq and the norms (q·q, k·k, q·k), from the state before the update.
        var sk = vec4<f32>(0.0);
        var sq = vec4<f32>(0.0);
        var n3 = vec3<f32>(0.0);
        for (var i0 = 0u; i0 < p.d_k; i0 += COLS) {
            let mine = vec2<f32>(qkv[q_at(t, l.kh) + min(i0 + me, p.d_k - 1u)],
                                 qkv[k_at(t, l.kh) + min(i0 + me, p.d_k - 1u)]);
            for (var j = 0u; j < min(COLS, p.d_k - i0); j++) {
                let qk = subgroupShuffle(mine, j);
                sk += sr[i0 + j] * qk.y;
                sq += sr[i0 + j] * qk.x;
                n3 += vec3<f32>(qk.x * qk.x, qk.y * qk.y, qk.x * qk.y);
            }
        }
        let rq = inverseSqrt(n3.x + p.eps) * p.q_scale;
        let rk = inverseSqrt(n3.y + p.eps);
        let decay = exp(log_decay(t, l.s));
        var v = vec4<f32>(0.0);
        if l.live {
            let vb = v_at(t, l.s) + l.col;
            v = vec4<f32>(qkv[vb], qkv[vb + 1u], qkv[vb + 2u], qkv[vb + 3u]);
        }
        let delta = (v - decay * rk * sk) * beta_at(t, l.s);
        let o = decay * rq * sq + delta * (rk * rq * n3.z);
        if l.live {
            let ob = (t * p.n_v + l.s) * p.d_v + l.col;
            out[ob] = o.x;
            out[ob + 1u] = o.y;
            out[ob + 2u] = o.z;
            out[ob + 3u] = o.w;
        }
        // S = γS + k̂ ⊗ δ.
        let dk = delta * rk;
        for (var i0 = 0u; i0 < p.d_k; i0 += COLS) {
            let mine = qkv[k_at(t, l.kh) + min(i0 + me, p.d_k - 1u)];
            for (var j = 0u; j < min(COLS, p.d_k - i0); j++) {
                sr[i0 + j] = decay * sr[i0 + j] + subgroupShuffle(mine, j) * dk;
            }
        }
        // A checkpoint: the state after this token, also in slot c − 1.
        let checkpoint = step.tok[t].w;
        if checkpoint != 0u {
            store_rows4(checkpoint - 1u, l, &sr);
        }
    }
    store_rows4(slot, l, &sr);
}
#else
fn state_at(l: Lane, row: u32) -> u32 {
    return state_in(slot, l, row);
}

fn state_in(sl: u32, l: Lane, row: u32) -> u32 {
    return ((sl * p.n_v + l.s) * p.d_k + row) * p.d_v + l.col;
}

fn load_state(l: Lane, row: u32) -> f32 {
    if l.live && row < p.d_k {
        return state[state_at(l, row)];
    }
    return 0.0;
}

var<workgroup> qk_sh: array<vec2<f32>, 2 * MAX_DK>;  // raw (q, k) rows, by token parity
var<workgroup> red: array<vec2<f32>, 2 * SPLIT * COLS>;  // partial (S·k, S·q) per column
var<workgroup> nrm: array<vec4<f32>, 2 * SPLIT>;  // partial (q·q, k·k, q·k)

@compute @workgroup_size(WG)
fn delta_net(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let l = lane(wid, tid);
    slot = step.tok[0].z;
    // Rows part, part + SPLIT, … of column col.
    var sr: array<f32, MAX_R>;
    for (var r = 0u; r < MAX_R; r++) {
        sr[r] = load_state(l, l.part + r * SPLIT);
    }
    // Shared arrays alternate by token parity, so one token's reads never race the next
    // token's writes: two barriers per token.
    for (var t = 0u; t < step.n_tokens; t++) {
        // A token of another sequence (batched decode): put this one's state back, take its.
        if step.tok[t].z != slot {
            store_rows(l, sr);
            slot = step.tok[t].z;
            for (var r = 0u; r < MAX_R; r++) {
                sr[r] = load_state(l, l.part + r * SPLIT);
            }
        }
        let par = t & 1u;
        for (var i = tid; i < p.d_k; i += WG) {
            qk_sh[par * MAX_DK + i] = vec2<f32>(qkv[q_at(t, l.kh) + i], qkv[k_at(t, l.kh) + i]);
        }
        workgroupBarrier();
        var sk = vec2<f32>(0.0);
        var n3 = vec4<f32>(0.0);
        for (var r = 0u; r < MAX_R; r++) {
            let i = l.part + r * SPLIT;
            if i < p.d_k {
                let qk = qk_sh[par * MAX_DK + i];
                sk += sr[r] * qk.yx;
                n3 += vec4<f32>(qk.x * qk.x, qk.y * qk.y, qk.x * qk.y, 0.0);
            }
        }
        red[(par * SPLIT + l.part) * COLS + l.cl] = sk;
        if l.cl == 0u {
            nrm[par * SPLIT + l.part] = n3;
        }
        workgroupBarrier();
        var tot = vec2<f32>(0.0);
        var n = vec4<f32>(0.0);
        for (var j = 0u; j < SPLIT; j++) {
            tot += red[(par * SPLIT + j) * COLS + l.cl];
            n += nrm[par * SPLIT + j];
        }
        let rq = inverseSqrt(n.x + p.eps) * p.q_scale;
        let rk = inverseSqrt(n.y + p.eps);
        let decay = exp(log_decay(t, l.s));
        var v = 0.0;
        if l.live {
            v = qkv[v_at(t, l.s) + l.col];
        }
        let delta = (v - decay * rk * tot.x) * beta_at(t, l.s);
        if l.live && l.part == 0u {
            out[(t * p.n_v + l.s) * p.d_v + l.col] = decay * rq * tot.y + delta * rk * rq * n.z;
        }
        for (var r = 0u; r < MAX_R; r++) {
            let i = l.part + r * SPLIT;
            if i < p.d_k {
                sr[r] = decay * sr[r] + rk * qk_sh[par * MAX_DK + i].y * delta;
            }
        }
        // A checkpoint: the state after this token, also in slot c − 1.
        let checkpoint = step.tok[t].w;
        if checkpoint != 0u {
            store_rows_in(checkpoint - 1u, l, sr);
        }
    }
    store_rows(l, sr);
}

fn store_rows(l: Lane, sr: array<f32, MAX_R>) {
    store_rows_in(slot, l, sr);
}

fn store_rows_in(sl: u32, l: Lane, sr: array<f32, MAX_R>) {
    for (var r = 0u; r < MAX_R; r++) {
        let i = l.part + r * SPLIT;
        if l.live && i < p.d_k {
            state[state_in(sl, l, i)] = sr[r];
        }
    }
}

// ---- chunked form ----

// Scratch per (chunk, head), in words: W [CHUNK, d_k], U [CHUNK, d_v], P [CHUNK, CHUNK],
// q scale e^(G_i)·|q_i|⁻¹/sqrt(d_k) [CHUNK], k scale e^(G_last − G_i)·|k_i|⁻¹ [CHUNK], e^(G_last).
fn chunk_base(c: u32, s: u32) -> u32 {
    return (c * p.n_v + s) * p.chunk_words;
}

fn u_off() -> u32 {
    return CHUNK * p.d_k;
}

fn p_off() -> u32 {
    return CHUNK * (p.d_k + p.d_v);
}

fn qs_off() -> u32 {
    return p_off() + CHUNK * CHUNK;
}

fn ks_off() -> u32 {
    return qs_off() + CHUNK;
}

fn gl_off() -> u32 {
    return ks_off() + CHUNK;
}

var<workgroup> tok: array<vec4<f32>, CHUNK>;  // per token: (G, β, |k|⁻¹, |q|⁻¹/sqrt(d_k))
var<workgroup> wscale: array<f32, CHUNK>;  // per token: β e^G |k|⁻¹ (log γ before the sum)
var<workgroup> amat: array<f32, CHUNK * CHUNK>;  // A, row-major
var<workgroup> tinv: array<f32, CHUNK * CHUNK>;  // (I + A)⁻¹, row-major

@compute @workgroup_size(WG)
fn delta_chunk_prep(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(local_invocation_index) tid: u32) {
    let s = wid.x;
    let c = wid.y;
    let t0 = c * CHUNK;
    if t0 >= step.n_tokens {
        return;
    }
    let n = min(CHUNK, step.n_tokens - t0);
    let kh = s % p.n_k;
    let base = chunk_base(c, s);
    // Padding tokens (i ≥ n) get β = 0 and zero scales, so they add nothing.
    if tid < CHUNK {
        var tv = vec4<f32>(0.0);
        var g = 0.0;
        if tid < n {
            let t = t0 + tid;
            var qq = 0.0;
            var kk = 0.0;
            for (var d = 0u; d < p.d_k; d++) {
                let q = qkv[q_at(t, kh) + d];
                let k = qkv[k_at(t, kh) + d];
                qq += q * q;
                kk += k * k;
            }
            g = log_decay(t, s);
            tv = vec4<f32>(0.0, beta_at(t, s), inverseSqrt(kk + p.eps),
                           inverseSqrt(qq + p.eps) * p.q_scale);
        }
        tok[tid] = tv;
        wscale[tid] = g;
    }
    workgroupBarrier();
    var gsum = 0.0;
    if tid < CHUNK {
        for (var j = 0u; j <= tid; j++) {
            gsum += wscale[j];
        }
    }
    workgroupBarrier();
    if tid < CHUNK {
        tok[tid].x = gsum;
        wscale[tid] = tok[tid].y * exp(gsum) * tok[tid].z;
    }
    workgroupBarrier();
    for (var e = tid; e < CHUNK * CHUNK; e += WG) {
        let i = e / CHUNK;
        let j = e % CHUNK;
        var a_ij = 0.0;
        var p_ij = 0.0;
        if j <= i && i < n {
            let ti = tok[i];
            let tj = tok[j];
            var kk = 0.0;
            var qk = 0.0;
            for (var d = 0u; d < p.d_k; d++) {
                let kj = qkv[k_at(t0 + j, kh) + d];
                kk += qkv[k_at(t0 + i, kh) + d] * kj;
                qk += qkv[q_at(t0 + i, kh) + d] * kj;
            }
            let dec = exp(ti.x - tj.x);
            a_ij = select(0.0, ti.y * dec * ti.z * tj.z * kk, j < i);
            p_ij = dec * ti.w * tj.z * qk;
        }
        amat[e] = a_ij;
        scratch[base + p_off() + e] = p_ij;
    }
    workgroupBarrier();
    // Forward substitution, one column of the unit lower-triangular inverse per thread: column m
    // needs only A and its own earlier entries.
    if tid < CHUNK {
        let m = tid;
        for (var i = 0u; i < CHUNK; i++) {
            var x = select(0.0, 1.0, i == m);
            if i > m {
                for (var j = m; j < i; j++) {
                    x -= amat[i * CHUNK + j] * tinv[j * CHUNK + m];
                }
            }
            tinv[i * CHUNK + m] = x;
        }
    }
    workgroupBarrier();
    for (var e = tid; e < CHUNK * p.d_k; e += WG) {
        let i = e / p.d_k;
        let d = e % p.d_k;
        var acc = 0.0;
        if i < n {
            for (var j = 0u; j <= i; j++) {
                acc += tinv[i * CHUNK + j] * wscale[j] * qkv[k_at(t0 + j, kh) + d];
            }
        }
        scratch[base + e] = acc;
    }
    for (var e = tid; e < CHUNK * p.d_v; e += WG) {
        let i = e / p.d_v;
        let col = e % p.d_v;
        var acc = 0.0;
        if i < n {
            for (var j = 0u; j <= i; j++) {
                acc += tinv[i * CHUNK + j] * tok[j].y * qkv[v_at(t0 + j, s) + col];
            }
        }
        scratch[base + u_off() + e] = acc;
    }
    if tid < CHUNK {
        let ti = tok[tid];
        let g_last = tok[n - 1u].x;
        let valid = tid < n;
        scratch[base + qs_off() + tid] = select(0.0, exp(ti.x) * ti.w, valid);
        scratch[base + ks_off() + tid] = select(0.0, exp(g_last - ti.x) * ti.z, valid);
        if tid == 0u {
            scratch[base + gl_off()] = exp(g_last);
        }
    }
}

var<workgroup> s_sh: array<f32, MAX_DK * COLS>;  // S[:, column block]
var<workgroup> d_sh: array<f32, CHUNK * COLS>;  // Δ of the current chunk

@compute @workgroup_size(WG)
fn delta_chunk_scan(@builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(local_invocation_index) tid: u32) {
    let l = lane(wid, tid);
    // A chunked step holds one sequence.
    slot = step.tok[0].z;
    for (var k = l.part; k < p.d_k; k += SPLIT) {
        s_sh[k * COLS + l.cl] = load_state(l, k);
    }
    workgroupBarrier();
    let n_chunks = (step.n_tokens + CHUNK - 1u) / CHUNK;
    for (var c = 0u; c < n_chunks; c++) {
        let t0 = c * CHUNK;
        let n = min(CHUNK, step.n_tokens - t0);
        let base = chunk_base(c, l.s);
#if SAVE_STATES
        if l.live {
            for (var k = l.part; k < p.d_k; k += SPLIT) {
                states[((c * p.n_v + l.s) * p.d_k + k) * p.d_v + l.col] = s_sh[k * COLS + l.cl];
            }
        }
#endif
        // Δ_i = U_i − W_i S, and the incoming state's share of o_i, rows part + SPLIT·r.
        var o: array<f32, CHUNK / SPLIT>;
        for (var r = 0u; r < CHUNK / SPLIT; r++) {
            let i = l.part + r * SPLIT;
            var dv = 0.0;
            var ov = 0.0;
            if i < n {
                for (var k = 0u; k < p.d_k; k++) {
                    let sk = s_sh[k * COLS + l.cl];
                    dv += scratch[base + i * p.d_k + k] * sk;
                    ov += qkv[q_at(t0 + i, l.kh) + k] * sk;
                }
                var u = 0.0;
                if l.live {
                    u = scratch[base + u_off() + i * p.d_v + l.col];
                }
                dv = u - dv;
                ov *= scratch[base + qs_off() + i];
            }
            d_sh[i * COLS + l.cl] = dv;
            o[r] = ov;
        }
        workgroupBarrier();
        for (var r = 0u; r < CHUNK / SPLIT; r++) {
            let i = l.part + r * SPLIT;
            if l.live && i < n {
                var acc = o[r];
                for (var j = 0u; j <= i; j++) {
                    acc += scratch[base + p_off() + i * CHUNK + j] * d_sh[j * COLS + l.cl];
                }
                out[((t0 + i) * p.n_v + l.s) * p.d_v + l.col] = acc;
            }
        }
        let g_last = scratch[base + gl_off()];
        for (var k = l.part; k < p.d_k; k += SPLIT) {
            var acc = g_last * s_sh[k * COLS + l.cl];
            for (var j = 0u; j < n; j++) {
                let kj = scratch[base + ks_off() + j] * qkv[k_at(t0 + j, l.kh) + k];
                acc += kj * d_sh[j * COLS + l.cl];
            }
            s_sh[k * COLS + l.cl] = acc;
        }
        workgroupBarrier();
    }
    if l.live {
        for (var k = l.part; k < p.d_k; k += SPLIT) {
            state[state_at(l, k)] = s_sh[k * COLS + l.cl];
        }
    }
}
#endif
