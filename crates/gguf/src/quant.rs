//! CPU reference conversions between `f32` and the block formats.
//!
//! These follow ggml's `dequantize_row_*` and `quantize_row_*_ref` (ggml-quants.c) step for
//! step in `f32`, without fused multiply-adds, so results are deterministic on every
//! platform: the GPU kernels are tested against them bit for bit, and test models built with
//! [`quantize`] hold the same bytes llama.cpp's reference quantizer would write.

use half::{bf16, f16};

use crate::{GgmlType, GgufError, Result, kquant};

/// Whether [`dequantize`] and [`quantize`] handle `ty`.
pub fn can_convert(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q8_0
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
    )
}

/// Decodes whole blocks of `ty` from `bytes` into `out`, which must hold exactly the number
/// of elements those blocks encode.
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    if !can_convert(ty) {
        return Err(GgufError::UnsupportedType {
            ty,
            op: "dequantize",
        });
    }
    let type_size = ty.type_size() as usize;
    if !bytes.len().is_multiple_of(type_size) {
        return Err(GgufError::PartialBlock {
            ty,
            bytes: bytes.len() as u64,
            type_size: type_size as u64,
        });
    }
    let expected = (bytes.len() / type_size) as u64 * ty.block_size();
    if out.len() as u64 != expected {
        return Err(GgufError::OutputLength {
            ty,
            bytes: bytes.len() as u64,
            expected,
            got: out.len() as u64,
        });
    }
    let blocks = bytes.chunks_exact(type_size);
    let outs = out.chunks_exact_mut(ty.block_size() as usize);
    match ty {
        GgmlType::F32 => blocks
            .zip(outs)
            .for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        GgmlType::F16 => blocks.zip(outs).for_each(|(b, y)| y[0] = f16_at(b, 0)),
        // bf16 is the top half of an f32; widening is a shift, which keeps NaN payloads intact.
        GgmlType::BF16 => blocks
            .zip(outs)
            .for_each(|(b, y)| y[0] = f32::from_bits(u32::from(u16_at(b, 0)) << 16)),
        GgmlType::Q4_0 => blocks.zip(outs).for_each(|(b, y)| {
            let d = f16_at(b, 0);
            let (lo, hi) = y.split_at_mut(16);
            for (j, &q) in b[2..18].iter().enumerate() {
                lo[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
                hi[j] = ((q >> 4) as i32 - 8) as f32 * d;
            }
        }),
        GgmlType::Q4_1 => blocks.zip(outs).for_each(|(b, y)| {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            let (lo, hi) = y.split_at_mut(16);
            for (j, &q) in b[4..20].iter().enumerate() {
                lo[j] = (q & 0x0F) as f32 * d + m;
                hi[j] = (q >> 4) as f32 * d + m;
            }
        }),
        GgmlType::Q8_0 => blocks.zip(outs).for_each(|(b, y)| {
            let d = f16_at(b, 0);
            for (y, &q) in y.iter_mut().zip(&b[2..34]) {
                *y = q as i8 as f32 * d;
            }
        }),
        GgmlType::Q4K | GgmlType::Q5K => blocks
            .zip(outs)
            .for_each(|(b, y)| kquant::dequantize_q45_k(b, ty == GgmlType::Q5K, y)),
        GgmlType::Q6K => blocks
            .zip(outs)
            .for_each(|(b, y)| kquant::dequantize_q6_k(b, y)),
        _ => unreachable!("checked above"),
    }
    Ok(())
}

/// Encodes `data` as `ty` with ggml's round-to-nearest reference quantizers;
/// `data.len()` must be a whole number of blocks.
pub fn quantize(ty: GgmlType, data: &[f32]) -> Result<Vec<u8>> {
    if !can_convert(ty) {
        return Err(GgufError::UnsupportedType { ty, op: "quantize" });
    }
    let n = data.len() as u64;
    let len = ty.row_bytes(n)?;
    let mut out =
        Vec::with_capacity(usize::try_from(len).map_err(|_| GgufError::TooLarge { bytes: len })?);
    let blocks = data.chunks_exact(ty.block_size() as usize);
    match ty {
        GgmlType::F32 => data
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        GgmlType::F16 => data
            .iter()
            .for_each(|&x| out.extend_from_slice(&f16::from_f32(x).to_le_bytes())),
        // Round to nearest even, NaNs kept quiet: the same bits as ggml's fp32_to_bf16.
        GgmlType::BF16 => data
            .iter()
            .for_each(|&x| out.extend_from_slice(&bf16::from_f32(x).to_le_bytes())),
        GgmlType::Q4_0 => blocks.for_each(|x| {
            // The scale maps the largest-magnitude value, sign included, to -8.
            let (mut amax, mut max) = (0.0f32, 0.0f32);
            for &v in x {
                if amax < v.abs() {
                    amax = v.abs();
                    max = v;
                }
            }
            let d = max / -8.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
            for j in 0..16 {
                // `as i8` truncates toward zero like C's `(int8_t)` cast.
                let q0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
                let q1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
                out.push(q0 | (q1 << 4));
            }
        }),
        GgmlType::Q4_1 => blocks.for_each(|x| {
            let (mut min, mut max) = (f32::MAX, -f32::MAX);
            for &v in x {
                if v < min {
                    min = v;
                }
                if v > max {
                    max = v;
                }
            }
            let d = (max - min) / 15.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
            out.extend_from_slice(&f16::from_f32(min).to_le_bytes());
            for j in 0..16 {
                let q0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
                let q1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
                out.push(q0 | (q1 << 4));
            }
        }),
        GgmlType::Q8_0 => blocks.for_each(|x| {
            // C's `MAX(amax, fabsf(v))`, including what it does with NaN.
            let amax = x
                .iter()
                .fold(0.0f32, |a, &v| if a > v.abs() { a } else { v.abs() });
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out.extend_from_slice(&f16::from_f32(d).to_le_bytes());
            // `round` is C's `roundf`: halves away from zero.
            out.extend(x.iter().map(|&v| (v * id).round() as i8 as u8));
        }),
        GgmlType::Q4K | GgmlType::Q5K => {
            blocks.for_each(|x| kquant::quantize_q45_k(x, ty == GgmlType::Q5K, &mut out))
        }
        GgmlType::Q6K => blocks.for_each(|x| kquant::quantize_q6_k(x, &mut out)),
        _ => unreachable!("checked above"),
    }
    debug_assert_eq!(out.len() as u64, len);
    Ok(out)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16_at(b, at)).to_f32()
}
