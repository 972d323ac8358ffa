//! Block formats: known answers from hand-built blocks, ggml's reference rounding, and
//! round-trip error bounds on seeded random data.

use half::f16;
use lilypad_gguf::{GgmlType, GgufError, can_convert, dequantize, quantize};
use rand::{Rng, SeedableRng, rngs::StdRng};

fn deq(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() as u64 / ty.type_size() * ty.block_size();
    let mut out = vec![f32::NAN; n as usize];
    dequantize(ty, bytes, &mut out).unwrap();
    out
}

fn h(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

#[test]
fn q4_0_known_block() {
    // d = 0.5; byte j holds element j in its low nibble and element j + 16 in its high one.
    let mut b = h(0.5).to_vec();
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = deq(GgmlType::Q4_0, &b);
    for j in 0..16 {
        assert_eq!(y[j], (j as f32 - 8.0) * 0.5, "x[{j}]");
        assert_eq!(y[j + 16], (7.0 - j as f32) * 0.5, "x[{}]", j + 16);
    }
}

#[test]
fn q4_1_known_block() {
    let mut b = h(0.25).to_vec();
    b.extend(h(-1.0));
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let y = deq(GgmlType::Q4_1, &b);
    for j in 0..16 {
        assert_eq!(y[j], j as f32 * 0.25 - 1.0);
        assert_eq!(y[j + 16], (15 - j) as f32 * 0.25 - 1.0);
    }
}

#[test]
fn q8_0_known_block() {
    let mut b = h(0.125).to_vec();
    b.extend((0..32i8).map(|j| (j - 16) as u8));
    b[2] = (-128i8) as u8;
    let y = deq(GgmlType::Q8_0, &b);
    assert_eq!(y[0], -16.0);
    for (j, &v) in y.iter().enumerate().skip(1) {
        assert_eq!(v, (j as f32 - 16.0) * 0.125);
    }
}

#[test]
fn scalar_formats_known_values() {
    let f16_bits: [(u16, f32); 6] = [
        (0x3C00, 1.0),
        (0xC000, -2.0),
        (0x7BFF, 65504.0),
        (0x0001, 2f32.powi(-24)),
        (0x7C00, f32::INFINITY),
        (0x8000, -0.0),
    ];
    let bytes: Vec<u8> = f16_bits.iter().flat_map(|(b, _)| b.to_le_bytes()).collect();
    let y = deq(GgmlType::F16, &bytes);
    for ((_, want), got) in f16_bits.iter().zip(&y) {
        assert_eq!(got.to_bits(), want.to_bits());
    }

    // bf16 widens by a shift: even a signalling NaN keeps its exact bits.
    let bf16_bits: [u16; 5] = [0x3F80, 0xC040, 0x7F80, 0x0001, 0x7F81];
    let bytes: Vec<u8> = bf16_bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let y = deq(GgmlType::BF16, &bytes);
    assert_eq!((y[0], y[1], y[2]), (1.0, -3.0, f32::INFINITY));
    assert_eq!(y[3].to_bits(), 0x0001_0000);
    assert_eq!(y[4].to_bits(), 0x7F81_0000);

    let y = deq(
        GgmlType::F32,
        &[1.5f32.to_le_bytes(), (-0.0f32).to_le_bytes()].concat(),
    );
    assert_eq!(y[0], 1.5);
    assert_eq!(y[1].to_bits(), (-0.0f32).to_bits());
}

#[test]
fn q4_0_reference_quantizer() {
    // Largest magnitude negative: d = -8 / -8 = 1, so every q is x + 8.
    let x: Vec<f32> = (0..32).map(|j| (j % 16) as f32 - 8.0).collect();
    let b = quantize(GgmlType::Q4_0, &x).unwrap();
    assert_eq!(b[..2], h(1.0));
    assert!(
        b[2..]
            .iter()
            .enumerate()
            .all(|(j, &q)| q == j as u8 | ((j as u8) << 4))
    );
    assert_eq!(deq(GgmlType::Q4_0, &b), x);

    // Largest magnitude positive: the scale turns negative.
    let x: Vec<f32> = (0..32).map(|j| 8.0 - (j % 16) as f32).collect();
    let b = quantize(GgmlType::Q4_0, &x).unwrap();
    assert_eq!(b[..2], h(-1.0));
    assert_eq!(deq(GgmlType::Q4_0, &b), x);

    // -8 and +8 both have the largest magnitude; the first wins and +8 clamps to q = 15.
    let mut x = vec![0.0f32; 32];
    x[0] = -8.0;
    x[1] = 8.0;
    let b = quantize(GgmlType::Q4_0, &x).unwrap();
    assert_eq!(b[..2], h(1.0));
    assert_eq!(b[2] & 0x0F, 0);
    assert_eq!(b[3] & 0x0F, 15);
    assert_eq!(deq(GgmlType::Q4_0, &b)[1], 7.0);

    // All zeros: d = 0.0 / -8 = -0.0, every nibble 8.
    let b = quantize(GgmlType::Q4_0, &[0.0; 32]).unwrap();
    assert_eq!(b, [&[0x00, 0x80][..], &[0x88; 16]].concat());
}

#[test]
fn q4_1_reference_quantizer() {
    let x: Vec<f32> = (0..32).map(|j| (j % 16) as f32).collect();
    let b = quantize(GgmlType::Q4_1, &x).unwrap();
    assert_eq!(b[..4], [h(1.0), h(0.0)].concat());
    assert!(
        b[4..]
            .iter()
            .enumerate()
            .all(|(j, &q)| q == j as u8 | ((j as u8) << 4))
    );
    assert_eq!(deq(GgmlType::Q4_1, &b), x);

    let b = quantize(GgmlType::Q4_1, &[-3.0; 32]).unwrap();
    assert_eq!(b, [&h(0.0)[..], &h(-3.0), &[0; 16]].concat());
}

#[test]
fn q8_0_reference_quantizer() {
    let x: Vec<f32> = (0..32).map(|j| (j * 8) as f32 - 127.0).collect();
    let b = quantize(GgmlType::Q8_0, &x).unwrap();
    assert_eq!(b[..2], h(1.0));
    assert!(b[2..].iter().zip(&x).all(|(&q, &v)| q as i8 as f32 == v));

    // roundf: halves go away from zero.
    let mut x = vec![0.0f32; 32];
    x[..4].copy_from_slice(&[127.0, 2.5, -2.5, 0.499_999_97]);
    let b = quantize(GgmlType::Q8_0, &x).unwrap();
    assert_eq!(&b[2..6], &[127, 3, (-3i8) as u8, 0]);
}

#[test]
fn scalar_reference_rounding() {
    // f16: 1 + 2^-11 is a tie and rounds to even (1.0); 1 + 3 * 2^-11 rounds up to 0x3C02.
    let b = quantize(
        GgmlType::F16,
        &[
            1.0,
            1.0 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
            65520.0,
        ],
    )
    .unwrap();
    let bits: Vec<u16> = b
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(bits, [0x3C00, 0x3C00, 0x3C02, 0x7C00]);

    // bf16: round to nearest even on the low 16 bits; NaNs come out quiet (ggml's fp32_to_bf16).
    let x = [
        0x3F80_0000u32,
        0x3F80_8000,
        0x3F81_8000,
        0x3F80_8001,
        0x7F80_0001,
    ]
    .map(f32::from_bits);
    let b = quantize(GgmlType::BF16, &x).unwrap();
    let bits: Vec<u16> = b
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(bits, [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x7FC0]);

    let x = [1.0f32, -0.0, f32::MIN_POSITIVE];
    assert_eq!(deq(GgmlType::F32, &quantize(GgmlType::F32, &x).unwrap()), x);
}

/// Blocks of varied scale, including an all-zero block and one in f16's subnormal range.
fn random_data(rng: &mut StdRng, n: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(n);
    while x.len() < n {
        let scale = match x.len() / 32 % 9 {
            0 => 0.0,
            1 => 1e-6,
            2 => 3e4,
            _ => 10f32.powf(rng.random_range(-2.0..2.0)),
        };
        let outlier = rng.random_range(0..8) == 0;
        let v = rng.random_range(-1.0..1.0) * scale * if outlier { 8.0 } else { 1.0 };
        x.push(v);
    }
    x
}

fn f16_round(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

#[test]
fn block_formats_round_trip_within_their_error_bounds() {
    let mut rng = StdRng::seed_from_u64(0x5EED);
    let n = 32 * 37;
    let x = random_data(&mut rng, n);
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        let b = quantize(ty, &x).unwrap();
        assert_eq!(b.len() as u64, ty.row_bytes(n as u64).unwrap());
        let y = deq(ty, &b);
        for (blk, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let min = xb.iter().copied().fold(f32::MAX, f32::min);
            let max = xb.iter().copied().fold(-f32::MAX, f32::max);
            let slack = (amax + min.abs()) * 1e-6 + 1e-30;
            for (j, (&xv, &yv)) in xb.iter().zip(yb).enumerate() {
                let bound = match ty {
                    // Steps of d = amax / 8; the one-sided range -8..=7 costs a whole step
                    // for values of the opposite sign to the largest one, beyond 7.5 steps.
                    GgmlType::Q4_0 => {
                        let d = amax / 8.0;
                        let signed_max = xb.iter().copied().find(|v| v.abs() == amax).unwrap();
                        let steps = if d == 0.0 {
                            0.0
                        } else {
                            -xv * 8.0 / signed_max
                        };
                        let step = if steps >= 7.5 { d } else { d / 2.0 };
                        step + 8.0 * (d - f16_round(d)).abs()
                    }
                    GgmlType::Q4_1 => {
                        let d = (max - min) / 15.0;
                        d / 2.0 + 15.0 * (d - f16_round(d)).abs() + (min - f16_round(min)).abs()
                    }
                    GgmlType::Q8_0 => {
                        let d = amax / 127.0;
                        d / 2.0 + 127.0 * (d - f16_round(d)).abs()
                    }
                    _ => unreachable!(),
                };
                let err = (xv - yv).abs();
                assert!(
                    err <= bound + slack,
                    "{ty} block {blk} [{j}]: {xv} -> {yv}, error {err} > bound {bound}"
                );
            }
        }
    }
}

#[test]
fn symmetric_formats_are_fixed_points_of_their_own_output() {
    let mut rng = StdRng::seed_from_u64(42);
    let x = random_data(&mut rng, 32 * 29);
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0] {
        let b = quantize(ty, &x).unwrap();
        assert_eq!(quantize(ty, &deq(ty, &b)).unwrap(), b, "{ty}");
    }
}

