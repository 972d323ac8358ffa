// Weight decoding shared by matvec and get_rows.
//
// Weights are repacked on upload (lossless) so every block starts on a u32:
//   w_q: the block's data words (Q4_0/Q4_1: 4 words of nibbles; Q8_0: 8 words of i8;
//        F16/BF16: 2 values per word; F32: 1 value per word)
//   w_s: per-block scales. Q4_0/Q8_0: f16 d, two blocks per word; Q4_1: (d, m) f16 pair.
// K-quants (super-blocks of 256, llama.cpp's byte layouts regrouped by word; see
// crates/gguf/src/kquant.rs for the formats):
//   Q4_K: w_q 32 words of qs;                 w_s 4 words: (d, dmin) f16 pair, scales[12]
//   Q5_K: w_q 32 words of qs, 8 words of high bits;  w_s as Q4_K
//   Q6_K: w_q 32 words of ql, 16 words of high bits; w_s 5 words: scales[16] (i8), d (f16, low half)
// The high bits are regrouped so that those of one 64-weight step are together and lined up
// with the byte lanes of its nibble words (crates/engine/src/weights.rs: q5k_high_bits,
// q6k_high_bits).
// A "unit" is 8 consecutive-in-memory weights of one row, returned as two vec4s with the
// vec4 indices (within the row) of the activations they multiply.
// The includer declares `w_q`, `w_s` and one of the type flags.

struct Unit {
    a: vec4<f32>,
    b: vec4<f32>,
    ia: u32,
    ib: u32,
}

fn nibbles_lo(w: u32) -> vec4<f32> {
    return vec4<f32>(f32(w & 0xfu), f32((w >> 8u) & 0xfu), f32((w >> 16u) & 0xfu), f32((w >> 24u) & 0xfu));
}

fn nibbles_hi(w: u32) -> vec4<f32> {
    return vec4<f32>(f32((w >> 4u) & 0xfu), f32((w >> 12u) & 0xfu), f32((w >> 20u) & 0xfu), f32(w >> 28u));
}

fn bytes_i8(w: u32) -> vec4<f32> {
    let v = bitcast<i32>(w);
    return vec4<f32>(f32((v << 24u) >> 24u), f32((v << 16u) >> 24u), f32((v << 8u) >> 24u), f32(v >> 24u));
}

fn half_scale(block: u32) -> f32 {
    return unpack2x16float(w_s[block >> 1u])[block & 1u];
}

// The bit field at `shift` (masked by `mask`) of each of w's 4 bytes: k-quants' high bits.
fn byte_fields(w: u32, shift: u32, mask: u32) -> vec4<f32> {
    return vec4<f32>(f32((w >> shift) & mask), f32((w >> (shift + 8u)) & mask),
                     f32((w >> (shift + 16u)) & mask), f32((w >> (shift + 24u)) & mask));
}

// ggml's get_scale_min_k4 for sub-blocks 2c and 2c + 1 (one 64-weight chunk) of the Q4_K/Q5_K
// block whose w_s words start at `sb`, as (scale, min, scale, min). Both sub-blocks sit in
// neighbouring bytes, so they are decoded together, one per byte lane.
fn scale_min_k4(sb: u32, c: u32) -> vec4<f32> {
    return scale_min_k4_words(vec3<u32>(w_s[sb + 1u], w_s[sb + 2u], w_s[sb + 3u]), c);
}

// scale_min_k4 on the block's three scale words, already loaded.
fn scale_min_k4_words(s: vec3<u32>, c: u32) -> vec4<f32> {
    let sh = 16u * (c & 1u);
    let s0 = s.x >> sh;
    let s1 = s.y >> sh;
    let s2 = s.z >> sh;
    // Sub-blocks 0..4: the low 6 bits of bytes j and j + 4. 4..8: a nibble of byte j + 4 and
    // the top 2 bits of bytes j - 4 and j.
    let hi = c >= 2u;
    let sc = select(s0 & 0x3f3fu, (s2 & 0x0f0fu) | ((s0 >> 2u) & 0x3030u), hi);
    let mn = select(s1 & 0x3f3fu, ((s2 >> 4u) & 0x0f0fu) | ((s1 >> 2u) & 0x3030u), hi);
    return vec4<f32>(f32(sc & 0xffu), f32(mn & 0xffu), f32(sc >> 8u), f32(mn >> 8u));
}

// Q6_K's i8 scale `j` (0..16) of the block whose w_s words start at `sb`.
fn scale_i8(sb: u32, j: u32) -> f32 {
    return f32(bitcast<i32>(w_s[sb + j / 4u] << (24u - 8u * (j % 4u))) >> 24u);
}

// Unit u of a Q4_K row, or with `five_bit` a Q5_K row (constant per variant, so it folds).
// One qs word: bytes 4i'..4i'+3 of 64-weight chunk c; low nibbles are weights 64c + 4i'..,
// high nibbles 64c + 32 + 4i'..; sub-blocks 2c and 2c + 1. Q5_K's fifth bits of qs word j
// (= i' % 8) of the chunk are bits 2(j % 4) (low) and 2(j % 4) + 1 (high) of each byte of
// high-bit word 2c + j / 4. d·scale·q and dmin·min are exact in f32, so only the
// subtraction rounds, as on the CPU.
fn unit_q45_k(row: u32, u: u32, cols: u32, five_bit: bool) -> Unit {
    let blk = row * (cols / 256u) + u / 32u;
    let i = u % 32u;
    let c = i / 8u;
    let stride = select(32u, 40u, five_bit);
    let w = w_q[blk * stride + i];
    var qa = nibbles_lo(w);
    var qb = nibbles_hi(w);
    if five_bit {
        let j = i % 8u;
        let h = w_q[blk * stride + 32u + 2u * c + j / 4u];
        qa += 16.0 * byte_fields(h, 2u * (j % 4u), 1u);
        qb += 16.0 * byte_fields(h, 2u * (j % 4u) + 1u, 1u);
    }
#if SCALES4
    // The includer binds the scale words again as vec4s: one load instead of four.
    let s4 = w_s4[blk];
    let dm = unpack2x16float(s4.x);
    let sm = scale_min_k4_words(s4.yzw, c);
#else
    let dm = unpack2x16float(w_s[blk * 4u]);
    let sm = scale_min_k4(blk * 4u, c);
#endif
    var r: Unit;
    r.a = qa * (dm.x * sm.x) - dm.y * sm.y;
    r.b = qb * (dm.x * sm.z) - dm.y * sm.w;
    r.ia = (u / 32u) * 64u + c * 16u + i % 8u;
    r.ib = r.ia + 8u;
    return r;
}

