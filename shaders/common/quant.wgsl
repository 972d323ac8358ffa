// Weight decoding shared by matvec and get_rows.
//
// Weights are repacked on upload (lossless) so every block starts on a u32:
//   w_q: the block's data words (Q4_0/Q4_1: 4 words of nibbles; Q8_0: 8 words of i8;
//        F16/BF16: 2 values per word; F32: 1 value per word)
//   w_s: per-block scales. Q4_0/Q8_0: f16 d, two blocks per word; Q4_1: (d, m) f16 pair.
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