#[test]
fn scalar_formats_round_trip_within_their_error_bounds() {
    let mut rng = StdRng::seed_from_u64(0xF16);
    let x = random_data(&mut rng, 1187);
    assert_eq!(deq(GgmlType::F32, &quantize(GgmlType::F32, &x).unwrap()), x);
    for (ty, rel) in [
        (GgmlType::F16, 2f32.powi(-11)),
        (GgmlType::BF16, 2f32.powi(-8)),
    ] {
        let y = deq(ty, &quantize(ty, &x).unwrap());
        for (j, (&a, &b)) in x.iter().zip(&y).enumerate() {
            if ty == GgmlType::F16 && a.abs() >= 65520.0 {
                assert_eq!(
                    b,
                    f32::INFINITY.copysign(a),
                    "F16 [{j}]: {a} overflows to infinity"
                );
                continue;
            }
            // Half an ulp, relative for normals; f16 subnormals have a fixed step of 2^-24.
            let bound = (a.abs() * rel).max(if ty == GgmlType::F16 {
                2f32.powi(-25)
            } else {
                0.0
            });
            assert!((a - b).abs() <= bound, "{ty} [{j}]: {a} -> {b}");
        }
    }
}

#[test]
fn length_and_type_errors() {
    let mut out = vec![0.0; 32];
    assert!(matches!(
        dequantize(GgmlType::Q4_0, &[0; 17], &mut out),
        Err(GgufError::PartialBlock {
            ty: GgmlType::Q4_0,
            bytes: 17,
            type_size: 18
        })
    ));
    let e = dequantize(GgmlType::Q8_0, &[0; 68], &mut out).unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::OutputLength {
                expected: 64,
                got: 32,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("Q8_0"), "{e}");
    assert!(matches!(
        dequantize(GgmlType::F16, &[0; 3], &mut out),
        Err(GgufError::PartialBlock { .. })
    ));
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let n = ty.type_size() as usize;
        assert!(matches!(
            dequantize(ty, &vec![0; 2 * n - 1], &mut vec![0.0; 512]),
            Err(GgufError::PartialBlock { bytes, type_size, .. }) if bytes == 2 * n as u64 - 1 && type_size == n as u64
        ));
        assert!(matches!(
            dequantize(ty, &vec![0; n], &mut vec![0.0; 255]),
            Err(GgufError::OutputLength {
                expected: 256,
                got: 255,
                ..
            })
        ));
        assert!(matches!(
            quantize(ty, &[0.0; 255]),
            Err(GgufError::NotBlockMultiple {
                elements: 255,
                block_size: 256,
                ..
            })
        ));
    }
    for ty in GgmlType::ALL {
        let supported = matches!(
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
        );
        assert_eq!(can_convert(ty), supported, "{ty}");
        let n = ty.block_size() as usize;
        let d = dequantize(ty, &vec![0; ty.type_size() as usize], &mut vec![0.0; n]);
        let q = quantize(ty, &vec![0.0; n]);
        assert_eq!(d.is_ok(), supported, "{ty}");
        assert_eq!(q.is_ok(), supported, "{ty}");
        if !supported {
            assert!(
                matches!(d, Err(GgufError::UnsupportedType { ty: t, op: "dequantize" }) if t == ty)
            );
            assert!(
                matches!(q, Err(GgufError::UnsupportedType { ty: t, op: "quantize" }) if t == ty)
            );
        }
    }
    let e = quantize(GgmlType::Q4_1, &[0.0; 33]).unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::NotBlockMultiple {
                elements: 33,
                block_size: 32,
                ..
            }
        ),
        "{e}"
    );
    assert!(quantize(GgmlType::Q8_0, &[]).unwrap().is_empty());
}

