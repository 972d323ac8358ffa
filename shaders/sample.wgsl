// Picks the next token from one row of logits, in a single workgroup.
//
// 1. penalties on the raw logits (llama.cpp's rules): repetition divides positive logits and
//    multiplies negative ones by `repeat_penalty`; presence subtracts `presence_penalty`, once
//    per distinct token of the window. The window is the `n_penalty` history entries before
//    `window_end` in `recent`, a ring indexed by history position, so a token sampled on the
//    GPU joins the next step's window without the host (each entry is applied only at its
//    last occurrence in the window);
// 2. greedy: the arg-max (lowest id on ties). Otherwise logits / temperature, then
// 3. top-k: everything below the k-th largest scaled logit is dropped;
// 4. top-p: likewise below the largest probability threshold whose kept mass is ≥ top_p;
// 5. the host's uniform draw `u` picks, in vocabulary order, the token where the running
//    kept mass crosses u × (kept mass).
// With top-k ≤ WG (the agents' settings) one more pass gathers a short list that holds every
// top-k survivor, bounded below by the k-th largest of the threads' own maxima, and steps
// 3–5 run on that list. With top-p alone, two more passes (the whole mass, then the list of
// the TOP_P_LIST largest) do, when that list holds top_p of the mass. Otherwise (top-k
// larger, a list past WG entries: ties, or top-p reaching further) steps 3–4 are bitwise
// searches over order-preserving u32 keys, 32 and 31 passes over the vocabulary (exact, no
// sort). Every path is deterministic: the list is put in vocabulary order before anything
// is summed.
// Macros: WG, RING (entries of `recent`).

struct Params {
    vocab: u32,
    top_k: u32,          // 0 = off
    n_penalty: u32,      // window length (0 = penalties off)
    greedy: u32,
    temperature: f32,
    top_p: f32,          // 1 = off
    repeat_penalty: f32, // 1 = off
    presence_penalty: f32,
    u: f32,              // uniform draw in [0, 1)
    row: u32,            // which logits row to read
    window_end: u32,     // history length: the window is [window_end - n_penalty, window_end)
}

@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(1) var<storage, read> recent: array<u32>;
@group(0) @binding(2) var<storage, read_write> work: array<f32>;
@group(0) @binding(3) var<storage, read_write> result: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> red_f: array<f32, WG>;
var<workgroup> red_u: array<u32, WG>;
var<workgroup> chosen: u32;
var<workgroup> thread_max: array<f32, WG>;
var<workgroup> list_i: array<u32, WG>;
var<workgroup> list_v: array<f32, WG>;
var<workgroup> list_p: array<f32, WG>;
var<workgroup> list_len: atomic<u32>;
var<workgroup> list_len_u: u32;
var<workgroup> top: atomic<u32>;
var<workgroup> list_holds: u32;

// Values whose list answers top-p alone (the bound: this many threads' maxima reach it).
const TOP_P_LIST = 64u;

fn key(f: f32) -> u32 {
    let b = bitcast<u32>(f);
    return select(b | 0x80000000u, ~b, (b >> 31u) == 1u);
}

fn sum_f(tid: u32, v: f32) -> f32 {
    workgroupBarrier();
    red_f[tid] = v;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if tid < s {
            red_f[tid] += red_f[tid + s];
        }
    }
    workgroupBarrier();
    return red_f[0];
}

fn sum_u(tid: u32, v: u32) -> u32 {
    workgroupBarrier();
    red_u[tid] = v;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if tid < s {
            red_u[tid] += red_u[tid + s];
        }
    }
    workgroupBarrier();
    return red_u[0];
}

// 1 when value i (< n) scaled by inv_t has a key of at least `cand`.
fn at_least(i: u32, n: u32, inv_t: f32, cand: u32) -> u32 {
    return select(0u, 1u, i < n && key(work[min(i, n - 1u)] * inv_t) >= cand);
}

