//! Every kernel against a CPU reference on fresh random inputs, with sizes that are not
//! multiples of the workgroup sizes. References compute in f64; tolerances are stated per op.
//! Runs on any adapter (lavapipe in CI); without one the tests skip, unless
//! LILYPAD_REQUIRE_GPU=1, as CI sets, turns that into a failure.

use lilypad_engine::GpuContext;
use lilypad_engine::kernels::{Dispatch, submit};
use lilypad_engine::ops::{
    self, Step,
    attention::AttentionLayout,
    matvec::MatvecLayout,
    rope::RopeMode,
    sample::{Sampler, SamplingParams, reference_sample},
};
use lilypad_engine::tensor::DType;
use lilypad_engine::weights::GpuWeight;
use lilypad_gguf::{GgmlType, dequantize, quantize};
use rand::{Rng, SeedableRng, rngs::StdRng};

#[path = "../../../tests/src/gpu.rs"]
mod shared_gpu;
use shared_gpu::gpu;

macro_rules! ctx_or_skip {
    () => {
        match gpu() {
            Some(c) => c,
            None => return,
        }
    };
}

fn rng() -> StdRng {
    // Fresh inputs each run; the seed is printed so a failure can be replayed.
    let seed = std::env::var("LILYPAD_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("LILYPAD_TEST_SEED={seed}");
    StdRng::seed_from_u64(seed)
}

fn randn(r: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (r.random::<f32>() * 2.0 - 1.0) * scale)
        .collect()
}

fn buf_f32(ctx: &GpuContext, data: &[f32]) -> wgpu::Buffer {
    ctx.storage_buffer_init("test", bytemuck::cast_slice(data))
        .unwrap()
}

/// A K or V cache holding `data` as `dtype` elements, and the values it then holds (rounded
/// to f16 for an f16 cache: what a reference must compute with).
fn kv_buf(ctx: &GpuContext, data: &[f32], dtype: DType) -> (wgpu::Buffer, Vec<f32>) {
    match dtype {
        DType::F32 => (buf_f32(ctx, data), data.to_vec()),
        DType::F16 => {
            let h: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f32(v)).collect();
            let b = ctx
                .storage_buffer_init("test", bytemuck::cast_slice(&h))
                .unwrap();
            (b, h.iter().map(|v| v.to_f32()).collect())
        }
    }
}

/// A cache's values read back as f32, whatever its element type.
fn read_kv(ctx: &GpuContext, b: &wgpu::Buffer, n: usize, dtype: DType) -> Vec<f32> {
    match dtype {
        DType::F32 => read(ctx, b, n),
        DType::F16 => {
            let words = pollster::block_on(ctx.read_back(b, 0, n as u64 * 2)).unwrap();
            let h: &[half::f16] = bytemuck::cast_slice(&words);
            h.iter().map(|v| v.to_f32()).collect()
        }
    }
}

fn buf_u32(ctx: &GpuContext, data: &[u32]) -> wgpu::Buffer {
    ctx.storage_buffer_init("test", bytemuck::cast_slice(data))
        .unwrap()
}

fn step(ctx: &GpuContext, n_tokens: u32, pos0: u32) -> wgpu::Buffer {
    step_of(ctx, Step::new(n_tokens, pos0))
}

/// A step buffer holding `s` (tokens of several sequences: `Step::batch`,
/// `Step::for_sequence`).
fn step_of(ctx: &GpuContext, s: Step) -> wgpu::Buffer {
    let b = ops::step_buffer(ctx);
    ops::write_step(ctx, &b, s);
    b
}

/// Cache rows of a sequence slot in the batched-step tests (a cache holds slots × this).
const SLOT_CONTEXT: u32 = 10;

/// (slot, position) of the tokens of one batched step, interleaving three sequences: every
/// token writes its own row slot · SLOT_CONTEXT + position of a 3-slot cache; 11 tokens fill
/// one 8-token tile and part of another; positions 0 and SLOT_CONTEXT − 1 are among them.
const SLOT_TOKENS: [(u32, u32); 11] = [
    (2, 9),
    (0, 0),
    (1, 4),
    (2, 3),
    (0, 1),
    (1, 5),
    (0, 2),
    (2, 4),
    (1, 6),
    (0, 3),
    (2, 5),
];

/// The token of `SLOT_TOKENS` that writes cache row `row`, if any.
fn slot_token_at(row: usize) -> Option<usize> {
    SLOT_TOKENS
        .iter()
        .position(|&(s, p)| (s * SLOT_CONTEXT + p) as usize == row)
}

fn run(ctx: &GpuContext, ds: &[Dispatch], tokens: u32) {
    submit(ctx, &ds.iter().collect::<Vec<_>>(), tokens);
}

fn read(ctx: &GpuContext, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
    pollster::block_on(ctx.read_f32(b, 0, n as u64)).unwrap()
}

/// Every |got - want| / (|want| + floor) within `rel`, with the index for failure messages;
/// returns the worst.
fn assert_close(got: &[f32], want: &[f64], rel: f64, floor: f64, what: &str) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = 0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs() / (w.abs() + floor);
        assert!(
            err <= rel && g.is_finite(),
            "{what}: index {i}: got {g}, want {w} (rel err {err:.2e} > {rel:.0e})"
        );
        worst = worst.max(err);
    }
    worst
}

const WEIGHT_TYPES: &[GgmlType] = lilypad_engine::weights::SUPPORTED;

/// A random finite f16: mostly a typical weight scale of either sign, sometimes any finite
/// bit pattern (zero, subnormals, the largest value).
fn random_f16_scale(r: &mut StdRng) -> [u8; 2] {
    if r.random_range(0..8) == 0 {
        loop {
            let bits: u16 = r.random();
            if bits & 0x7C00 != 0x7C00 {
                return bits.to_le_bytes();
            }
        }
    }
    let v = r.random_range(1e-3f32..0.05) * if r.random() { 1.0 } else { -1.0 };
    half::f16::from_f32(v).to_le_bytes()
}

/// K-quant super-blocks of random bytes (every pattern of packed scales, mins and high bits)
/// with finite f16 scale fields.
fn random_k_blocks(r: &mut StdRng, ty: GgmlType, n_blocks: usize) -> Vec<u8> {
    let ts = ty.type_size() as usize;
    let f16_fields: &[usize] = if ty == GgmlType::Q6K { &[208] } else { &[0, 2] };
    let mut bytes: Vec<u8> = (0..n_blocks * ts).map(|_| r.random()).collect();
    for block in bytes.chunks_exact_mut(ts) {
        for &at in f16_fields {
            block[at..at + 2].copy_from_slice(&random_f16_scale(r));
        }
    }
    bytes
}

