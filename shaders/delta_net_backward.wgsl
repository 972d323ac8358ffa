// Gradients of delta_net.wgsl's gated delta rule for a step of one sequence. Per value head s
// (key head s mod n_k) and token, with the state S [d_k, d_v] before the token:
//     S' = γ S;  u = S'ᵀ k̂;  δ = β (v − u);  S_new = S' + k̂ δᵀ;  o = S_newᵀ q̂
// so, walking the tokens backwards with dS the gradient of S_new (at the step's end, the
// gradient of the state the step leaves, `d_state_out`):
//     dS += q̂ doᵀ;   dq̂ = S_new do;   dδ = dSᵀ k̂;   dv = β dδ
//     dk̂ = dS δ − β S' dδ;   dβ = dδ · (v − u);   dS' = dS − β k̂ dδᵀ
//     dγ = Σ dS' ⊙ S;   dS ← γ dS'
// then through β = σ(beta_in), γ = exp(softplus(alpha + dt_bias) · a) (softplus' = σ) and the
// q/k normalisations. What is left in dS at the start is the start state's gradient, which
// the step before receives. Nothing is divided back out of a state: the states before each token are
// recomputed, forwards from the step's start state, in chunks of CHUNK tokens (the start of
// every chunk first, then each chunk's tokens again when its turn comes).
// Three entry points, each with at most 9 storage buffers:
// delta_net_backward_replay: the state at the start of every chunk, from `state_in`.
// delta_net_backward: a workgroup per value head, a thread per state column (d_v ≤ WG), each
//   keeping its column of S and of dS in registers (columns evolve independently, so the
//   replays need no barriers); the sums over columns (dq̂, dk̂, dβ, dγ) go through workgroup
//   memory. Writes v's part of dqkv and, per value head, the gradients of q̂, k̂, β and γ into
//   the scratch; `d_state` holds the end state's gradient on entry, the start state's on exit.
//   (PER_THREAD: a subgroup per block of 32 columns instead, its sums kept per block; below.)
// delta_net_backward_qk: a workgroup per (token, key head) sums the q̂/k̂ gradients over the
//   value heads that read the key head and takes them through the normalisations into q's and
//   k's parts of dqkv, and those value heads' β and γ gradients into d_beta and d_alpha.
// Scratch (one buffer, offsets in floats from the params): chunk states [chunks, n_v, d_k,
// d_v], token states [n_v, CHUNK, d_k, d_v], dqk [T, n_v, blocks, 2, d_k], dgate [T, n_v,
// blocks, 2] (blocks = 1 in the workgroup layout).
// Macros: WG, MAX_DK (≥ d_k), CHUNK; PER_THREAD with COLS (the per-lane main pass, below).

#include "common/step.wgsl"

struct Params {
    n_k: u32,
    n_v: u32,
    d_k: u32,
    d_v: u32,
    eps: f32,
    q_scale: f32,    // 1 / sqrt(d_k)
    token_off: u32,  // scratch offsets, in floats, of the token states,
    dqk_off: u32,    // of dqk
    gate_off: u32,   // and of dgate (the chunk states start at 0)
    blocks: u32,     // column blocks per value head whose sums dqk and dgate hold apart
}

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read> alpha: array<f32>;
@group(0) @binding(2) var<storage, read> beta_in: array<f32>;
@group(0) @binding(3) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(5) var<storage, read> state_in: array<f32>;
@group(0) @binding(6) var<storage, read> d_out: array<f32>;
@group(0) @binding(7) var<storage, read_write> d_state: array<f32>;
@group(0) @binding(8) var<storage, read_write> dqkv: array<f32>;
@group(0) @binding(9) var<storage, read_write> d_alpha: array<f32>;
@group(0) @binding(10) var<storage, read_write> d_beta: array<f32>;
@group(0) @binding(11) var<storage, read_write> scratch: array<f32>;
@group(0) @binding(12) var<uniform> p: Params;
@group(0) @binding(13) var<uniform> step: Step;