// Probability i (< n) where its bits are at least `cand`, else 0.
fn kept(i: u32, n: u32, cand: u32) -> f32 {
    let pr = work[min(i, n - 1u)];
    return select(0.0, pr, i < n && bitcast<u32>(pr) >= cand);
}

@compute @workgroup_size(WG)
fn sample(@builtin(local_invocation_index) tid: u32) {
    let n = p.vocab;
    let src = p.row * n;
    for (var i = tid; i < n; i += WG) {
        work[i] = logits[src + i];
    }
    storageBarrier();
    workgroupBarrier();
    let start = p.window_end - p.n_penalty;
    for (var j = tid; j < p.n_penalty; j += WG) {
        let tok = recent[(start + j) % RING];
        var last = true;
        for (var k = j + 1u; k < p.n_penalty; k++) {
            if recent[(start + k) % RING] == tok {
                last = false;
                break;
            }
        }
        if last && tok < n {
            var l = work[tok];
            l = select(l * p.repeat_penalty, l / p.repeat_penalty, l > 0.0);
            work[tok] = l - p.presence_penalty;
        }
    }
    storageBarrier();
    workgroupBarrier();

    // Arg-max (lowest id on ties): always a candidate, and the fallback pick.
    var best = -3.4e38;
    var best_i = 0xffffffffu;
    for (var i = tid; i < n; i += WG) {
        let l = work[i];
        if l > best {
            best = l;
            best_i = i;
        }
    }
    red_f[tid] = best;
    red_u[tid] = best_i;
    thread_max[tid] = best;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if tid < s {
            let o = red_f[tid + s];
            let oi = red_u[tid + s];
            if o > red_f[tid] || (o == red_f[tid] && oi < red_u[tid]) {
                red_f[tid] = o;
                red_u[tid] = oi;
            }
        }
    }
    workgroupBarrier();
    let max_logit = red_f[0];
    let argmax = red_u[0];
    if p.greedy != 0u {
        if tid == 0u {
            result[0] = argmax;
        }
        return;
    }

    let inv_t = 1.0 / p.temperature;
    let m = max_logit * inv_t;
    if p.top_k > 0u && p.top_k < n && p.top_k <= WG {
        let len = gather_list(tid, n, inv_t, p.top_k);
        if len >= p.top_k && len <= WG && pick_from_list(tid, len, inv_t, m, p.top_k, 0.0) {
            return;
        }
    } else if (p.top_k == 0u || p.top_k >= n) && p.top_p < 1.0 {
        // Top-p alone: when the TOP_P_LIST largest values (and their ties) hold top_p of the
        // whole vocabulary's mass, every survivor is among them.
        let total = full_mass(tid, n, inv_t, m);
        let len = gather_list(tid, n, inv_t, TOP_P_LIST);
        if len >= TOP_P_LIST && len <= WG && pick_from_list(tid, len, inv_t, m, 0u, total) {
            return;
        }
    }
    pick_by_search(tid, n, inv_t, m, argmax);
}

// Σ exp(scaled logit − m) over the vocabulary, in every thread.
fn full_mass(tid: u32, n: u32, inv_t: f32, m: f32) -> f32 {
    var z = 0.0;
    for (var i = tid; i < n; i += WG) {
        z += exp(work[i] * inv_t - m);
    }
    return sum_f(tid, z);
}

