// y[t, row_offset + r] (+)= sum_c W[r, c] * x[t, c] for the step's tokens.
// Each decoded weight is reused for every token of a tile: decode uses TILE = 1, prefill a
// larger tile.
// Macros: one weight type flag (see common/quant.wgsl), WG, TILE, ACCUMULATE (adds into y),
// ROW_PER_THREAD (the layout for CPU-like adapters, below) and, with it, the weight family
// (BLOCK32: Q4_0/Q4_1/Q8_0, KQUANT: Q4_K/Q5_K/Q6_K, neither: F16/BF16/F32), RPT rows per
// thread (4, 8 with ROWS8, 16 with ROWS8 and ROWS16), tokens per thread (TILE8: 8; FEW_TOKENS
// with TILE4: 4, alone: 2; neither: 1), SUBGROUPS (native only: activations shared by subgroup
// broadcasts) and SCALES4 (Q4_K/Q5_K: the block's scale words as one vec4, bound again at
// binding 7).

struct Params {
    rows: u32,        // rows in this weight chunk
    cols: u32,
    row_offset: u32,  // first output column written by this chunk
    y_stride: u32,    // floats per token in y
}


#include "common/step.wgsl"

#if ROW_PER_THREAD
// The weights as vec4s of words (every repacked layout is a whole number of them): one load
// per 4 words. `w_q` is left unbound; quant.wgsl's unit decoders refer to it.
@group(0) @binding(0) var<storage, read> w_blocks: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> w_q: array<u32>;
#if SCALES4
// Q4_K/Q5_K keep four scale words per super-block (d/dmin, then 12 bytes of 6-bit scales
// and mins): the same buffer as w_s, read as one vec4 load instead of four scalar ones.
@group(0) @binding(7) var<storage, read> w_s4: array<vec4<u32>>;
#endif
#else
@group(0) @binding(0) var<storage, read> w_q: array<u32>;
#endif
@group(0) @binding(1) var<storage, read> w_s: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> step: Step;

#include "common/quant.wgsl"

fn store(row: u32, t: u32, v: f32) {
    let yi = t * p.y_stride + p.row_offset + row;
#if ACCUMULATE
    y[yi] += v;
#else
    y[yi] = v;
#endif
}

#if ROW_PER_THREAD
// CPU adapters (lavapipe, SwiftShader) run a workgroup as SIMD lanes on one core, and every
// storage load inside a loop is issued lane by lane with its own bounds check. So each thread
// owns RPT rows (groups of 4) and TILE tokens, all unrolled: an activation load serves RPT
// rows, a weight load TILE tokens, weights come as whole vec4s, and there are no barriers.
// All lanes stay active (rows past the end repeat the last row and are not stored) so that
// subgroup broadcasts are defined. The code is straight-line throughout: loops left for the
// compiler to unroll cost pipeline-creation time on every inlined copy.
//
// A step covers XV vec4s of one row: a 32-weight block (BLOCK32), a 64-weight chunk of a
// 256-weight super-block (KQUANT), or an 8-weight unit (floats). K-quant steps are four
// 16-weight quarters, each with its own scale and offset.

#if BLOCK32
const XV = 8u;
#endif
#if KQUANT
const XV = 16u;
#endif
#if !BLOCK32
#if !KQUANT
const XV = 2u;
#endif
#endif

// One token's activations for one step. `sum`: their total (.x, BLOCK32) or per-quarter
// sums (KQUANT), which the per-block offsets multiply.
struct Xs {
    v: array<vec4<f32>, XV>,
    sum: vec4<f32>,
}

// One row's weights for one step: w = v * d + m, d and m per quarter (or .x for a block).
struct Ws {
    v: array<vec4<f32>, XV>,
    d: vec4<f32>,
    m: vec4<f32>,
}

// True where the workgroup is one subgroup, so lane i can hand its load to the others.
var<private> shared_x: bool;
var<private> lane: u32;