/// One k-quant fixture from `scripts/llama-cpp/kquant_fixture.py` (layout in its docstring):
/// random blocks with gguf-py's dequantization, and inputs with ggml's reference quantization.
struct KFixture {
    blocks: Vec<u8>,
    values: Vec<f32>,
    inputs: Vec<f32>,
    quantized: Vec<u8>,
}

fn k_fixture(ty: GgmlType) -> KFixture {
    let path = format!(
        "{}/tests/fixtures/{}.bin",
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
        ty.name().to_lowercase()
    );
    let b = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    assert_eq!(&b[..4], b"LPKQ", "{path}");
    assert_eq!((u32_at(4), u32_at(8)), (1, ty.id()), "{path}");
    let (d, q) = (u32_at(12) as usize, u32_at(16) as usize);
    let ts = ty.type_size() as usize;
    let f32s = |bytes: &[u8]| -> Vec<f32> {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let mut at = 20;
    let mut take = |n: usize| {
        at += n;
        &b[at - n..at]
    };
    let f = KFixture {
        blocks: take(d * ts).to_vec(),
        values: f32s(take(d * 256 * 4)),
        inputs: f32s(take(q * 256 * 4)),
        quantized: take(q * ts).to_vec(),
    };
    assert_eq!(at, b.len(), "{path}: trailing bytes");
    f
}

#[test]
fn k_quants_match_llama_cpp_bit_for_bit() {
    for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        let f = k_fixture(ty);
        let y = deq(ty, &f.blocks);
        assert_eq!(y.len(), f.values.len());
        for (i, (g, w)) in y.iter().zip(&f.values).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{ty} dequantize: block {} [{}]: {g} vs {w}",
                i / 256,
                i % 256
            );
        }
        let q = quantize(ty, &f.inputs).unwrap();
        let ts = ty.type_size() as usize;
        for (blk, (g, w)) in q.chunks(ts).zip(f.quantized.chunks(ts)).enumerate() {
            assert_eq!(g, w, "{ty} quantize: block {blk}");
        }
    }
}