fn bf16_pair(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));
}

// Unit `u` (0 ≤ u < cols / 8) of row `row` of a matrix with `cols` columns.
fn load_unit(row: u32, u: u32, cols: u32) -> Unit {
    var r: Unit;
    // Float types have no scales; touching w_s keeps the binding layout the same for all types.
    _ = &w_s;
#if Q4_0
    let bpr = cols / 32u;
    let blk = row * bpr + u / 4u;
    let j = u % 4u;
    let w = w_q[blk * 4u + j];
    let d = half_scale(blk);
    r.a = (nibbles_lo(w) - 8.0) * d;
    r.b = (nibbles_hi(w) - 8.0) * d;
    r.ia = (u / 4u) * 8u + j;
    r.ib = r.ia + 4u;
#endif
#if Q4_1
    let bpr = cols / 32u;
    let blk = row * bpr + u / 4u;
    let j = u % 4u;
    let w = w_q[blk * 4u + j];
    let dm = unpack2x16float(w_s[blk]);
    r.a = nibbles_lo(w) * dm.x + dm.y;
    r.b = nibbles_hi(w) * dm.x + dm.y;
    r.ia = (u / 4u) * 8u + j;
    r.ib = r.ia + 4u;
#endif
#if Q8_0
    let bpr = cols / 32u;
    let blk = row * bpr + u / 4u;
    let j = u % 4u;
    let d = half_scale(blk);
    r.a = bytes_i8(w_q[blk * 8u + 2u * j]) * d;
    r.b = bytes_i8(w_q[blk * 8u + 2u * j + 1u]) * d;
    r.ia = 2u * u;
    r.ib = 2u * u + 1u;
#endif
#if Q4_K
    r = unit_q45_k(row, u, cols, false);
#endif
#if Q5_K
    r = unit_q45_k(row, u, cols, true);
#endif
#if Q6_K
    // ql word k of half hf (bytes 4k'.. of its 64, k' = k % 16 = 8·part + j): low nibbles are
    // weights 128hf + 4k'.., high nibbles 64 further on; their top two bits sit in each byte of
    // high-bit word 8hf + 4·part + j / 2, from bit 4(j % 2): two for the low nibble, two for
    // the high one. d·scale·(q − 32) is exact in f32, so any evaluation order matches the CPU
    // bit for bit.
    let blk = row * (cols / 256u) + u / 32u;
    let k = u % 32u;
    let hf = k / 16u;
    let kk = k % 16u;
    let j = kk % 8u;
    let w = w_q[blk * 48u + k];
    let h = w_q[blk * 48u + 32u + hf * 8u + (kk / 8u) * 4u + j / 2u] >> (4u * (j % 2u));
    // One scale per 16 weights: the low-nibble weights' is sj, the high ones' sj + 4.
    let sj = hf * 8u + j / 4u + (kk / 8u) * 2u;
    let d = unpack2x16float(w_s[blk * 5u + 4u]).x;
    r.a = (nibbles_lo(w) + 16.0 * byte_fields(h, 0u, 3u) - 32.0) * (d * scale_i8(blk * 5u, sj));
    r.b = (nibbles_hi(w) + 16.0 * byte_fields(h, 2u, 3u) - 32.0) * (d * scale_i8(blk * 5u, sj + 4u));
    r.ia = (u / 32u) * 64u + hf * 32u + kk;
    r.ib = r.ia + 16u;
#endif
#if F16
    let base = row * (cols / 2u) + 4u * u;
    r.a = vec4<f32>(unpack2x16float(w_q[base]), unpack2x16float(w_q[base + 1u]));
    r.b = vec4<f32>(unpack2x16float(w_q[base + 2u]), unpack2x16float(w_q[base + 3u]));
    r.ia = 2u * u;
    r.ib = 2u * u + 1u;
#endif
#if BF16
    let base = row * (cols / 2u) + 4u * u;
    r.a = vec4<f32>(bf16_pair(w_q[base]), bf16_pair(w_q[base + 1u]));
    r.b = vec4<f32>(bf16_pair(w_q[base + 2u]), bf16_pair(w_q[base + 3u]));
    r.ia = 2u * u;
    r.ib = 2u * u + 1u;
#endif
#if F32
    let base = row * cols + 8u * u;
    r.a = vec4<f32>(bitcast<f32>(w_q[base]), bitcast<f32>(w_q[base + 1u]), bitcast<f32>(w_q[base + 2u]), bitcast<f32>(w_q[base + 3u]));
    r.b = vec4<f32>(bitcast<f32>(w_q[base + 4u]), bitcast<f32>(w_q[base + 5u]), bitcast<f32>(w_q[base + 6u]), bitcast<f32>(w_q[base + 7u]));
    r.ia = 2u * u;
    r.ib = 2u * u + 1u;
#endif
    return r;
}