/// Columns for a test matrix: `n32` blocks of 32, or `n256` super-blocks for k-quants.
fn test_cols(ty: GgmlType, n32: usize, n256: usize) -> usize {
    if ty.block_size() == 256 {
        256 * n256
    } else {
        32 * n32
    }
}

fn random_weight(r: &mut StdRng, ty: GgmlType, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    let bytes = if ty.block_size() == 256 {
        random_k_blocks(r, ty, rows * cols / 256)
    } else {
        quantize(ty, &randn(r, rows * cols, 1.0)).unwrap()
    };
    let mut deq = vec![0f32; rows * cols];
    dequantize(ty, &bytes, &mut deq).unwrap();
    (bytes, deq)
}

/// Dequantization on the GPU (get_rows over every row) equals the CPU reference bit for bit.
#[test]
fn dequantize_is_bit_exact() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    for &ty in WEIGHT_TYPES {
        let (rows, cols) = (37, test_cols(ty, 7, 3));
        let (bytes, want) = random_weight(&mut r, ty, rows, cols);
        // A tiny chunk cap splits the table across buffers too.
        for cap in [None, Some(ty.row_bytes(cols as u64).unwrap() * 6)] {
            let w =
                GpuWeight::upload(&ctx, "w", ty, rows as u64, cols as u64, &bytes, cap).unwrap();
            let ids: Vec<u32> = (0..rows as u32).rev().collect();
            let out = ctx
                .storage_buffer("out", (rows * cols * 4) as u64, wgpu::BufferUsages::empty())
                .unwrap();
            let s = step(&ctx, rows as u32, 0);
            run(
                &ctx,
                &ops::get_rows::get_rows(&ctx, &w, &buf_u32(&ctx, &ids), &out, rows as u32, &s)
                    .unwrap(),
                rows as u32,
            );
            let got = read(&ctx, &out, rows * cols);
            for (t, &id) in ids.iter().enumerate() {
                for c in 0..cols {
                    let (g, e) = (got[t * cols + c], want[id as usize * cols + c]);
                    assert_eq!(
                        g.to_bits(),
                        e.to_bits(),
                        "{ty:?} chunk cap {cap:?}: row {id} col {c}: {g} vs {e}"
                    );
                }
            }
        }
    }
}

/// K-quant rows must fill whole super-blocks and the data must match the shape: typed errors,
/// checked before anything reaches the GPU. Repacked blocks take 32/40/48 words of quants and
/// 4/4/5 of scales (the GPU dequantization test checks that no bit is lost).
#[test]
fn k_quant_repack_checks_shapes() {
    use lilypad_engine::{EngineError, weights::repack};
    for (ty, q_words, s_words) in [
        (GgmlType::Q4K, 32, 4),
        (GgmlType::Q5K, 40, 4),
        (GgmlType::Q6K, 48, 5),
    ] {
        let ts = ty.type_size() as usize;
        for (cols, len) in [
            (128u64, ts),
            (256 + 32, 2 * ts),
            (256, 2 * ts - 1),
            (256, 3 * ts),
        ] {
            let e = repack("w", ty, 2, cols, &vec![0; len]).unwrap_err();
            assert!(
                matches!(e, EngineError::Shape { .. }),
                "{ty} {cols} cols {len} bytes: {e}"
            );
        }
        let p = repack("w", ty, 3, 512, &vec![0xA5; 6 * ts]).unwrap();
        assert_eq!((p.q.len(), p.s.len()), (6 * q_words, 6 * s_words), "{ty}");
    }
}

fn matvec_reference(
    w: &[f32],
    x: &[f32],
    rows: usize,
    cols: usize,
    t: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0f64; t * rows];
    let mut mag = vec![0f64; t * rows];
    for ti in 0..t {
        for r in 0..rows {
            for c in 0..cols {
                let p = w[r * cols + c] as f64 * x[ti * cols + c] as f64;
                y[ti * rows + r] += p;
                mag[ti * rows + r] += p.abs();
            }
        }
    }
    (y, mag)
}

/// Both layouts; row-per-thread with each rows-per-thread variant and the per-matrix choice,
/// and without subgroups (the browser's code path).
const MATVEC_LAYOUTS: [MatvecLayout; 6] = [
    per_thread(true, None),
    per_thread(true, Some(4)),
    per_thread(true, Some(8)),
    per_thread(true, Some(16)),
    per_thread(false, None),
    MatvecLayout::RowPerWorkgroup,
];

const fn per_thread(subgroups: bool, rows: Option<u32>) -> MatvecLayout {
    MatvecLayout::RowPerThread { subgroups, rows }
}

/// y = W x for every weight type, decode (1 token) and prefill tiles (partial last tile),
/// steps of 3 and 4 tokens (the row-per-thread layout's 4-token tile), split weights, and the
/// accumulate (residual) form. Row counts are odd and not multiples
/// of any rows-per-workgroup (32, 64, 128) or of the rows per thread. Tolerance: 1e-5 of Σ|w·x| (f32 sums).
#[test]
fn matvec_matches_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    for &ty in WEIGHT_TYPES {
        // 1031 rows: enough for the per-matrix choice to take 16 rows per thread at decode.
        for (rows, cols) in [
            (77usize, test_cols(ty, 3, 1)),
            (130, test_cols(ty, 19, 3)),
            (1031, test_cols(ty, 2, 1)),
        ] {
            let (bytes, wd) = random_weight(&mut r, ty, rows, cols);
            for &(tokens, tile, cap, accumulate) in &[
                (1usize, 1u32, None, false),
                (13, 8, None, false),
                (5, 8, Some(2000u64), true),
                (1, 1, Some(1500), true),
                // Steps of a few tokens: the row-per-thread layout's 4-token tile, and its
                // 2-token one.
                (3, 8, None, false),
                (4, 8, Some(2000), true),
                (2, 8, None, false),
                (2, 8, Some(2000), true),
            ] {
                for layout in MATVEC_LAYOUTS {
                    let w = GpuWeight::upload(&ctx, "w", ty, rows as u64, cols as u64, &bytes, cap)
                        .unwrap();
                    let x = randn(&mut r, tokens * cols, 1.0);
                    let y0 = randn(&mut r, tokens * rows, 1.0);
                    let yb = buf_f32(&ctx, &y0);
                    let s = step(&ctx, tokens as u32, 0);
                    let ds = ops::matvec::matvec_with(
                        &ctx,
                        layout,
                        &w,
                        &buf_f32(&ctx, &x),
                        &yb,
                        rows as u32,
                        &s,
                        tile,
                        accumulate,
                    )
                    .unwrap();
                    run(&ctx, &ds, tokens as u32);
                    let got = read(&ctx, &yb, tokens * rows);
                    let (mut want, mag) = matvec_reference(&wd, &x, rows, cols, tokens);
                    if accumulate {
                        want.iter_mut().zip(&y0).for_each(|(w, &y)| *w += y as f64);
                    }
                    for i in 0..want.len() {
                        let err = (got[i] as f64 - want[i]).abs();
                        let bound = 1e-5
                            * (mag[i] + if accumulate { y0[i].abs() as f64 } else { 0.0 })
                            + 1e-6;
                        assert!(
                            err <= bound,
                            "{ty:?} {layout:?} {rows}x{cols} T={tokens} tile={tile} cap={cap:?}: y[{i}] = {} want {} (err {err:.2e} > {bound:.2e})",
                            got[i],
                            want[i]
                        );
                    }
                }
            }
        }
    }
}