#[test]
fn k_quant_scale_packing() {
    // Sub-blocks 0..4 keep their 6-bit scale and min in bytes j and j + 4; 4..8 split them
    // into the low nibbles of bytes j + 4 and the top two bits of bytes j - 4 and j.
    let mut b = vec![0u8; 144];
    b[..2].copy_from_slice(&h(1.0));
    b[2..4].copy_from_slice(&h(0.5));
    let scales: [u8; 8] = [1, 2, 3, 63, 17, 33, 48, 5];
    let mins: [u8; 8] = [0, 4, 62, 7, 21, 40, 9, 63];
    for j in 0..8 {
        let (s, m) = (scales[j], mins[j]);
        if j < 4 {
            b[4 + j] = s;
            b[4 + j + 4] = m;
        } else {
            b[4 + j + 4] = (s & 0xF) | (m & 0xF) << 4;
            b[4 + j - 4] |= (s >> 4) << 6;
            b[4 + j] |= (m >> 4) << 6;
        }
    }
    // Every nibble q = 3 for weights 64c + l (low) and q = 12 for 64c + 32 + l (high).
    b[16..].fill(0xC3);
    let y = deq(GgmlType::Q4K, &b);
    for (i, &v) in y.iter().enumerate() {
        let j = i / 32;
        let q = if j % 2 == 0 { 3.0 } else { 12.0 };
        assert_eq!(v, scales[j] as f32 * q - 0.5 * mins[j] as f32, "[{i}]");
    }
}