// Gathers into `list_i` every index whose scaled key is at least the k-th largest of the
// threads' maxima: k distinct values reach that bound, so the k-th largest scaled logit
// does too, and with it every top-k survivor (ties included). Returns how many there are
// (the list holds the first WG of them).
fn gather_list(tid: u32, n: u32, inv_t: f32, k: u32) -> u32 {
    if tid == 0u {
        atomicStore(&list_len, 0u);
        atomicStore(&top, 0u);
    }
    workgroupBarrier();
    let mine = key(thread_max[tid] * inv_t);
    var reach = 0u;
    for (var s = 0u; s < WG; s++) {
        reach += select(0u, 1u, key(thread_max[s] * inv_t) >= mine);
    }
    if reach >= k {
        atomicMax(&top, mine);
    }
    workgroupBarrier();
    let bound = atomicLoad(&top);
    for (var i = tid; i < n; i += WG) {
        if key(work[i] * inv_t) >= bound {
            let slot = atomicAdd(&list_len, 1u);
            if slot < WG {
                list_i[slot] = i;
            }
        }
    }
    workgroupBarrier();
    if tid == 0u {
        list_len_u = atomicLoad(&list_len);
    }
    return workgroupUniformLoad(&list_len_u);
}

// Steps 3–5 on the gathered list (`len` ≤ WG entries, one per thread), with top-k `k` (0:
// off) and the mass top-p is measured against: the list's own (total 0: the list holds
// every top-k survivor) or the whole vocabulary's, in which case the list must hold at
// least top_p of it (returns false, having picked nothing, when it does not).
fn pick_from_list(tid: u32, len: u32, inv_t: f32, m: f32, k: u32, total_in: f32) -> bool {
    let mine = tid < len;
    // Vocabulary order: each entry's rank among the (distinct) indices.
    var idx = 0u;
    var rank = 0u;
    if mine {
        idx = list_i[tid];
        for (var s = 0u; s < len; s++) {
            rank += select(0u, 1u, list_i[s] < idx);
        }
    }
    if tid == 0u {
        atomicStore(&top, 0u);
    }
    workgroupBarrier();
    if mine {
        list_i[rank] = idx;
        list_v[rank] = work[idx] * inv_t;
    }
    workgroupBarrier();

    // Top-k: the k-th largest key is the largest one that at least k keys reach.
    var k_mine = 0u;
    if mine {
        k_mine = key(list_v[tid]);
        var reach = 0u;
        for (var s = 0u; s < len; s++) {
            reach += select(0u, 1u, key(list_v[s]) >= k_mine);
        }
        if k > 0u && reach >= k {
            atomicMax(&top, k_mine);
        }
    }
    workgroupBarrier();
    let kth = atomicLoad(&top);
    var pr = 0.0;
    if mine && k_mine >= kth {
        pr = exp(list_v[tid] - m);
    }
    list_p[tid] = pr;
    workgroupBarrier();
    if tid == 0u {
        atomicStore(&top, 0u);
    }
    // Every thread sums the list in the same order: the same totals everywhere.
    var in_list = 0.0;
    for (var s = 0u; s < len; s++) {
        in_list += list_p[s];
    }
    let total = select(in_list, total_in, total_in > 0.0);
    if tid == 0u {
        list_holds = select(0u, 1u, in_list >= p.top_p * total);
    }
    if workgroupUniformLoad(&list_holds) == 0u {
        return false;
    }

    // Top-p: the largest kept probability whose mass at or above it reaches top_p × total.
    var pth = 0u;
    if p.top_p < 1.0 {
        workgroupBarrier();
        if pr > 0.0 {
            let b = bitcast<u32>(pr);
            var mass = 0.0;
            for (var s = 0u; s < len; s++) {
                mass += select(0.0, list_p[s], bitcast<u32>(list_p[s]) >= b);
            }
            if mass >= p.top_p * total {
                atomicMax(&top, b);
            }
        }
        workgroupBarrier();
        pth = atomicLoad(&top);
    }

    if tid == 0u {
        var kept = 0.0;
        for (var s = 0u; s < len; s++) {
            let q = list_p[s];
            kept += select(0.0, q, q > 0.0 && bitcast<u32>(q) >= pth);
        }
        let goal = p.u * kept;
        var acc = 0.0;
        var pick = 0xffffffffu;
        var last = 0xffffffffu;
        for (var s = 0u; s < len; s++) {
            let q = list_p[s];
            if q > 0.0 && bitcast<u32>(q) >= pth {
                last = list_i[s];
                acc += q;
                if acc > goal && pick == 0xffffffffu {
                    pick = list_i[s];
                }
            }
        }
        result[0] = select(pick, last, pick == 0xffffffffu);
    }
    return true;
}

