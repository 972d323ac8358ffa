//! The k-quants Q4_K, Q5_K and Q6_K: super-blocks of 256 weights in sub-blocks with their own
//! scales. Ports of `dequantize_row_q*_K` and `quantize_row_q*_K_ref` (ggml-quants.c) that do
//! every `f32` operation in ggml's order, so the bytes and values are llama.cpp's exactly.
//!
//! Layouts (`ggml-common.h`), little-endian:
//! - Q4_K, 144 bytes: `d` f16, `dmin` f16, `scales[12]` (eight 6-bit scales and eight 6-bit
//!   mins), `qs[128]`. Each 64 weights share 32 bytes of `qs`: low nibbles are the first 32,
//!   high nibbles the next 32; weight = d·scale·q − dmin·min per 32-weight sub-block.
//! - Q5_K, 176 bytes: Q4_K's header, then `qh[32]` (fifth bits: byte l, bit 2k for weight
//!   64k + l, bit 2k + 1 for 64k + 32 + l), then `qs[128]` as in Q4_K.
//! - Q6_K, 210 bytes: `ql[128]` low nibbles, `qh[64]` high 2-bit pairs, `scales[16]` i8, `d` f16.
//!   Each half (128 weights) uses 64 bytes of `ql` and 32 of `qh`: for l < 32, weights
//!   l, l + 32, l + 64, l + 96 take the low nibble of ql[l], ql[l + 32], the high nibble of
//!   ql[l], ql[l + 32], and bits 0-1, 2-3, 4-5, 6-7 of qh[l]; weight = d·scale·(q − 32) per 16.

use half::f16;