/// Shapes the kernels cannot run are typed errors, not panics or garbage: columns that are
/// not whole 8-weight units (at upload), y rows narrower than W, a tile of 0 tokens.
#[test]
fn matvec_rejects_bad_shapes() {
    use lilypad_engine::EngineError;
    let ctx = ctx_or_skip!();
    let mut r = rng();
    let f32_weight = |cols: u64, r: &mut StdRng| {
        let data = randn(r, 3 * cols as usize, 1.0);
        let bytes = bytemuck::cast_slice(&data);
        GpuWeight::upload(&ctx, "w", GgmlType::F32, 3, cols, bytes, None)
    };
    let e = f32_weight(12, &mut r).err().expect("12 columns accepted");
    assert!(matches!(e, EngineError::Shape { .. }), "{e}");
    let w = f32_weight(16, &mut r).unwrap();
    let x = buf_f32(&ctx, &[0.0; 48]);
    let s = step(&ctx, 1, 0);
    for layout in MATVEC_LAYOUTS {
        for (stride, tile) in [(2, 1), (3, 0)] {
            let ds = ops::matvec::matvec_with(&ctx, layout, &w, &x, &x, stride, &s, tile, false);
            let e = ds
                .err()
                .unwrap_or_else(|| panic!("{layout:?} stride {stride} tile {tile} accepted"));
            assert!(matches!(e, EngineError::Shape { .. }), "{e}");
        }
    }
}

/// RMSNorm over whole rows and per head; n not a multiple of the workgroup. Tolerance 1e-5 relative.
#[test]
fn rms_norm_matches_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    for &(n, groups, tokens) in &[(576u32, 1u32, 5u32), (100, 3, 2), (1, 1, 1)] {
        let len = (n * groups * tokens) as usize;
        let x = randn(&mut r, len, 3.0);
        let w = randn(&mut r, n as usize, 2.0);
        let y = ctx
            .storage_buffer("y", len as u64 * 4, wgpu::BufferUsages::empty())
            .unwrap();
        let eps = 1e-5;
        let s = step(&ctx, tokens, 0);
        run(
            &ctx,
            &[ops::rms_norm::rms_norm(
                &ctx,
                &buf_f32(&ctx, &x),
                &buf_f32(&ctx, &w),
                &y,
                n,
                groups,
                eps,
                &s,
            )
            .unwrap()],
            tokens,
        );
        let got = read(&ctx, &y, len);
        let mut want = vec![0f64; len];
        let mut want_rstd = vec![0f64; (groups * tokens) as usize];
        for row in 0..(groups * tokens) as usize {
            let xs = &x[row * n as usize..][..n as usize];
            let ms = xs.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
            let sc = 1.0 / (ms + eps as f64).sqrt();
            want_rstd[row] = sc;
            for i in 0..n as usize {
                want[row * n as usize + i] = xs[i] as f64 * sc * w[i] as f64;
            }
        }
        assert_close(
            &got,
            &want,
            1e-5,
            1e-4,
            &format!("rms_norm n={n} groups={groups}"),
        );
        // The training form also keeps each row's reciprocal RMS; y is the same.
        let y2 = ctx
            .storage_buffer("y", len as u64 * 4, wgpu::BufferUsages::empty())
            .unwrap();
        let rstd = ctx
            .storage_buffer(
                "rstd",
                want_rstd.len() as u64 * 4,
                wgpu::BufferUsages::empty(),
            )
            .unwrap();
        run(
            &ctx,
            &[ops::rms_norm::rms_norm_saving(
                &ctx,
                &buf_f32(&ctx, &x),
                &buf_f32(&ctx, &w),
                None,
                &y2,
                Some(&rstd),
                n,
                groups,
                eps,
                &s,
            )
            .unwrap()],
            tokens,
        );
        assert_eq!(read(&ctx, &y2, len), got, "rms_norm saving rstd: y");
        assert_close(
            &read(&ctx, &rstd, want_rstd.len()),
            &want_rstd,
            1e-5,
            0.0,
            &format!("rms_norm rstd n={n} groups={groups}"),
        );
    }
}

/// x rotated in f64 at the given (row of x, position) pairs; other rows as they were.
fn rope_reference(
    x: &[f32],
    rows_at: &[(u32, u32)],
    heads: u32,
    hd: u32,
    n_rot: u32,
    mode: RopeMode,
    base: f64,
) -> Vec<f64> {
    let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for &(row, pos) in rows_at {
        for h in 0..heads {
            let b = ((row * heads + h) * hd) as usize;
            for i in 0..(n_rot / 2) as usize {
                let theta = pos as f64 * base.powf(-2.0 * i as f64 / n_rot as f64);
                let (i0, i1) = match mode {
                    RopeMode::Interleaved => (b + 2 * i, b + 2 * i + 1),
                    RopeMode::Neox => (b + i, b + i + n_rot as usize / 2),
                };
                let (a, c) = (x[i0] as f64, x[i1] as f64);
                want[i0] = a * theta.cos() - c * theta.sin();
                want[i1] = a * theta.sin() + c * theta.cos();
            }
        }
    }
    want
}