#include "common/delta_rule.wgsl"

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// The token's normalised q̂ and k̂, shared by the workgroup.
var<workgroup> qn: array<f32, MAX_DK>;
var<workgroup> kn: array<f32, MAX_DK>;
// Sums over columns: 8 rows of (dq̂, dk̂) at a time, then the scalars (dβ, dγ).
const RB = 8u;
var<workgroup> red: array<vec2<f32>, RB * WG>;

// Fills qn and kn for token t of key head kh (all threads take part): each thread loads its
// share of the rows and sums their squares, and the sums meet in a tree through `red` (on CPU
// adapters every thread loading every row cost more than the barriers).
fn load_token(t: u32, kh: u32, tid: u32) {
    workgroupBarrier();
    var part = vec2<f32>(0.0);
    for (var i = tid; i < p.d_k; i += WG) {
        let qv = qkv[q_at(t, kh) + i];
        let kv = qkv[k_at(t, kh) + i];
        qn[i] = qv;
        kn[i] = kv;
        part += vec2<f32>(qv * qv, kv * kv);
    }
    red[tid] = part;
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        workgroupBarrier();
        if tid < h {
            red[tid] += red[tid + h];
        }
    }
    workgroupBarrier();
    let rq = inverseSqrt(red[0].x + p.eps) * p.q_scale;
    let rk = inverseSqrt(red[0].y + p.eps);
    for (var i = tid; i < p.d_k; i += WG) {
        qn[i] *= rq;
        kn[i] *= rk;
    }
    workgroupBarrier();
}

// Column c of head s at row r of a [.., n_v, d_k, d_v] state array whose block is `blk`.
fn state_index(blk: u32, s: u32, r: u32, c: u32) -> u32 {
    return ((blk * p.n_v + s) * p.d_k + r) * p.d_v + c;
}

// Column c, row r of head s's state before token i of the chunk being walked.
fn token_index(s: u32, i: u32, r: u32, c: u32) -> u32 {
    return p.token_off + ((s * CHUNK + i) * p.d_k + r) * p.d_v + c;
}

// Where column block blk of value head s's gradients of q̂ (then, d_k further, of k̂) for
// token t start.
fn dqk_index(t: u32, s: u32, blk: u32) -> u32 {
    return p.dqk_off + (((t * p.n_v + s) * p.blocks + blk) * 2u) * p.d_k;
}

// Where column block blk of value head s's (dβ, dγ) for token t sit.
fn gate_index(t: u32, s: u32, blk: u32) -> u32 {
    return p.gate_off + ((t * p.n_v + s) * p.blocks + blk) * 2u;
}

@compute @workgroup_size(WG)
fn delta_net_backward_replay(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let s = wid.x;
    let kh = s % p.n_k;
    let c = tid;
    let live = c < p.d_v;
    let cc = min(c, p.d_v - 1u);
    var sc: array<f32, MAX_DK>;
    for (var r = 0u; r < p.d_k; r++) {
        sc[r] = state_in[state_index(0u, s, r, cc)];
    }
    // Nothing after the last chunk's start is needed (a step of one chunk only copies).
    let last = (step.n_tokens - 1u) / CHUNK * CHUNK;
    for (var t = 0u; t <= last; t++) {
        if t % CHUNK == 0u && live {
            for (var r = 0u; r < p.d_k; r++) {
                scratch[state_index(t / CHUNK, s, r, c)] = sc[r];
            }
        }
        if t < last {
            load_token(t, kh, tid);
            advance(&sc, t, s, cc);
        }
    }
}

// One token of the recurrence on column cc of head s: S ← γ S + k̂ δᵀ.
fn advance(sc: ptr<function, array<f32, MAX_DK>>, t: u32, s: u32, cc: u32) {
    let g = exp(log_decay(t, s));
    let b = sigmoid(beta_in[t * p.n_v + s]);
    var u = 0.0;
    for (var r = 0u; r < p.d_k; r++) {
        u += g * (*sc)[r] * kn[r];
    }
    let dl = b * (qkv[v_at(t, s) + cc] - u);
    for (var r = 0u; r < p.d_k; r++) {
        (*sc)[r] = g * (*sc)[r] + kn[r] * dl;
    }
}