#[test]
fn k_quants_round_trip_within_their_error_bounds() {
    // ggml's search is not bound per weight (it may clip to lower the weighted error), so the
    // check is the RMS error of each super-block relative to its RMS value.
    let mut rng = StdRng::seed_from_u64(0x4B);
    let n: usize = 256 * 23;
    let x: Vec<f32> = (0..n)
        .map(|i| {
            let scale = 10f32.powi(i as i32 / 256 % 5 - 3);
            rng.random_range(-1.0f32..1.0) * scale
        })
        .collect();
    for (ty, bound) in [
        (GgmlType::Q4K, 0.12),
        (GgmlType::Q5K, 0.06),
        (GgmlType::Q6K, 0.03),
    ] {
        let y = deq(ty, &quantize(ty, &x).unwrap());
        for (blk, (xb, yb)) in x.chunks(256).zip(y.chunks(256)).enumerate() {
            let rms = |v: &mut dyn Iterator<Item = f32>| {
                (v.map(|e| (e as f64).powi(2)).sum::<f64>() / 256.0).sqrt()
            };
            let err = rms(&mut xb.iter().zip(yb).map(|(a, b)| a - b));
            let scale = rms(&mut xb.iter().copied());
            assert!(
                err <= bound * scale,
                "{ty} block {blk}: RMS error {err:.3e} > {bound} x RMS {scale:.3e}"
            );
        }
    }
}