/// RoPE, both pair layouts, partial rotation, nonzero start position.
/// Tolerance 2e-5 absolute on unit-scale inputs (f32 sin/cos of angles up to ~300 rad).
#[test]
fn rope_matches_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    for &(mode, heads, hd, n_rot, pos0, tokens) in &[
        (RopeMode::Interleaved, 3u32, 64u32, 64u32, 0u32, 7u32),
        (RopeMode::Interleaved, 2, 40, 40, 290, 3),
        (RopeMode::Neox, 5, 64, 16, 17, 4),
        (RopeMode::Neox, 2, 256, 64, 100, 2),
    ] {
        let len = (tokens * heads * hd) as usize;
        let x = randn(&mut r, len, 1.0);
        let xb = buf_f32(&ctx, &x);
        let base = 10_000.0f64;
        let freqs = ops::rope::frequencies(base, n_rot);
        let s = step(&ctx, tokens, pos0);
        run(
            &ctx,
            &[ops::rope::rope(
                &ctx,
                &xb,
                &buf_f32(&ctx, &freqs),
                heads,
                hd,
                n_rot,
                mode,
                &s,
            )
            .unwrap()],
            tokens,
        );
        let got = read(&ctx, &xb, len);
        let rows_at: Vec<(u32, u32)> = (0..tokens).map(|t| (t, pos0 + t)).collect();
        let want = rope_reference(&x, &rows_at, heads, hd, n_rot, mode, base);
        for i in 0..len {
            let err = (got[i] as f64 - want[i]).abs();
            assert!(
                err < 2e-4,
                "rope {mode:?} hd={hd} n_rot={n_rot}: x[{i}] {} vs {} (err {err:.1e})",
                got[i],
                want[i]
            );
        }
    }
}

/// RoPE of a batched step, each token at its own position (tokens of three sequences,
/// interleaved, positions 0 to 291 in no order), in place on the step's rows. Both pair
/// layouts, partial rotation. Tolerance as above (2e-4 absolute).
#[test]
fn rope_per_token_positions_match_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    let context = 300u32;
    let tokens_at = [
        (0u32, 290u32),
        (2, 3),
        (1, 100),
        (2, 4),
        (0, 291),
        (1, 0),
        (2, 5),
        (0, 17),
        (1, 101),
    ];
    let tokens = tokens_at.len() as u32;
    let s = step_of(&ctx, Step::batch(&tokens_at, context));
    let base = 10_000.0f64;
    let mut worst = 0f64;
    for &(mode, heads, hd, n_rot) in &[
        (RopeMode::Interleaved, 3u32, 64u32, 64u32),
        (RopeMode::Interleaved, 2, 40, 40),
        (RopeMode::Neox, 5, 64, 16),
        (RopeMode::Neox, 2, 256, 64),
    ] {
        let len = (tokens * heads * hd) as usize;
        let x = randn(&mut r, len, 1.0);
        let xb = buf_f32(&ctx, &x);
        let freqs = ops::rope::frequencies(base, n_rot);
        run(
            &ctx,
            &[ops::rope::rope(
                &ctx,
                &xb,
                &buf_f32(&ctx, &freqs),
                heads,
                hd,
                n_rot,
                mode,
                &s,
            )
            .unwrap()],
            tokens,
        );
        let got = read(&ctx, &xb, len);
        let rows_at: Vec<(u32, u32)> = (0..tokens)
            .zip(tokens_at)
            .map(|(t, (_, pos))| (t, pos))
            .collect();
        let want = rope_reference(&x, &rows_at, heads, hd, n_rot, mode, base);
        for i in 0..len {
            let err = (got[i] as f64 - want[i]).abs();
            assert!(
                err < 2e-4,
                "rope per token {mode:?} hd={hd} n_rot={n_rot}: x[{i}] (row {}) {} vs {} (err {err:.1e})",
                i / (heads * hd) as usize,
                got[i],
                want[i]
            );
            worst = worst.max(err);
        }
    }
    eprintln!("rope per-token positions: max abs err {worst:.2e}");
}

/// `rope_store`: a batched step's K rows rotated and its V rows as they are, into caches of 3
/// sequence slots at each token's own row (`SLOT_TOKENS`), both pair layouts with partial
/// rotation, f32 and f16 caches; every other row keeps its sentinel. Tolerance: 2e-4
/// absolute (the rotation, as above) plus, for f16, half a unit in the last place (2^-11 of
/// the value).
#[test]
fn rope_store_writes_cache_rows() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    let tokens = SLOT_TOKENS.len();
    let cache_rows = 3 * SLOT_CONTEXT as usize;
    let s = step_of(&ctx, Step::batch(&SLOT_TOKENS, SLOT_CONTEXT));
    let base = 10_000.0f64;
    let rows_at: Vec<(u32, u32)> = (0..tokens as u32)
        .zip(SLOT_TOKENS)
        .map(|(t, (_, pos))| (t, pos))
        .collect();
    for &(mode, heads, hd, n_rot) in &[
        (RopeMode::Interleaved, 2u32, 40u32, 40u32),
        (RopeMode::Interleaved, 3, 32, 12),
        (RopeMode::Neox, 2, 64, 16),
        (RopeMode::Neox, 1, 256, 64),
    ] {
        let width = (heads * hd) as usize;
        let k = randn(&mut r, tokens * width, 1.0);
        let v = randn(&mut r, tokens * width, 1.0);
        let freqs = ops::rope::frequencies(base, n_rot);
        let want_k = rope_reference(&k, &rows_at, heads, hd, n_rot, mode, base);
        let want_v: Vec<f64> = v.iter().map(|&x| x as f64).collect();
        for dtype in KV_TYPES {
            // Exact in f16 too.
            let sentinel = -3.25f32;
            let (kc, _) = kv_buf(&ctx, &vec![sentinel; cache_rows * width], dtype);
            let (vc, _) = kv_buf(&ctx, &vec![sentinel; cache_rows * width], dtype);
            let d = ops::rope::rope_store(
                &ctx,
                [&buf_f32(&ctx, &k), &buf_f32(&ctx, &v)],
                &buf_f32(&ctx, &freqs),
                [&kc, &vc],
                dtype,
                [heads, hd, n_rot],
                mode,
                &s,
            )
            .unwrap();
            run(&ctx, &[d], tokens as u32);
            let rel = if dtype == DType::F16 {
                1.0 / 2048.0
            } else {
                0.0
            };
            for (name, cache, want) in [("k", &kc, &want_k), ("v", &vc, &want_v)] {
                let got = read_kv(&ctx, cache, cache_rows * width, dtype);
                for (i, &g) in got.iter().enumerate() {
                    let (row, j) = (i / width, i % width);
                    let what = format!(
                        "rope_store {mode:?} hd {hd} n_rot {n_rot} {dtype} cache: {name} row {row} col {j}"
                    );
                    match slot_token_at(row) {
                        Some(t) => {
                            let w = want[t * width + j];
                            let err = (g as f64 - w).abs();
                            assert!(err <= 2e-4 + rel * w.abs(), "{what}: {g} want {w}");
                        }
                        None => assert_eq!(g, sentinel, "{what} was overwritten"),
                    }
                }
            }
        }
    }
}