#if PER_THREAD
// CPU adapters with subgroups of at least COLS lanes (as delta_net.wgsl's per-lane form): a
// workgroup is one subgroup of COLS lanes over 4·COLS consecutive columns (column block blk)
// of one value head, each lane holding four columns of S and of dS as a vec4 per row, without
// barriers or workgroup memory. A token's q̂ and k̂ rows reach every lane by shuffles from the
// lanes' shares; the sums over columns (dq̂ and dk̂ per row, dβ, dγ) are added across the lanes
// by xor shuffles and kept per column block, which the qk pass adds up.

// v summed over the workgroup's lanes, in every lane.
fn lanes_sum2(v: vec2<f32>) -> vec2<f32> {
    var s = v;
    for (var b = 1u; b < COLS; b <<= 1u) {
        s += subgroupShuffleXor(s, b);
    }
    return s;
}

// (1 / |q|·q_scale, 1 / |k|) of token t, key head kh: each lane's rows me, me + COLS, …
// summed in squares, then across the lanes.
fn token_scales(t: u32, kh: u32, me: u32) -> vec2<f32> {
    var part = vec2<f32>(0.0);
    for (var i = me; i < p.d_k; i += COLS) {
        let q = qkv[q_at(t, kh) + i];
        let k = qkv[k_at(t, kh) + i];
        part += vec2<f32>(q * q, k * k);
    }
    let tot = lanes_sum2(part);
    return vec2<f32>(inverseSqrt(tot.x + p.eps) * p.q_scale, inverseSqrt(tot.y + p.eps));
}

// This lane's share of rows i0 .. i0 + COLS of token t's (q̂, k̂): row i0 + me.
fn qk_share(t: u32, kh: u32, i0: u32, me: u32, scales: vec2<f32>) -> vec2<f32> {
    let i = min(i0 + me, p.d_k - 1u);
    return vec2<f32>(qkv[q_at(t, kh) + i], qkv[k_at(t, kh) + i]) * scales;
}

// u = (γS)ᵀk̂ for the lane's four columns of S (the state before token t).
fn decayed_sk(sc: ptr<function, array<vec4<f32>, MAX_DK>>, g: f32, t: u32, kh: u32, me: u32,
              scales: vec2<f32>) -> vec4<f32> {
    var u = vec4<f32>(0.0);
    for (var i0 = 0u; i0 < p.d_k; i0 += COLS) {
        let m = qk_share(t, kh, i0, me, scales);
        for (var j = 0u; j < min(COLS, p.d_k - i0); j++) {
            u += g * (*sc)[i0 + j] * subgroupShuffle(m, j).y;
        }
    }
    return u;
}

fn scratch4(at: u32) -> vec4<f32> {
    return vec4<f32>(scratch[at], scratch[at + 1u], scratch[at + 2u], scratch[at + 3u]);
}

fn put_scratch4(at: u32, v: vec4<f32>) {
    scratch[at] = v.x;
    scratch[at + 1u] = v.y;
    scratch[at + 2u] = v.z;
    scratch[at + 3u] = v.w;
}