/// `QK_K`: weights per super-block.
pub const QK_K: usize = 256;

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// ggml's `get_scale_min_k4`: 6-bit scale and min of sub-block `j` (0..8) from `scales[12]`.
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// One Q4_K block (144 bytes) or, with `five_bit`, Q5_K block (176 bytes) into 256 weights.
pub fn dequantize_q45_k(b: &[u8], five_bit: bool, y: &mut [f32]) {
    let (qh, qs) = if five_bit {
        (Some(&b[16..48]), &b[48..176])
    } else {
        (None, &b[16..144])
    };
    let (d, min) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    for (c, y) in y.chunks_exact_mut(64).enumerate() {
        let (sc, m) = scale_min_k4(2 * c, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(2 * c + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        let (lo, hi) = y.split_at_mut(32);
        for l in 0..32 {
            let q = qs[32 * c + l];
            let (h1, h2) = match qh {
                Some(qh) => ((qh[l] >> (2 * c)) & 1, (qh[l] >> (2 * c + 1)) & 1),
                None => (0, 0),
            };
            lo[l] = d1 * ((q & 0xF) + 16 * h1) as f32 - m1;
            hi[l] = d2 * ((q >> 4) + 16 * h2) as f32 - m2;
        }
    }
}

/// One Q6_K block into 256 weights.
pub fn dequantize_q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for (h, y) in y.chunks_exact_mut(128).enumerate() {
        let ql = &b[64 * h..64 * h + 64];
        let qh = &b[128 + 32 * h..128 + 32 * h + 32];
        let sc = &b[192 + 8 * h..192 + 8 * h + 8];
        for l in 0..32 {
            let is = l / 16;
            let q = [
                (ql[l] & 0xF) | ((qh[l] & 3) << 4),
                (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
            ];
            for (k, q) in q.into_iter().enumerate() {
                y[l + 32 * k] = d * sc[is + 2 * k] as i8 as f32 * (q as i32 - 32) as f32;
            }
        }
    }
}

/// ggml's `nearest_int`: round half to even through the 1.5·2^23 trick (exact for |x| < 2^22).
fn nearest_int(x: f32) -> i32 {
    ((x + 12_582_912.0).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// ggml's `make_qkx2_quants` (without `use_mad`): an asymmetric `nmax`-level fit of `x`
/// under `weights`, searching `nstep` + 1 candidate scales. Returns (scale, −min) and fills `l`.
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        l[i] = nearest_int(iscale * (x[i] - min)).clamp(0, nmax) as u8;
        let diff = scale * l[i] as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let li = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = li as u8;
            let (w, lf) = (weights[i], li as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `quantize_row_q4_K_ref` or, with `five_bit`, `quantize_row_q5_K_ref` for one
/// super-block `x`, appended to `out`.
pub fn quantize_q45_k(x: &[f32], five_bit: bool, out: &mut Vec<u8>) {
    let nmax = if five_bit { 31 } else { 15 };
    let (rmin, nstep) = if five_bit { (-0.5, 15) } else { (-1.0, 20) };
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    let mut weights = [0f32; 32];
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            rmin,
            0.1,
            nstep,
        );
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 12];
    for j in 0..8 {
        // C stores the int in a uint8_t before clamping: keep that wrap-around.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, &sc);
        let d = d.to_f32() * s as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for i in 0..32 {
            l[32 * j + i] = nearest_int((x[32 * j + i] + dm) / d).clamp(0, nmax) as u8;
        }
    }
    out.extend_from_slice(&d.to_le_bytes());
    out.extend_from_slice(&dmin.to_le_bytes());
    out.extend_from_slice(&sc);
    if five_bit {
        let mut qh = [0u8; 32];
        for (c, l) in l.chunks_exact(64).enumerate() {
            for (j, h) in qh.iter_mut().enumerate() {
                *h |= (l[j] >> 4) << (2 * c) | (l[j + 32] >> 4) << (2 * c + 1);
            }
        }
        out.extend_from_slice(&qh);
    }
    for l in l.chunks_exact(64) {
        out.extend((0..32).map(|j| (l[j] & 0xF) | (l[j + 32] & 0xF) << 4));
    }
}

/// ggml's `make_qx_quants` with `rmse_type` 1 and no importance weights: a symmetric fit of
/// `x` to −nmax..nmax−1, searching 18 scales around nmax / max. Fills `l` with q + nmax.
fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let q = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let (lf, w) = (q(iscale, v) as f32, v * v);
            sumlx += w * v * lf;
            suml2 += w * lf * lf;
        }
        (sumlx, suml2)
    };
    let mut iscale = -nmax as f32 / max;
    for (l, &v) in l.iter_mut().zip(x) {
        *l = (q(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (l, &v) in l.iter_mut().zip(x) {
                *l = (q(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's threshold below which a group counts as all zeros.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `quantize_row_q6_K_ref` for one super-block `x`, appended to `out`.
pub fn quantize_q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for ib in 0..16 {
        let s = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
        scales[ib] = s;
        if s.abs() > max_abs_scale {
            max_abs_scale = s.abs();
            max_scale = s;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        out.extend_from_slice(&[0; 210]);
        return;
    }
    let iscale = -128.0 / max_scale;
    let d = f16::from_f32(1.0 / iscale);
    let sc: [i8; 16] = std::array::from_fn(|ib| nearest_int(iscale * scales[ib]).min(127) as i8);
    for j in 0..16 {
        let d = d.to_f32() * sc[j] as f32;
        if d == 0.0 {
            continue;
        }
        for i in 0..16 {
            let q = nearest_int(x[16 * j + i] / d).clamp(-32, 31);
            l[16 * j + i] = (q + 32) as i8;
        }
    }
    let l = l.map(|v| v as u8);
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for h in 0..2 {
        let l = &l[128 * h..];
        for i in 0..32 {
            ql[64 * h + i] = (l[i] & 0xF) | (l[i + 64] & 0xF) << 4;
            ql[64 * h + i + 32] = (l[i + 32] & 0xF) | (l[i + 96] & 0xF) << 4;
            qh[32 * h + i] =
                (l[i] >> 4) | (l[i + 32] >> 4) << 2 | (l[i + 64] >> 4) << 4 | (l[i + 96] >> 4) << 6;
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.map(|s| s as u8));
    out.extend_from_slice(&d.to_le_bytes());
}