const ATTENTION_LAYOUTS: [AttentionLayout; 3] = [
    AttentionLayout::PerThread { subgroups: true },
    AttentionLayout::PerThread { subgroups: false },
    AttentionLayout::PerWorkgroup,
];

const KV_TYPES: [DType; 2] = [DType::F32, DType::F16];

/// f64 GQA: token t, at position pos of the sequence whose cache rows start at `first`
/// (`seen[t]` = (first, pos)), attends over cache rows first ..= first + pos. Returns the
/// outputs and each (token, head)'s log-sum-exp of its scaled scores.
#[allow(clippy::too_many_arguments)]
fn attention_reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    seen: &[(usize, usize)],
    nh: usize,
    nkv: usize,
    hd: usize,
    scale: f32,
) -> (Vec<f64>, Vec<f64>) {
    let mut want = vec![0f64; seen.len() * nh * hd];
    let mut lse = Vec::with_capacity(seen.len() * nh);
    for (t, &(first, pos)) in seen.iter().enumerate() {
        let rows = first..=first + pos;
        for h in 0..nh {
            let kh = h / (nh / nkv);
            let qv = &q[(t * nh + h) * hd..][..hd];
            let scores: Vec<f64> = rows
                .clone()
                .map(|p| {
                    (0..hd)
                        .map(|d| qv[d] as f64 * k[(p * nkv + kh) * hd + d] as f64)
                        .sum::<f64>()
                        * scale as f64
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
            lse.push(m + z.ln());
            for d in 0..hd {
                want[(t * nh + h) * hd + d] = rows
                    .clone()
                    .zip(&scores)
                    .map(|(p, s)| (s - m).exp() / z * v[(p * nkv + kh) * hd + d] as f64)
                    .sum();
            }
        }
    }
    (want, lse)
}

/// Causal GQA over a cache, prompts longer than one 64-position chunk, head dims up to 256
/// (wider than 128: a workgroup per token in the per-thread layout, for 1 and 11 tokens),
/// partial 8-token tiles, steps of 1 to 7 tokens deep into the cache (the per-thread
/// layout's positions split over lanes, some lanes seeing fewer positions than others), every
/// layout (the per-thread one falls back for head dim 42), f32 and f16 caches (the reference
/// computes with the f16-rounded values the cache holds). Tolerance: 1e-4 of |want| + 0.01.
#[test]
fn attention_matches_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    for &(n_head, n_kv, hd, pos0, tokens) in &[
        (6u32, 2u32, 64u32, 70u32, 5u32),
        (4, 4, 40, 0, 9),
        (2, 1, 256, 130, 1),
        (9, 3, 64, 0, 1),
        (3, 1, 128, 3, 21),
        (2, 2, 42, 5, 3),
        (9, 3, 64, 700, 1),
        (6, 2, 64, 333, 3),
        (3, 1, 128, 90, 2),
        (4, 2, 32, 4, 1),
        (4, 2, 256, 40, 11),
    ] {
        let kv_len = (pos0 + tokens) as usize;
        let (hd_, nkv, nh) = (hd as usize, n_kv as usize, n_head as usize);
        let q = randn(&mut r, tokens as usize * nh * hd_, 1.0);
        let k = randn(&mut r, kv_len * nkv * hd_, 1.0);
        let v = randn(&mut r, kv_len * nkv * hd_, 1.0);
        let out = ctx
            .storage_buffer("out", q.len() as u64 * 4, wgpu::BufferUsages::empty())
            .unwrap();
        let scale = 1.0 / (hd as f32).sqrt();
        let s = step(&ctx, tokens, pos0);
        let qb = buf_f32(&ctx, &q);
        for (dtype, layout) in KV_TYPES
            .into_iter()
            .flat_map(|d| ATTENTION_LAYOUTS.map(|l| (d, l)))
        {
            let ((kb, k), (vb, v)) = (kv_buf(&ctx, &k, dtype), kv_buf(&ctx, &v, dtype));
            let d = ops::attention::attention(
                &ctx, layout, &qb, &kb, &vb, dtype, &out, n_head, n_kv, hd, scale, &s,
            )
            .unwrap();
            run(&ctx, &[d], tokens);
            let got = read(&ctx, &out, q.len());
            let seen: Vec<(usize, usize)> = (0..tokens as usize)
                .map(|t| (0, pos0 as usize + t))
                .collect();
            let (want, want_lse) = attention_reference(&q, &k, &v, &seen, nh, nkv, hd_, scale);
            let what = format!(
                "attention {layout:?} {dtype} cache, heads {n_head}/{n_kv} hd {hd} pos0 {pos0} T {tokens}"
            );
            assert_close(&got, &want, 1e-4, 1e-2, &what);
            // The training form also keeps each (token, head)'s log-sum-exp; out is the same.
            let (out2, lse) = (
                ctx.storage_buffer("out", q.len() as u64 * 4, wgpu::BufferUsages::empty())
                    .unwrap(),
                ctx.storage_buffer(
                    "lse",
                    (tokens * n_head) as u64 * 4,
                    wgpu::BufferUsages::empty(),
                )
                .unwrap(),
            );
            let d = ops::attention::attention_saving(
                &ctx,
                layout,
                &qb,
                &kb,
                &vb,
                dtype,
                &out2,
                Some(&lse),
                n_head,
                n_kv,
                hd,
                scale,
                &s,
            )
            .unwrap();
            run(&ctx, &[d], tokens);
            assert_eq!(read(&ctx, &out2, q.len()), got, "{what}: out with lse");
            // A log-sum-exp is O(1) to O(log positions): 1e-5 relative to |want| + 1.
            assert_close(
                &read(&ctx, &lse, want_lse.len()),
                &want_lse,
                1e-5,
                1.0,
                &format!("{what}: lse"),
            );
        }
    }
}

/// Attention over long contexts: llvmpipe ends an invocation's loops once their iterations
/// reach 65,535 in all (silently), which a walk over every position passed — past ~520
/// positions for 128-wide heads in prefill, ~4,000 for 256-wide ones, ~56,000 for 64-wide
/// ones — so on such adapters the walk is split into segments and merged. The scores peak on
/// the last 40 positions (their K rows are the query, scaled), so a walk that stops short
/// gives another output and log-sum-exp. Every layout, 1 token (decode) and 9 (prefill's
/// per-lane tiles), head dims 64 (past 65,536 positions), 128 and 256, grouped heads, f32
/// and f16 caches. Tolerance: 1e-3 of |want| + 0.01 for outputs (most weight is on 40 rows),
/// 1e-5 of |want| + 1 for log-sum-exps.
#[test]
fn attention_covers_long_contexts() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    for &(n_head, n_kv, hd, pos0, tokens, dtype) in &[
        (2u32, 1u32, 64u32, 70_000u32, 1u32, DType::F32),
        (2, 1, 64, 70_000, 9, DType::F16),
        (6, 2, 128, 7_000, 1, DType::F16),
        (6, 2, 128, 7_000, 9, DType::F32),
        (4, 1, 256, 7_000, 1, DType::F32),
        (4, 1, 256, 7_000, 9, DType::F16),
    ] {
        let kv_len = (pos0 + tokens) as usize;
        let (hd_, nh, nkv) = (hd as usize, n_head as usize, n_kv as usize);
        let q_row = randn(&mut r, hd_, 1.0);
        let q: Vec<f32> = (0..tokens as usize * nh)
            .flat_map(|_| q_row.clone())
            .collect();
        let mut k = randn(&mut r, kv_len * nkv * hd_, 1.0);
        let scale = 1.0 / (hd as f32).sqrt();
        let norm2: f32 = q_row.iter().map(|x| x * x).sum();
        for row in (kv_len - 40) * nkv..kv_len * nkv {
            for d in 0..hd_ {
                k[row * hd_ + d] = q_row[d] * 12.0 / (norm2 * scale);
            }
        }
        let v = randn(&mut r, kv_len * nkv * hd_, 1.0);
        let out = ctx
            .storage_buffer("out", q.len() as u64 * 4, wgpu::BufferUsages::empty())
            .unwrap();
        let lse = ctx
            .storage_buffer(
                "lse",
                (tokens * n_head) as u64 * 4,
                wgpu::BufferUsages::empty(),
            )
            .unwrap();
        let s = step(&ctx, tokens, pos0);
        let qb = buf_f32(&ctx, &q);
        let ((kb, k), (vb, v)) = (kv_buf(&ctx, &k, dtype), kv_buf(&ctx, &v, dtype));
        let seen: Vec<(usize, usize)> = (0..tokens as usize)
            .map(|t| (0, pos0 as usize + t))
            .collect();
        let (want, want_lse) = attention_reference(&q, &k, &v, &seen, nh, nkv, hd_, scale);
        for layout in ATTENTION_LAYOUTS {
            let d = ops::attention::attention_saving(
                &ctx,
                layout,
                &qb,
                &kb,
                &vb,
                dtype,
                &out,
                Some(&lse),
                n_head,
                n_kv,
                hd,
                scale,
                &s,
            )
            .unwrap();
            run(&ctx, &[d], tokens);
            let what = format!(
                "attention {layout:?} {dtype} cache, heads {n_head}/{n_kv} hd {hd} pos0 {pos0} T {tokens}"
            );
            assert_close(&read(&ctx, &out, q.len()), &want, 1e-3, 1e-2, &what);
            assert_close(
                &read(&ctx, &lse, want_lse.len()),
                &want_lse,
                1e-5,
                1.0,
                &format!("{what}: lse"),
            );
        }
    }
}