@compute @workgroup_size(COLS)
fn delta_net_backward(@builtin(workgroup_id) wid: vec3<u32>,
                      @builtin(subgroup_invocation_id) me: u32) {
    let s = wid.x;
    let kh = s % p.n_k;
    let blk = wid.y;
    let col = 4u * (blk * COLS + me);
    let live = col < p.d_v;
    let zero = vec4<f32>(0.0);
    let n = step.n_tokens;
    var sc: array<vec4<f32>, MAX_DK>;
    var ds: array<vec4<f32>, MAX_DK>;
    for (var r = 0u; r < p.d_k; r++) {
        ds[r] = zero;
        if live {
            let at = state_index(0u, s, r, col);
            ds[r] = vec4<f32>(d_state[at], d_state[at + 1u], d_state[at + 2u], d_state[at + 3u]);
        }
    }
    let n_chunks = (n + CHUNK - 1u) / CHUNK;
    for (var ch = n_chunks; ch > 0u; ch--) {
        let t0 = (ch - 1u) * CHUNK;
        let t1 = min(t0 + CHUNK, n);
        // The states before each of the chunk's tokens.
        for (var r = 0u; r < p.d_k; r++) {
            sc[r] = select(zero, scratch4(state_index(ch - 1u, s, r, col)), live);
        }
        for (var t = t0; t < t1; t++) {
            if live {
                for (var r = 0u; r < p.d_k; r++) {
                    put_scratch4(token_index(s, t - t0, r, col), sc[r]);
                }
            }
            let scales = token_scales(t, kh, me);
            let g = exp(log_decay(t, s));
            let u = decayed_sk(&sc, g, t, kh, me, scales);
            var v = zero;
            if live {
                v = v_row4(t, s, col);
            }
            let dl = sigmoid(beta_in[t * p.n_v + s]) * (v - u);
            for (var i0 = 0u; i0 < p.d_k; i0 += COLS) {
                let m = qk_share(t, kh, i0, me, scales);
                for (var j = 0u; j < min(COLS, p.d_k - i0); j++) {
                    sc[i0 + j] = g * sc[i0 + j] + subgroupShuffle(m, j).y * dl;
                }
            }
        }
        for (var t = t1; t > t0; t--) {
            let tt = t - 1u;
            for (var r = 0u; r < p.d_k; r++) {
                sc[r] = select(zero, scratch4(token_index(s, tt - t0, r, col)), live);
            }
            let scales = token_scales(tt, kh, me);
            let g = exp(log_decay(tt, s));
            let b = sigmoid(beta_in[tt * p.n_v + s]);
            var v = zero;
            var d_o = zero;
            if live {
                v = v_row4(tt, s, col);
                let at = (tt * p.n_v + s) * p.d_v + col;
                d_o = vec4<f32>(d_out[at], d_out[at + 1u], d_out[at + 2u], d_out[at + 3u]);
            }
            let u = decayed_sk(&sc, g, tt, kh, me, scales);
            let dl = b * (v - u);
            var ddl = zero;
            for (var i0 = 0u; i0 < p.d_k; i0 += COLS) {
                let m = qk_share(tt, kh, i0, me, scales);
                for (var j = 0u; j < min(COLS, p.d_k - i0); j++) {
                    let qk = subgroupShuffle(m, j);
                    ds[i0 + j] += qk.x * d_o;
                    ddl += ds[i0 + j] * qk.y;
                }
            }
            if live {
                let at = v_at(tt, s) + col;
                dqkv[at] = b * ddl.x;
                dqkv[at + 1u] = b * ddl.y;
                dqkv[at + 2u] = b * ddl.z;
                dqkv[at + 3u] = b * ddl.w;
            }
            // Per row: dq̂ and dk̂ summed over the columns; then dS for the token before.
            var dg = zero;
            let at = dqk_index(tt, s, blk);
            for (var i0 = 0u; i0 < p.d_k; i0 += COLS) {
                let m = qk_share(tt, kh, i0, me, scales);
                for (var j = 0u; j < min(COLS, p.d_k - i0); j++) {
                    let r = i0 + j;
                    let kn = subgroupShuffle(m, j).y;
                    let sp = g * sc[r];
                    let x = lanes_sum2(vec2<f32>(dot(sp + kn * dl, d_o), dot(ds[r], dl) - b * dot(ddl, sp)));
                    if me == 0u {
                        scratch[at + r] = x.x;
                        scratch[at + p.d_k + r] = x.y;
                    }
                    let dsp = ds[r] - b * kn * ddl;
                    dg += dsp * sc[r];
                    ds[r] = g * dsp;
                }
            }
            let gates = lanes_sum2(vec2<f32>(dot(ddl, v - u), dot(dg, vec4<f32>(1.0))));
            if me == 0u {
                scratch[gate_index(tt, s, blk)] = gates.x;
                scratch[gate_index(tt, s, blk) + 1u] = gates.y;
            }
        }
    }
    if live {
        for (var r = 0u; r < p.d_k; r++) {
            let at = state_index(0u, s, r, col);
            d_state[at] = ds[r].x;
            d_state[at + 1u] = ds[r].y;
            d_state[at + 2u] = ds[r].z;
            d_state[at + 3u] = ds[r].w;
        }
    }
}