// Eight consecutive vec4s of x, loaded once per workgroup where subgroups allow.
fn load_x8(b: u32) -> array<vec4<f32>, 8> {
#if SUBGROUPS
    if shared_x {
        let mine = x[b + lane];
        return array<vec4<f32>, 8>(subgroupBroadcast(mine, 0u), subgroupBroadcast(mine, 1u),
                                   subgroupBroadcast(mine, 2u), subgroupBroadcast(mine, 3u),
                                   subgroupBroadcast(mine, 4u), subgroupBroadcast(mine, 5u),
                                   subgroupBroadcast(mine, 6u), subgroupBroadcast(mine, 7u));
    }
#endif
    return array<vec4<f32>, 8>(x[b], x[b + 1u], x[b + 2u], x[b + 3u],
                               x[b + 4u], x[b + 5u], x[b + 6u], x[b + 7u]);
}

fn sum8(v: array<vec4<f32>, 8>) -> f32 {
    let s = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    return s.x + s.y + s.z + s.w;
}

fn hsum(v: vec4<f32>) -> f32 {
    return v.x + v.y + v.z + v.w;
}

fn load_x(t: u32, c: u32) -> Xs {
    var r: Xs;
    let base = t * (p.cols / 4u);
#if BLOCK32
    r.v = load_x8(base + 8u * c);
    r.sum.x = sum8(r.v);
#endif
#if KQUANT
    // Q4_K/Q5_K: 64 consecutive weights. Q6_K: two runs of 32, 64 apart (see load_w).
#if Q6_K
    let b = base + 64u * (c / 4u) + 32u * ((c / 2u) % 2u) + 8u * (c % 2u);
    let a = load_x8(b);
    let h = load_x8(b + 16u);
#else
    let a = load_x8(base + 16u * c);
    let h = load_x8(base + 16u * c + 8u);
#endif
    r.v = array<vec4<f32>, 16>(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                               h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    r.sum = vec4<f32>(hsum(a[0] + a[1] + a[2] + a[3]), hsum(a[4] + a[5] + a[6] + a[7]),
                      hsum(h[0] + h[1] + h[2] + h[3]), hsum(h[4] + h[5] + h[6] + h[7]));
#endif
#if !BLOCK32
#if !KQUANT
    r.v[0] = x[base + 2u * c];
    r.v[1] = x[base + 2u * c + 1u];
#endif
#endif
    return r;
}

#if BLOCK32
// Word j of a Q4 block: low nibbles are weights 4j.., high nibbles 16 + 4j.. (Unit layout).
fn nibbles8(q: vec4<u32>) -> array<vec4<f32>, 8> {
    return array<vec4<f32>, 8>(nibbles_lo(q.x), nibbles_lo(q.y), nibbles_lo(q.z), nibbles_lo(q.w),
                               nibbles_hi(q.x), nibbles_hi(q.y), nibbles_hi(q.z), nibbles_hi(q.w));
}
#endif

#if KQUANT
// The eight quant words of a step (Q4_K): low nibbles then high nibbles.
fn nibbles16(q0: vec4<u32>, q1: vec4<u32>) -> array<vec4<f32>, 16> {
    return array<vec4<f32>, 16>(nibbles_lo(q0.x), nibbles_lo(q0.y), nibbles_lo(q0.z), nibbles_lo(q0.w),
                                nibbles_lo(q1.x), nibbles_lo(q1.y), nibbles_lo(q1.z), nibbles_lo(q1.w),
                                nibbles_hi(q0.x), nibbles_hi(q0.y), nibbles_hi(q0.z), nibbles_hi(q0.w),
                                nibbles_hi(q1.x), nibbles_hi(q1.y), nibbles_hi(q1.z), nibbles_hi(q1.w));
}

// The 8-bit values of w's 4 bytes.
fn bytes_u8(w: u32) -> vec4<f32> {
    return vec4<f32>(f32(w & 0xffu), f32((w >> 8u) & 0xffu), f32((w >> 16u) & 0xffu), f32(w >> 24u));
}

// A step's 5-bit (Q5_K) or 6-bit (Q6_K) values: the low and high nibbles of q0, q1, each with
// its high bits from the same byte lane of lo0, lo1 (low nibbles) or hi0, hi1 (high
// nibbles), joined on whole words before the 16 conversions.
fn joined16(q0: vec4<u32>, q1: vec4<u32>, lo0: vec4<u32>, lo1: vec4<u32>, hi0: vec4<u32>, hi1: vec4<u32>) -> array<vec4<f32>, 16> {
    let n = vec4<u32>(0x0f0f0f0fu);
    let four = vec4<u32>(4u);
    let ql0 = (q0 & n) | (lo0 << four);
    let ql1 = (q1 & n) | (lo1 << four);
    let qh0 = ((q0 >> four) & n) | (hi0 << four);
    let qh1 = ((q1 >> four) & n) | (hi1 << four);
    return array<vec4<f32>, 16>(bytes_u8(ql0.x), bytes_u8(ql0.y), bytes_u8(ql0.z), bytes_u8(ql0.w),
                                bytes_u8(ql1.x), bytes_u8(ql1.y), bytes_u8(ql1.z), bytes_u8(ql1.w),
                                bytes_u8(qh0.x), bytes_u8(qh0.y), bytes_u8(qh0.z), bytes_u8(qh0.w),
                                bytes_u8(qh1.x), bytes_u8(qh1.y), bytes_u8(qh1.z), bytes_u8(qh1.w));
}

// v - offset, per vec4.
fn minus16(v: array<vec4<f32>, 16>, offset: f32) -> array<vec4<f32>, 16> {
    return array<vec4<f32>, 16>(
        v[0] - offset, v[1] - offset, v[2] - offset, v[3] - offset, v[4] - offset, v[5] - offset, v[6] - offset, v[7] - offset,
        v[8] - offset, v[9] - offset, v[10] - offset, v[11] - offset, v[12] - offset, v[13] - offset, v[14] - offset, v[15] - offset);
}

#endif

fn load_w(row: u32, c: u32) -> Ws {
    var r: Ws;
#if BLOCK32
    let blk = row * (p.cols / 32u) + c;
#if Q8_0
    let q0 = w_blocks[2u * blk];
    let q1 = w_blocks[2u * blk + 1u];
    r.v = array<vec4<f32>, 8>(bytes_i8(q0.x), bytes_i8(q0.y), bytes_i8(q0.z), bytes_i8(q0.w),
                              bytes_i8(q1.x), bytes_i8(q1.y), bytes_i8(q1.z), bytes_i8(q1.w));
    r.d.x = half_scale(blk);
#endif
#if Q4_1
    r.v = nibbles8(w_blocks[blk]);
    let dm = unpack2x16float(w_s[blk]);
    r.d.x = dm.x;
    r.m.x = dm.y;
#endif
#if Q4_0
    // q − 8 exactly, before any rounding (folding −8·d into the sum would cancel).
    let n = nibbles8(w_blocks[blk]);
    r.v = array<vec4<f32>, 8>(n[0] - 8.0, n[1] - 8.0, n[2] - 8.0, n[3] - 8.0,
                              n[4] - 8.0, n[5] - 8.0, n[6] - 8.0, n[7] - 8.0);
    r.d.x = half_scale(blk);
#endif
#endif
#if KQUANT
    // Step c of the row is chunk c % 4 of super-block c / 4 (quant.wgsl's word layouts).
    let blk = row * (p.cols / 256u) + c / 4u;
    let k = c % 4u;
#if Q6_K
    // Half k / 2 of the block, ql words 8 (k % 2).. of its 16: low nibbles are the run of 32
    // weights x starts at, high nibbles the run 64 on; their top two bits in one vec4 of the
    // block's regrouped high bits (byte lanes as in the ql words, two ql words per word: low
    // nibble's bits, then the high one's); one i8 scale per 16 weights.
    let hf = k / 2u;
    let part = k % 2u;
    let q0 = w_blocks[12u * blk + 4u * hf + 2u * part];
    let q1 = w_blocks[12u * blk + 4u * hf + 2u * part + 1u];
    let hb = w_blocks[12u * blk + 8u + 2u * hf + part];
    let f0 = vec4<u32>(hb.x, hb.x >> 4u, hb.y, hb.y >> 4u);
    let f1 = vec4<u32>(hb.z, hb.z >> 4u, hb.w, hb.w >> 4u);
    let m = vec4<u32>(0x03030303u);
    let two = vec4<u32>(2u);
    r.v = minus16(joined16(q0, q1, f0 & m, f1 & m, (f0 >> two) & m, (f1 >> two) & m), 32.0);
    let lo = bytes_i8(w_s[5u * blk + 2u * hf]);
    let hi = bytes_i8(w_s[5u * blk + 2u * hf + 1u]);
    let d = unpack2x16float(w_s[5u * blk + 4u]).x;
    r.d = d * select(vec4<f32>(lo.xy, hi.xy), vec4<f32>(lo.zw, hi.zw), part == 1u);
#else
    // Chunk k: qs words 8k..8k + 7, low nibbles sub-block 2k, high nibbles 2k + 1.
#if Q5_K
    let stride = 10u;
#else
    let stride = 8u;
#endif
#if Q5_K
    // Chunk k's fifth bits: high-bit words 2k and 2k + 1 (a vec4 holds two chunks'), bits
    // 2(j % 4) and 2(j % 4) + 1 of each byte for qs word j.
    let hb = w_blocks[10u * blk + 8u + k / 2u];
    let hw = select(hb.xy, hb.zw, k % 2u == 1u);
    let sh = vec4<u32>(0u, 2u, 4u, 6u);
    let h0 = vec4<u32>(hw.x) >> sh;
    let h1 = vec4<u32>(hw.y) >> sh;
    let m = vec4<u32>(0x01010101u);
    let one = vec4<u32>(1u);
    r.v = joined16(w_blocks[stride * blk + 2u * k], w_blocks[stride * blk + 2u * k + 1u],
                   h0 & m, h1 & m, (h0 >> one) & m, (h1 >> one) & m);
#else
    r.v = nibbles16(w_blocks[stride * blk + 2u * k], w_blocks[stride * blk + 2u * k + 1u]);
#endif
#if SCALES4
    let s = w_s4[blk];
    _ = &w_s;
    let dm = unpack2x16float(s.x);
    let sm = scale_min_k4_words(s.yzw, k);
#else
    let dm = unpack2x16float(w_s[4u * blk]);
    let sm = scale_min_k4(4u * blk, k);
#endif
    r.d = dm.x * sm.xxzz;
    r.m = -dm.y * sm.yyww;
#endif
#endif
#if !BLOCK32
#if !KQUANT
    // Floats: unit c of the row, one vec4 of words (F16/BF16) or two (F32). They have no
    // scales; touching w_s keeps the binding layout the same for all types.
    _ = &w_s;
#if F32
    r.v[0] = bitcast<vec4<f32>>(w_blocks[row * (p.cols / 4u) + 2u * c]);
    r.v[1] = bitcast<vec4<f32>>(w_blocks[row * (p.cols / 4u) + 2u * c + 1u]);
#else
    let q = w_blocks[row * (p.cols / 8u) + c];
#if F16
    r.v[0] = vec4<f32>(unpack2x16float(q.x), unpack2x16float(q.y));
    r.v[1] = vec4<f32>(unpack2x16float(q.z), unpack2x16float(q.w));
#endif
#if BF16
    r.v[0] = vec4<f32>(bf16_pair(q.x), bf16_pair(q.y));
    r.v[1] = vec4<f32>(bf16_pair(q.z), bf16_pair(q.w));
#endif
#endif
#endif
#endif
    return r;
}

fn wdot(w: Ws, xs: Xs) -> f32 {
#if BLOCK32
    let s = dot(w.v[0], xs.v[0]) + dot(w.v[1], xs.v[1]) + dot(w.v[2], xs.v[2]) + dot(w.v[3], xs.v[3])
          + dot(w.v[4], xs.v[4]) + dot(w.v[5], xs.v[5]) + dot(w.v[6], xs.v[6]) + dot(w.v[7], xs.v[7]);
    return s * w.d.x + xs.sum.x * w.m.x;
#endif
#if KQUANT
    let q = vec4<f32>(
        dot(w.v[0], xs.v[0]) + dot(w.v[1], xs.v[1]) + dot(w.v[2], xs.v[2]) + dot(w.v[3], xs.v[3]),
        dot(w.v[4], xs.v[4]) + dot(w.v[5], xs.v[5]) + dot(w.v[6], xs.v[6]) + dot(w.v[7], xs.v[7]),
        dot(w.v[8], xs.v[8]) + dot(w.v[9], xs.v[9]) + dot(w.v[10], xs.v[10]) + dot(w.v[11], xs.v[11]),
        dot(w.v[12], xs.v[12]) + dot(w.v[13], xs.v[13]) + dot(w.v[14], xs.v[14]) + dot(w.v[15], xs.v[15]));
    return dot(q, w.d) + dot(xs.sum, w.m);
#endif
#if !BLOCK32
#if !KQUANT
    return dot(w.v[0], xs.v[0]) + dot(w.v[1], xs.v[1]);
#endif
#endif
}

#if TILE8
// Eight tokens: a row's dots are two vec4s, four rows' two mat4x4s (column = row).
struct Xt { a: Xs, b: Xs, c: Xs, d: Xs, e: Xs, f: Xs, g: Xs, h: Xs }
struct Dots { lo: vec4<f32>, hi: vec4<f32> }
struct Acc { lo: mat4x4<f32>, hi: mat4x4<f32> }

// Tokens past the last repeat it: their loads stay in range and they are not stored.
fn load_xt(t0: u32, tl: u32, c: u32) -> Xt {
    return Xt(load_x(min(t0, tl), c), load_x(min(t0 + 1u, tl), c), load_x(min(t0 + 2u, tl), c),
              load_x(min(t0 + 3u, tl), c), load_x(min(t0 + 4u, tl), c), load_x(min(t0 + 5u, tl), c),
              load_x(min(t0 + 6u, tl), c), load_x(min(t0 + 7u, tl), c));
}

fn row_dots(row: u32, c: u32, xt: Xt) -> Dots {
    let w = load_w(row, c);
    return Dots(vec4<f32>(wdot(w, xt.a), wdot(w, xt.b), wdot(w, xt.c), wdot(w, xt.d)),
                vec4<f32>(wdot(w, xt.e), wdot(w, xt.f), wdot(w, xt.g), wdot(w, xt.h)));
}

fn rows4(row: u32, last: u32, c: u32, xt: Xt, acc: Acc) -> Acc {
    let a = row_dots(min(row, last), c, xt);
    let b = row_dots(min(row + 1u, last), c, xt);
    let d = row_dots(min(row + 2u, last), c, xt);
    let e = row_dots(min(row + 3u, last), c, xt);
    return Acc(acc.lo + mat4x4<f32>(a.lo, b.lo, d.lo, e.lo), acc.hi + mat4x4<f32>(a.hi, b.hi, d.hi, e.hi));
}

fn store4(row: u32, t0: u32, n_tile: u32, acc: Acc) {
    for (var i = 0u; i < 4u; i++) {
        for (var t = 0u; t < 4u; t++) {
            if row + i < p.rows && t < n_tile {
                store(row + i, t0 + t, acc.lo[i][t]);
            }
            if row + i < p.rows && t + 4u < n_tile {
                store(row + i, t0 + t + 4u, acc.hi[i][t]);
            }
        }
    }
}
#else
#if FEW_TOKENS
#if TILE4
// Four tokens: a row's dots are a vec4, four rows' a mat4x4 (column = row).
struct Xt { a: Xs, b: Xs, c: Xs, d: Xs }
alias Dots = vec4<f32>;
alias Acc = mat4x4<f32>;

fn load_xt(t0: u32, tl: u32, c: u32) -> Xt {
    return Xt(load_x(min(t0, tl), c), load_x(min(t0 + 1u, tl), c), load_x(min(t0 + 2u, tl), c),
              load_x(min(t0 + 3u, tl), c));
}

fn row_dots(row: u32, c: u32, xt: Xt) -> Dots {
    let w = load_w(row, c);
    return Dots(wdot(w, xt.a), wdot(w, xt.b), wdot(w, xt.c), wdot(w, xt.d));
}
#else
// Two tokens (a speculative check of one draft token): a row's dots are a vec2, four rows' a
// mat4x2 (column = row).
struct Xt { a: Xs, b: Xs }
alias Dots = vec2<f32>;
alias Acc = mat4x2<f32>;

fn load_xt(t0: u32, tl: u32, c: u32) -> Xt {
    return Xt(load_x(min(t0, tl), c), load_x(min(t0 + 1u, tl), c));
}

fn row_dots(row: u32, c: u32, xt: Xt) -> Dots {
    let w = load_w(row, c);
    return Dots(wdot(w, xt.a), wdot(w, xt.b));
}
#endif

fn rows4(row: u32, last: u32, c: u32, xt: Xt, acc: Acc) -> Acc {
    return acc + Acc(row_dots(min(row, last), c, xt), row_dots(min(row + 1u, last), c, xt),
                     row_dots(min(row + 2u, last), c, xt), row_dots(min(row + 3u, last), c, xt));
}

fn store4(row: u32, t0: u32, n_tile: u32, acc: Acc) {
    for (var i = 0u; i < 4u; i++) {
        for (var t = 0u; t < TILE; t++) {
            if row + i < p.rows && t < n_tile {
                store(row + i, t0 + t, acc[i][t]);
            }
        }
    }
}
#else
// One token: four rows' dots are a vec4.
alias Xt = Xs;
alias Acc = vec4<f32>;

fn load_xt(t0: u32, tl: u32, c: u32) -> Xt {
    return load_x(min(t0, tl), c);
}

fn rows4(row: u32, last: u32, c: u32, xt: Xt, acc: Acc) -> Acc {
    return acc + vec4<f32>(wdot(load_w(min(row, last), c), xt), wdot(load_w(min(row + 1u, last), c), xt),
                           wdot(load_w(min(row + 2u, last), c), xt), wdot(load_w(min(row + 3u, last), c), xt));
}

fn store4(row: u32, t0: u32, n_tile: u32, acc: Acc) {
    for (var i = 0u; i < 4u; i++) {
        if row + i < p.rows && n_tile > 0u {
            store(row + i, t0, acc[i]);
        }
    }
}
#endif
#endif

@compute @workgroup_size(WG)
fn matvec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
#if SUBGROUPS
          @builtin(subgroup_size) sg_size: u32, @builtin(subgroup_invocation_id) sg_id: u32,
#endif
          @builtin(local_invocation_index) tid: u32) {
#if SUBGROUPS
    shared_x = sg_size == WG && WG == 8u;
    lane = sg_id;
#endif
    let row0 = ((wid.x + wid.z * nwg.x) * WG + tid) * RPT;
    let t0 = wid.y * TILE;
    let last = p.rows - 1u;
    let tl = step.n_tokens - 1u;
    let n_tile = min(TILE, step.n_tokens - min(t0, step.n_tokens));
    let steps = p.cols / (4u * XV);
    var a0: Acc;
#if ROWS8
    var a1: Acc;
#endif
#if ROWS16
    var a2: Acc;
    var a3: Acc;
#endif
    for (var c = 0u; c < steps; c++) {
        let xt = load_xt(t0, tl, c);
        a0 = rows4(row0, last, c, xt, a0);
#if ROWS8
        a1 = rows4(row0 + 4u, last, c, xt, a1);
#endif
#if ROWS16
        a2 = rows4(row0 + 8u, last, c, xt, a2);
        a3 = rows4(row0 + 12u, last, c, xt, a3);
#endif
    }
    store4(row0, t0, n_tile, a0);
#if ROWS8
    store4(row0 + 4u, t0, n_tile, a1);
#endif
#if ROWS16
    store4(row0 + 8u, t0, n_tile, a2);
    store4(row0 + 12u, t0, n_tile, a3);
#endif
}
#else
// GPUs: one workgroup per row; threads stride over the row's units (coalesced loads) and
// partial sums are reduced in workgroup memory.
var<workgroup> partial: array<f32, WG * TILE>;

@compute @workgroup_size(WG)
fn matvec(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) tid: u32) {
    let row = wid.x + wid.z * nwg.x;
    let t0 = wid.y * TILE;
    // Uniform control flow: every thread reaches the barriers, out-of-range work is masked.
    let live = row < p.rows;
    let units = p.cols / 8u;
    let x_stride = p.cols / 4u;
    var acc: array<f32, TILE>;
    let n_tile = min(TILE, step.n_tokens - min(t0, step.n_tokens));
    if live {
        for (var u = tid; u < units; u += WG) {
            let w = load_unit(row, u, p.cols);
            for (var t = 0u; t < n_tile; t++) {
                let xb = (t0 + t) * x_stride;
                acc[t] += dot(w.a, x[xb + w.ia]) + dot(w.b, x[xb + w.ib]);
            }
        }
    }
    for (var t = 0u; t < TILE; t++) {
        partial[t * WG + tid] = acc[t];
    }
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if tid < s {
            for (var t = 0u; t < TILE; t++) {
                partial[t * WG + tid] += partial[t * WG + tid + s];
            }
        }
    }
    if live && tid < n_tile {
        store(row, t0 + tid, partial[tid * WG]);
    }
}
#endif