/// Attention of batched steps over a cache of 3 sequence slots × 100 rows, random everywhere:
/// each token sees only its own slot's rows 0 ..= its position. Steps: tokens of the three
/// sequences interleaved (both 8-token workgroups of the per-thread layout mix sequences, so
/// lanes read their own rows; positions 0 and 99, the cache's last row, among them); a run of 8
/// tokens of slot 2 (one workgroup shares its rows) then a mixed tail; and 11 tokens of the
/// sequence in slot 1 from position 60 (`Step::for_sequence`, a prefill in a slot past the
/// first). Every layout, f32 and f16 caches, head dims 64, 40 and 128 with grouped and plain
/// heads. Tolerance as above (1e-4 of |want| + 0.01).
#[test]
fn attention_batched_sequences_match_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    let context = 100u32;
    let interleaved = [
        (0u32, 70u32),
        (1, 5),
        (2, 40),
        (0, 71),
        (2, 41),
        (1, 6),
        (0, 72),
        (2, 99),
        (1, 0),
        (0, 73),
    ];
    let mut run_then_mixed: Vec<(u32, u32)> = (30..38).map(|p| (2, p)).collect();
    run_then_mixed.extend([(1, 60), (0, 90), (1, 61)]);
    // Batched decode: one token of each sequence, a workgroup per (head, token).
    let decode = [(0u32, 99u32), (1, 3), (2, 57)];
    let five = [(0u32, 10u32), (1, 99), (2, 0), (0, 11), (1, 50)];
    let steps = [
        ("decode of three sequences", Step::batch(&decode, context)),
        (
            "five tokens of three sequences",
            Step::batch(&five, context),
        ),
        ("interleaved", Step::batch(&interleaved, context)),
        (
            "8 of slot 2 then mixed",
            Step::batch(&run_then_mixed, context),
        ),
        ("slot 1 prefill", Step::for_sequence(11, 60, 1, context)),
    ];
    let mut worst = 0f64;
    for (&(n_head, n_kv, hd), dtype) in [(6u32, 2u32, 64u32), (4, 4, 40), (2, 1, 128)]
        .iter()
        .flat_map(|s| KV_TYPES.map(|d| (s, d)))
    {
        let (hd_, nkv, nh) = (hd as usize, n_kv as usize, n_head as usize);
        let cache_len = 3 * context as usize * nkv * hd_;
        let (kb, k) = kv_buf(&ctx, &randn(&mut r, cache_len, 1.0), dtype);
        let (vb, v) = kv_buf(&ctx, &randn(&mut r, cache_len, 1.0), dtype);
        let scale = 1.0 / (hd as f32).sqrt();
        for (name, st) in &steps {
            let tokens = st.n_tokens;
            let q = randn(&mut r, tokens as usize * nh * hd_, 1.0);
            let qb = buf_f32(&ctx, &q);
            let s = step_of(&ctx, *st);
            let seen: Vec<(usize, usize)> = st.tok[..tokens as usize]
                .iter()
                .map(|&[pos, row, slot, _]| {
                    assert_eq!(row, slot * context + pos);
                    ((slot * context) as usize, pos as usize)
                })
                .collect();
            let (want, _) = attention_reference(&q, &k, &v, &seen, nh, nkv, hd_, scale);
            for layout in ATTENTION_LAYOUTS {
                let out = ctx
                    .storage_buffer("out", q.len() as u64 * 4, wgpu::BufferUsages::empty())
                    .unwrap();
                let d = ops::attention::attention(
                    &ctx, layout, &qb, &kb, &vb, dtype, &out, n_head, n_kv, hd, scale, &s,
                )
                .unwrap();
                run(&ctx, &[d], tokens);
                let got = read(&ctx, &out, q.len());
                let err = assert_close(
                    &got,
                    &want,
                    1e-4,
                    1e-2,
                    &format!(
                        "attention {layout:?} {dtype} cache, heads {n_head}/{n_kv} hd {hd}: {name}"
                    ),
                );
                worst = worst.max(err);
            }
        }
    }
    eprintln!("attention batched sequences: max rel err {worst:.2e} (floor 1e-2)");
}