// Token t's v for value head s, columns col .. col + 4.
fn v_row4(t: u32, s: u32, col: u32) -> vec4<f32> {
    let at = v_at(t, s) + col;
    return vec4<f32>(qkv[at], qkv[at + 1u], qkv[at + 2u], qkv[at + 3u]);
}
#else
@compute @workgroup_size(WG)
fn delta_net_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let s = wid.x;
    let kh = s % p.n_k;
    let c = tid;
    let live = c < p.d_v;
    let cc = min(c, p.d_v - 1u);
    let n = step.n_tokens;
    var sc: array<f32, MAX_DK>;
    var ds: array<f32, MAX_DK>;
    for (var r = 0u; r < p.d_k; r++) {
        ds[r] = d_state[state_index(0u, s, r, cc)];
    }
    let n_chunks = (n + CHUNK - 1u) / CHUNK;
    for (var ch = n_chunks; ch > 0u; ch--) {
        let t0 = (ch - 1u) * CHUNK;
        let t1 = min(t0 + CHUNK, n);
        // The states before each of the chunk's tokens.
        for (var r = 0u; r < p.d_k; r++) {
            sc[r] = scratch[state_index(ch - 1u, s, r, cc)];
        }
        for (var t = t0; t < t1; t++) {
            if live {
                for (var r = 0u; r < p.d_k; r++) {
                    scratch[token_index(s, t - t0, r, c)] = sc[r];
                }
            }
            load_token(t, kh, tid);
            advance(&sc, t, s, cc);
        }
        for (var t = t1; t > t0; t--) {
            let tt = t - 1u;
            for (var r = 0u; r < p.d_k; r++) {
                sc[r] = scratch[token_index(s, tt - t0, r, cc)];
            }
            load_token(tt, kh, tid);
            let ld = log_decay(tt, s);
            let g = exp(ld);
            let b = sigmoid(beta_in[tt * p.n_v + s]);
            let v = qkv[v_at(tt, s) + cc];
            var u = 0.0;
            for (var r = 0u; r < p.d_k; r++) {
                u += g * sc[r] * kn[r];
            }
            let dl = b * (v - u);
            let d_o = select(0.0, d_out[(tt * p.n_v + s) * p.d_v + cc], live);
            var ddl = 0.0;
            for (var r = 0u; r < p.d_k; r++) {
                ds[r] += qn[r] * d_o;
                ddl += ds[r] * kn[r];
            }
            ddl = select(0.0, ddl, live);
            if live {
                dqkv[v_at(tt, s) + c] = b * ddl;
            }
            // dq̂ and dk̂, RB rows at a time: this column's share, summed over the columns.
            for (var r0 = 0u; r0 < p.d_k; r0 += RB) {
                for (var i = 0u; i < RB; i++) {
                    let r = min(r0 + i, p.d_k - 1u);
                    let sp = g * sc[r];
                    let x = vec2<f32>((sp + kn[r] * dl) * d_o, ds[r] * dl - b * ddl * sp);
                    red[i * WG + tid] = select(vec2<f32>(0.0), x, live);
                }
                workgroupBarrier();
                if tid < RB && r0 + tid < p.d_k {
                    var sum = vec2<f32>(0.0);
                    for (var j = 0u; j < WG; j++) {
                        sum += red[tid * WG + j];
                    }
                    let at = dqk_index(tt, s, 0u) + r0 + tid;
                    scratch[at] = sum.x;
                    scratch[at + p.d_k] = sum.y;
                }
                workgroupBarrier();
            }
            // dβ and dγ; then dS for the token before.
            var dg = 0.0;
            for (var r = 0u; r < p.d_k; r++) {
                let dsp = ds[r] - b * kn[r] * ddl;
                dg += dsp * sc[r];
                ds[r] = g * dsp;
            }
            red[tid] = select(vec2<f32>(0.0), vec2<f32>(ddl * (v - u), dg), live);
            workgroupBarrier();
            if tid == 0u {
                var sum = vec2<f32>(0.0);
                for (var j = 0u; j < WG; j++) {
                    sum += red[j];
                }
                scratch[gate_index(tt, s, 0u)] = sum.x;
                scratch[gate_index(tt, s, 0u) + 1u] = sum.y;
            }
            workgroupBarrier();
        }
    }
    if live {
        for (var r = 0u; r < p.d_k; r++) {
            d_state[state_index(0u, s, r, c)] = ds[r];
        }
    }
}
#endif