// Steps 3–5 over the whole vocabulary by bitwise searches (any top-k, ties of any size).
fn pick_by_search(tid: u32, n: u32, inv_t: f32, m: f32, argmax: u32) {
    // Top-k threshold: the largest key T with |{i : key_i >= T}| >= k. The two searches pass
    // over the vocabulary 32 and 31 times, four values per iteration: llvmpipe ends every
    // loop of an invocation once the iterations of all its loops reach 65,535 (a lane of
    // 256 over Qwen3.5's 248,320 values would pass it, one value per iteration).
    var kth = 0u;
    if p.top_k > 0u && p.top_k < n {
        for (var bit = 31i; bit >= 0i; bit--) {
            let cand = kth | (1u << u32(bit));
            var c = 0u;
            for (var i = 4u * tid; i < n; i += 4u * WG) {
                c += at_least(i, n, inv_t, cand) + at_least(i + 1u, n, inv_t, cand)
                   + at_least(i + 2u, n, inv_t, cand) + at_least(i + 3u, n, inv_t, cand);
            }
            if sum_u(tid, c) >= p.top_k {
                kth = cand;
            }
        }
    }

    // Probabilities of the top-k survivors, unnormalised (max = 1).
    var z = 0.0;
    for (var i = tid; i < n; i += WG) {
        let l = work[i] * inv_t;
        let pr = select(0.0, exp(l - m), key(l) >= kth);
        work[i] = pr;
        z += pr;
    }
    storageBarrier();
    let total = sum_f(tid, z);

    // Top-p threshold over positive floats (their bits order like their values).
    var pth = 0u;
    if p.top_p < 1.0 {
        let need = p.top_p * total;
        for (var bit = 30i; bit >= 0i; bit--) {
            let cand = pth | (1u << u32(bit));
            var s = 0.0;
            for (var i = 4u * tid; i < n; i += 4u * WG) {
                s += kept(i, n, cand) + kept(i + 1u, n, cand) + kept(i + 2u, n, cand)
                   + kept(i + 3u, n, cand);
            }
            if sum_f(tid, s) >= need {
                pth = cand;
            }
        }
    }

    // Each thread owns a contiguous span; spans' kept masses are scanned in order.
    let span = (n + WG - 1u) / WG;
    let lo = min(tid * span, n);
    let hi = min(lo + span, n);
    var mine = 0.0;
    for (var i = lo; i < hi; i++) {
        let pr = work[i];
        mine += select(0.0, pr, pr > 0.0 && bitcast<u32>(pr) >= pth);
    }
    workgroupBarrier();
    red_f[tid] = mine;
    if tid == 0u {
        chosen = argmax;
    }
    workgroupBarrier();
    // Exclusive prefix of the spans' masses (WG is small; a serial scan per thread is fine).
    var before = 0.0;
    for (var j = 0u; j < tid; j++) {
        before += red_f[j];
    }
    var kept = 0.0;
    for (var j = 0u; j < WG; j++) {
        kept += red_f[j];
    }
    let goal = p.u * kept;
    if mine > 0.0 && goal >= before && goal < before + mine {
        var acc = before;
        var pick = 0xffffffffu;
        var last = 0xffffffffu;
        for (var i = lo; i < hi; i++) {
            let pr = work[i];
            if pr > 0.0 && bitcast<u32>(pr) >= pth {
                last = i;
                acc += pr;
                if acc > goal && pick == 0xffffffffu {
                    pick = i;
                }
            }
        }
        chosen = select(pick, last, pick == 0xffffffffu);
    }
    workgroupBarrier();
    if tid == 0u {
        result[0] = chosen;
    }
}