/// Softmax and log-softmax rows. Tolerance 1e-5 relative.
#[test]
fn softmax_matches_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    for &(n, rows) in &[(1000u32, 3u32), (49_153, 2), (7, 1)] {
        let x = randn(&mut r, (n * rows) as usize, 20.0);
        for log in [false, true] {
            let y = ctx
                .storage_buffer("y", x.len() as u64 * 4, wgpu::BufferUsages::empty())
                .unwrap();
            run(
                &ctx,
                &[ops::softmax::softmax(&ctx, &buf_f32(&ctx, &x), &y, n, rows, log).unwrap()],
                1,
            );
            let got = read(&ctx, &y, x.len());
            let mut want = vec![0f64; x.len()];
            for row in 0..rows as usize {
                let xs = &x[row * n as usize..][..n as usize];
                let m = xs.iter().cloned().fold(f32::MIN, f32::max) as f64;
                let lz = xs.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
                for i in 0..n as usize {
                    let lp = xs[i] as f64 - m - lz;
                    want[row * n as usize + i] = if log { lp } else { lp.exp() };
                }
            }
            if log {
                assert_close(&got, &want, 1e-5, 1.0, &format!("log_softmax n={n}"));
            } else {
                assert_close(&got, &want, 1e-4, 1e-30, &format!("softmax n={n}"));
            }
        }
    }
}

/// Residual add and SwiGLU gate. Tolerance 1e-6 relative.
#[test]
fn elementwise_matches_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    let (row, max_tokens, tokens) = (1000u32, 4u32, 3u32);
    let n = (row * max_tokens) as usize;
    let a = randn(&mut r, n, 5.0);
    let b = randn(&mut r, n, 5.0);
    let s = step(&ctx, tokens, 0);
    let (ab, bb) = (buf_f32(&ctx, &a), buf_f32(&ctx, &b));
    let out = ctx
        .storage_buffer("out", n as u64 * 4, wgpu::BufferUsages::empty())
        .unwrap();
    run(
        &ctx,
        &[ops::elementwise::silu_mul(&ctx, &ab, &bb, &out, row, &s).unwrap()],
        tokens,
    );
    let live = (row * tokens) as usize;
    let got = read(&ctx, &out, live);
    let want: Vec<f64> = (0..live)
        .map(|i| {
            let g = a[i] as f64;
            g / (1.0 + (-g).exp()) * b[i] as f64
        })
        .collect();
    assert_close(&got, &want, 1e-5, 1e-6, "silu_mul");
    run(
        &ctx,
        &[ops::elementwise::add(&ctx, &ab, &bb, row, &s).unwrap()],
        tokens,
    );
    let got = read(&ctx, &ab, n);
    let want: Vec<f64> = (0..n)
        .map(|i| {
            if i < live {
                a[i] as f64 + b[i] as f64
            } else {
                a[i] as f64
            }
        })
        .collect();
    assert_close(
        &got,
        &want,
        1e-6,
        1e-6,
        "add (and rows past n_tokens untouched)",
    );
}

/// The copy kernel copies.
#[test]
fn copy_copies() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    let x = randn(&mut r, 4 * 1001, 1.0);
    let dst = ctx
        .storage_buffer("dst", x.len() as u64 * 4, wgpu::BufferUsages::empty())
        .unwrap();
    run(
        &ctx,
        &[ops::copy::copy(&ctx, &buf_f32(&ctx, &x), &dst, 1001).unwrap()],
        1,
    );
    assert_eq!(read(&ctx, &dst, x.len()), x);
}

/// concat_rows puts each token's two rows side by side (exactly) and leaves the rows past
/// the step's tokens alone.
#[test]
fn concat_rows_matches_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    let (rows, tokens, a_row, b_row) = (5usize, 3u32, 8usize, 260usize);
    let a = randn(&mut r, rows * a_row, 1.0);
    let b = randn(&mut r, rows * b_row, 1.0);
    let width = a_row + b_row;
    let dst = buf_f32(&ctx, &vec![-7.0; rows * width]);
    let d = ops::copy::concat_rows(
        &ctx,
        &buf_f32(&ctx, &a),
        &buf_f32(&ctx, &b),
        &dst,
        a_row as u32,
        b_row as u32,
        &step(&ctx, tokens, 0),
    )
    .unwrap();
    run(&ctx, &[d], tokens);
    let got = read(&ctx, &dst, rows * width);
    for t in 0..rows {
        let want: Vec<f32> = if t < tokens as usize {
            [&a[t * a_row..][..a_row], &b[t * b_row..][..b_row]].concat()
        } else {
            vec![-7.0; width]
        };
        assert_eq!(&got[t * width..][..width], &want[..], "row {t}");
    }
    assert!(ops::copy::concat_rows(&ctx, &dst, &dst, &dst, 6, 4, &step(&ctx, 1, 0)).is_err());
}