var<workgroup> sums: array<vec4<f32>, WG>;

@compute @workgroup_size(WG)
fn delta_net_backward_qk(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let kh = wid.x;
    let t = wid.y;
    let live = t < step.n_tokens;
    // Σq², Σk², Σ q·Gq, Σ k·Gk, with G summed over the value heads reading kh; G goes to
    // q's and k's places in dqkv (each thread's own), where the second pass finishes it.
    var part = vec4<f32>(0.0);
    if live {
        for (var i = tid; i < p.d_k; i += WG) {
            var gq = 0.0;
            var gk = 0.0;
            for (var s = kh; s < p.n_v; s += p.n_k) {
                for (var blk = 0u; blk < p.blocks; blk++) {
                    let at = dqk_index(t, s, blk) + i;
                    gq += scratch[at];
                    gk += scratch[at + p.d_k];
                }
            }
            dqkv[q_at(t, kh) + i] = gq;
            dqkv[k_at(t, kh) + i] = gk;
            let qv = qkv[q_at(t, kh) + i];
            let kv = qkv[k_at(t, kh) + i];
            part += vec4<f32>(qv * qv, kv * kv, qv * gq, kv * gk);
        }
    }
    sums[tid] = part;
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        workgroupBarrier();
        if tid < h {
            sums[tid] += sums[tid + h];
        }
    }
    workgroupBarrier();
    if !live {
        return;
    }
    let tot = sums[0];
    // x̂ = c · x / sqrt(Σx² + eps): dx = c (ρ G − x ρ³ Σ x·G), ρ = 1 / sqrt(Σx² + eps).
    let rq = inverseSqrt(tot.x + p.eps);
    let rk = inverseSqrt(tot.y + p.eps);
    for (var i = tid; i < p.d_k; i += WG) {
        let gq = dqkv[q_at(t, kh) + i];
        let gk = dqkv[k_at(t, kh) + i];
        let qv = qkv[q_at(t, kh) + i];
        let kv = qkv[k_at(t, kh) + i];
        dqkv[q_at(t, kh) + i] = p.q_scale * (rq * gq - qv * rq * rq * rq * tot.z);
        dqkv[k_at(t, kh) + i] = rk * gk - kv * rk * rk * rk * tot.w;
    }
    // The gates of the value heads that read this key head: β = σ(beta_in), and
    // γ = exp(softplus(x) · a) with x = alpha + dt_bias, so dγ/dx = γ · a · σ(x).
    for (var s = kh + tid * p.n_k; s < p.n_v; s += WG * p.n_k) {
        let i = t * p.n_v + s;
        var dg = vec2<f32>(0.0);
        for (var blk = 0u; blk < p.blocks; blk++) {
            dg += vec2<f32>(scratch[gate_index(t, s, blk)], scratch[gate_index(t, s, blk) + 1u]);
        }
        let b = sigmoid(beta_in[i]);
        d_beta[i] = dg.x * b * (1.0 - b);
        let x = alpha[i] + dt_bias[s];
        d_alpha[i] = dg.y * exp(log_decay(t, s)) * a[s] * sigmoid(x);
    }
}