/// GPU sampling picks the token the plain CPU rule (f64) picks, for greedy, temperature,
/// top-k, top-p, penalties and their mixes, over many draws; at a near-tie of the running
/// mass, the token the rule picks for a draw within 1e-5 of the same one. Vocabularies up to
/// Qwen3.5's 248,320 (on llvmpipe its top-k and top-p searches once ran past the driver's
/// budget of loop iterations per invocation and returned no token). Logits with no ties,
/// logits rounded to whole numbers (at 1,000 tokens the top-k survivors tie by dozens: the
/// short-list path with ties; at 49,153 by thousands: past the list, the bitwise searches),
/// and peaked logits (a few tokens hold the mass: top-p alone takes the short list, which it
/// leaves for the searches where the mass is spread). Top-k 300 takes the searches too.
#[test]
fn sampling_matches_reference() {
    let ctx = ctx_or_skip!();
    let mut r = rng();
    for (&vocab, shape) in [1000u32, 49_153, 248_320]
        .iter()
        .flat_map(|v| [(v, "plain"), (v, "rounded"), (v, "peaked")])
    {
        let row = 1usize;
        let mut logits = randn(&mut r, 2 * vocab as usize, 6.0);
        match shape {
            "rounded" => logits.iter_mut().for_each(|l| *l = l.round()),
            "peaked" => {
                // A model's confident step: a few tokens hold nearly all the mass.
                let n = logits.len();
                for _ in 0..30 {
                    logits[r.random_range(0..n)] += 12.0;
                }
            }
            _ => {}
        }
        let lb = buf_f32(&ctx, &logits);
        let sampler = Sampler::new(&ctx, &lb, vocab).unwrap();
        let recent: Vec<u32> = (0..40).map(|_| r.random_range(0..vocab)).collect();
        let configs = [
            SamplingParams::greedy(),
            SamplingParams {
                repeat_penalty: 1.3,
                presence_penalty: 0.5,
                ..SamplingParams::greedy()
            },
            SamplingParams {
                temperature: 1.0,
                ..SamplingParams::greedy()
            },
            SamplingParams {
                temperature: 0.7,
                top_k: 40,
                ..SamplingParams::greedy()
            },
            SamplingParams {
                temperature: 0.6,
                top_k: 20,
                top_p: 0.95,
                ..SamplingParams::greedy()
            },
            SamplingParams {
                temperature: 1.5,
                top_p: 0.5,
                repeat_penalty: 1.1,
                ..SamplingParams::greedy()
            },
            SamplingParams {
                temperature: 0.8,
                top_k: 1,
                ..SamplingParams::greedy()
            },
            SamplingParams {
                temperature: 0.9,
                top_k: 300,
                top_p: 0.9,
                ..SamplingParams::greedy()
            },
            SamplingParams {
                temperature: 0.3,
                top_p: 0.9,
                ..SamplingParams::greedy()
            },
        ];
        let row_logits = &logits[row * vocab as usize..][..vocab as usize];
        for sp in &configs {
            for _ in 0..12 {
                let u: f32 = r.random();
                sampler.prepare(&ctx, sp, &recent, row as u32, u).unwrap();
                submit(&ctx, &[sampler.dispatch()], 1);
                let got = pollster::block_on(ctx.read_u32(&sampler.result, 0, 1)).unwrap()[0];
                let want = reference_sample(row_logits, sp, &recent, u);
                // At a near-tie the GPU's f32 running mass may cross the draw one token early
                // or late: then the token it picked must be the reference's pick for a draw
                // near u. Each of the kernel's 256 threads sums a span of vocab / 256 values
                // in f32, so the kept mass is off by up to span × 2⁻²⁴ of itself (1e-5 at
                // least: the f32 draw and the scan's own rounding).
                let near = (vocab as f64 / 256.0 * f64::powi(2.0, -24)).max(1e-5);
                let gap = (got != want).then(|| draw_gap(row_logits, sp, &recent, u, got));
                assert!(
                    got == want || gap.is_some_and(|g| g <= near),
                    "vocab {vocab} ({shape} logits) {sp:?} u={u}: got {got}, want {want} (the reference picks it {gap:?} away)"
                );
            }
        }
    }
}

/// How far from `u` the nearest draw is at which the reference picks `token` (the pick is
/// non-decreasing in the draw, so a bisection finds the boundary); `f64::INFINITY` when no
/// draw on that side picks it.
fn draw_gap(logits: &[f32], sp: &SamplingParams, recent: &[u32], u: f32, token: u32) -> f64 {
    let pick = |v: f64| reference_sample(logits, sp, recent, v as f32);
    let up = token > pick(u as f64);
    let (mut near, mut far) = if up { (u as f64, 1.0) } else { (u as f64, 0.0) };
    if (up && pick(far - 1e-9) < token) || (!up && pick(far) > token) {
        return f64::INFINITY;
    }
    // Invariant: pick(near) is on u's side of `token`, pick(far) reaches it.
    for _ in 0..50 {
        let mid = (near + far) / 2.0;
        let reached = if up {
            pick(mid) >= token
        } else {
            pick(mid) <= token
        };
        if reached { far = mid } else { near = mid }
    }
    if pick(far) == token {
        (far - u as f64).abs()
    } else {
        f64::INFINITY
    }
}

/// Bad sampling parameters are refused with a typed error.
#[test]
fn sampling_rejects_bad_parameters() {
    for sp in [
        SamplingParams {
            temperature: -1.0,
            ..SamplingParams::greedy()
        },
        SamplingParams {
            top_p: 0.0,
            ..SamplingParams::greedy()
        },
        SamplingParams {
            top_p: 1.5,
            ..SamplingParams::greedy()
        },
        SamplingParams {
            temperature: f32::NAN,
            ..SamplingParams::greedy()
        },
        SamplingParams {
            repeat_penalty: 0.0,
            ..SamplingParams::greedy()
        },
    ] {
        assert!(
            matches!(sp.validate(), Err(lilypad_engine::EngineError::Sampling(_))),
            "{sp:?}"
        );
    }
}
