//! The backward kernels against finite differences of f64 CPU references, on fresh random
//! inputs whose sizes are not multiples of the workgroup sizes. Each test takes a scalar loss
//! L = Σ r · out (r random, so dL/dout = r is the upstream gradient), differentiates the f64
//! forward reference by central differences, and compares what the GPU kernel returns.
//! Central differences of an f64 function are accurate to about 1e-9 relative here, so the
//! stated tolerances measure the kernels' f32 arithmetic. Where an input has many elements,
//! a random sample of them is differenced, and every element is checked against the
//! analytic f64 gradient that the differences confirm.
//! Skips without an adapter unless LILYPAD_REQUIRE_GPU=1.

use lilypad_engine::EngineError;
use lilypad_engine::ops::attention::AttentionLayout;
use lilypad_engine::ops::matmul::{MatmulLayout, Operand, TokenDim};
use lilypad_engine::ops::rms_norm::GateGrad;
use lilypad_engine::ops::{self, Step, rope::RopeMode};
use lilypad_engine::tensor::DType;
use lilypad_engine::weights::GpuWeight;
use lilypad_gguf::{GgmlType, dequantize, quantize};
use rand::{Rng, rngs::StdRng};

mod common;
use common::{Gpu, seeded};

fn randn(r: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (r.random::<f32>() * 2.0 - 1.0) * scale)
        .collect()
}

/// `v` rounded to f16 where the cache holds f16.
fn as_kv(v: Vec<f32>, dtype: DType) -> Vec<f32> {
    match dtype {
        DType::F32 => v,
        DType::F16 => v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
    }
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Step of the finite differences: small next to the inputs (about 1), large next to f64's
/// rounding of the loss.
const H: f64 = 1e-5;

/// Attention's backward in each of its layouts (the per-thread one with and without subgroup
/// shuffles).
const LAYOUTS: [AttentionLayout; 3] = [
    AttentionLayout::PerThread { subgroups: true },
    AttentionLayout::PerThread { subgroups: false },
    AttentionLayout::PerWorkgroup,
];

/// ∂f/∂x[i] by central differences, for each i of `at`.
fn finite_differences(f: impl Fn(&[f64]) -> f64, x: &[f64], at: &[usize]) -> Vec<f64> {
    let mut x = x.to_vec();
    at.iter()
        .map(|&i| {
            let v = x[i];
            x[i] = v + H;
            let up = f(&x);
            x[i] = v - H;
            let down = f(&x);
            x[i] = v;
            (up - down) / (2.0 * H)
        })
        .collect()
}

/// `n` distinct indices below `len` (all of them when n ≥ len).
fn sample(r: &mut StdRng, len: usize, n: usize) -> Vec<usize> {
    if n >= len {
        return (0..len).collect();
    }
    let mut all: Vec<usize> = (0..len).collect();
    for i in 0..n {
        let j = r.random_range(i..len);
        all.swap(i, j);
    }
    all.truncate(n);
    all
}

/// |got − want| ≤ rel · (|want| + floor) everywhere; returns the worst ratio to that bound.
fn assert_close(got: &[f64], want: &[f64], rel: f64, floor: f64, what: &str) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = 0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs() / (w.abs() + floor);
        assert!(
            err <= rel && g.is_finite(),
            "{what}: index {i}: got {g}, want {w} (rel err {err:.2e} > {rel:.0e})"
        );
        worst = worst.max(err);
    }
    worst
}

/// The GPU's gradient at the sampled indices against their finite differences, and at every
/// index against the analytic f64 gradient.
fn check_gradient(
    gpu: &[f32],
    analytic: &[f64],
    fd: &[f64],
    at: &[usize],
    rel: f64,
    floor: f64,
    what: &str,
) {
    let gpu = f64s(gpu);
    // The analytic reference is what the differences say (confirms the reference itself).
    let sampled: Vec<f64> = at.iter().map(|&i| analytic[i]).collect();
    assert_close(
        &sampled,
        fd,
        1e-6,
        floor,
        &format!("{what}: analytic vs differences"),
    );
    let at_samples: Vec<f64> = at.iter().map(|&i| gpu[i]).collect();
    let worst_fd = assert_close(
        &at_samples,
        fd,
        rel,
        floor,
        &format!("{what}: GPU vs differences"),
    );
    let worst = assert_close(
        &gpu,
        analytic,
        rel,
        floor,
        &format!("{what}: GPU vs analytic"),
    );
    eprintln!(
        "{what}: worst relative error {worst_fd:.1e} (differences), {worst:.1e} (all {})",
        gpu.len()
    );
}

/// The GPU's gradient against finite differences taken at every index (where those are the
/// reference: inputs small enough to difference them all).
fn check_against_differences(gpu: &[f32], fd: &[f64], rel: f64, floor: f64, what: &str) {
    let worst = assert_close(&f64s(gpu), fd, rel, floor, what);
    eprintln!(
        "{what}: worst relative error {worst:.1e} (differences, all {})",
        fd.len()
    );
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

// ---------------------------------------------------------------------------------------
// Frozen quantized linear: dx = Wᵀ · dy from the weight's blocks.

/// y[t] = W · x[t] for W [rows, cols] (row-major, f64).
fn linear_f64(w: &[f64], x: &[f64], cols: usize) -> Vec<f64> {
    x.chunks_exact(cols)
        .flat_map(|xt| w.chunks_exact(cols).map(move |wr| dot(wr, xt)))
        .collect()
}

fn test_cols(ty: GgmlType) -> usize {
    if ty.block_size() == 256 { 512 } else { 96 }
}

#[test]
fn matvec_backward_matches_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    // 11 tokens: one 8-token tile and part of another; 37 rows, split into chunks of 16 in
    // the second pass so that later chunks add to the first one's output.
    let (t, rows) = (11usize, 37usize);
    for &ty in lilypad_engine::weights::SUPPORTED {
        let cols = test_cols(ty);
        let bytes = quantize(ty, &randn(&mut r, rows * cols, 1.0)).unwrap();
        let mut deq = vec![0f32; rows * cols];
        dequantize(ty, &bytes, &mut deq).unwrap();
        let w64 = f64s(&deq);
        let x = randn(&mut r, t * cols, 1.0);
        // dy lives in a wider buffer (stride rows + 5), as a projection's slice of a row.
        let stride = rows + 5;
        let dy = randn(&mut r, t * stride, 1.0);
        let dy_rows: Vec<f64> = dy
            .chunks_exact(stride)
            .flat_map(|c| f64s(&c[..rows]))
            .collect();
        let loss = |x: &[f64]| dot(&linear_f64(&w64, x, cols), &dy_rows);
        let analytic: Vec<f64> = dy_rows
            .chunks_exact(rows)
            .flat_map(|g| {
                (0..cols)
                    .map(|c| (0..rows).map(|j| w64[j * cols + c] * g[j]).sum::<f64>())
                    .collect::<Vec<_>>()
            })
            .collect();
        let at = sample(&mut r, t * cols, 40);
        let fd = finite_differences(loss, &f64s(&x), &at);
        for chunk_rows in [None, Some(16u64)] {
            let row_bytes = ty.row_bytes(cols as u64).unwrap();
            let weight = GpuWeight::upload(
                &gpu.0,
                "w",
                ty,
                rows as u64,
                cols as u64,
                &bytes,
                chunk_rows.map(|n| n * row_bytes),
            )
            .unwrap();
            assert_eq!(weight.chunks.len() > 1, chunk_rows.is_some());
            // Accumulating onto a known start checks that every chunk adds.
            let start = randn(&mut r, t * cols, 1.0);
            for accumulate in [false, true] {
                let dx = gpu.upload(&start);
                let step = gpu.step_of(Step::new(t as u32, 0));
                let ds = ops::matvec::matvec_backward(
                    &gpu.0,
                    &weight,
                    &gpu.upload(&dy),
                    &dx,
                    stride as u32,
                    &step,
                    accumulate,
                )
                .unwrap();
                gpu.run(&ds, t);
                let mut got = gpu.read(&dx, t * cols);
                if accumulate {
                    got.iter_mut().zip(&start).for_each(|(g, s)| *g -= s);
                }
                check_gradient(
                    &got,
                    &analytic,
                    &fd,
                    &at,
                    2e-4,
                    1.0,
                    &format!(
                        "{ty:?} dx (chunks {}, accumulate {accumulate})",
                        weight.chunks.len()
                    ),
                );
            }
        }
    }
}

/// A weight taller than one dispatch walks (CPU adapters cut a loop short after 65535
/// iterations per invocation, silently): 9000 rows against the f64 transpose product.
#[test]
fn matvec_backward_walks_many_rows() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let (t, rows, cols) = (11usize, 9000usize, 64usize);
    for ty in [GgmlType::Q8_0, GgmlType::F32] {
        let bytes = quantize(ty, &randn(&mut r, rows * cols, 1.0)).unwrap();
        let mut deq = vec![0f32; rows * cols];
        dequantize(ty, &bytes, &mut deq).unwrap();
        let dy = randn(&mut r, t * rows, 1.0);
        let weight =
            GpuWeight::upload(&gpu.0, "w", ty, rows as u64, cols as u64, &bytes, None).unwrap();
        let dx = gpu.zeros(t * cols);
        let step = gpu.step_of(Step::new(t as u32, 0));
        let ds = ops::matvec::matvec_backward(
            &gpu.0,
            &weight,
            &gpu.upload(&dy),
            &dx,
            rows as u32,
            &step,
            false,
        )
        .unwrap();
        assert!(ds.len() > 1, "more rows than one dispatch walks");
        gpu.run(&ds, t);
        let want: Vec<f64> = (0..t * cols)
            .map(|i| {
                let (tt, c) = (i / cols, i % cols);
                (0..rows)
                    .map(|j| deq[j * cols + c] as f64 * dy[tt * rows + j] as f64)
                    .sum()
            })
            .collect();
        let worst = assert_close(
            &f64s(&gpu.read(&dx, t * cols)),
            &want,
            1e-4,
            10.0,
            &format!("{ty:?} dx"),
        );
        eprintln!("{ty:?} dx over {rows} rows: worst relative error {worst:.1e}");
    }
}

#[test]
fn matvec_backward_rejects_bad_shapes() {
    let gpu = gpu_or_skip!();
    let w = GpuWeight::upload(
        &gpu.0,
        "w",
        GgmlType::F32,
        8,
        16,
        bytemuck::cast_slice(&[0f32; 128]),
        None,
    )
    .unwrap();
    let b = gpu.upload(&[0.0; 128]);
    let step = gpu.step_of(Step::new(1, 0));
    let err = ops::matvec::matvec_backward(&gpu.0, &w, &b, &b, 7, &step, false)
        .err()
        .expect("a dy stride below the weight's rows");
    assert!(err.to_string().contains("dy stride 7"), "{err}");
}

// ---------------------------------------------------------------------------------------
// LoRA: y = W·x + s · B·(A·x); the gradients of A and B, and the adapter's share of dx.

/// c = A · B in f64 for A [m, k], B [k, n].
fn matmul_f64(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for l in 0..k {
            let av = a[i * k + l];
            for j in 0..n {
                c[i * n + j] += av * b[l * n + j];
            }
        }
    }
    c
}

fn transpose(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0f64; a.len()];
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = a[i * cols + j];
        }
    }
    t
}

/// Both layouts, every orientation, with the step's token count standing for m, for k or for
/// neither; c's widths cover the per-thread layout's workgroup shapes (1, 2, 4 and 6 column
/// blocks of 4, edges included).
#[test]
fn matmul_matches_reference_in_every_orientation() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    for (layout, (m, n, k, tokens)) in [MatmulLayout::Tiled, MatmulLayout::PerThread]
        .into_iter()
        .flat_map(|l| {
            [
                (19usize, 23usize, 37usize, TokenDim::Rows),
                (21, 16, 37, TokenDim::Inner),
                (13, 6, 70, TokenDim::None),
                (9, 4, 5, TokenDim::Rows),
                (35, 8, 64, TokenDim::Inner),
            ]
            .map(|c| (l, c))
        })
    {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            check_matmul(&gpu, &mut r, layout, [m, n, k], tokens, ta, tb);
        }
    }
}

/// One [`check`](matmul_matches_reference_in_every_orientation) case: the step holds 4 tokens
/// fewer than the size they stand for, and rows of c past the step's stay untouched.
fn check_matmul(
    gpu: &Gpu,
    r: &mut StdRng,
    layout: MatmulLayout,
    [m, n, k]: [usize; 3],
    tokens: TokenDim,
    ta: bool,
    tb: bool,
) {
    let a = randn(r, m * k, 1.0);
    let b = randn(r, k * n, 1.0);
    let (step_tokens, m_used, k_used) = match tokens {
        TokenDim::Rows => (m - 4, m - 4, k),
        TokenDim::Inner => (k - 4, m, k - 4),
        TokenDim::None => (1, m, k),
    };
    // A [m, k_used] · B [k_used, n]: the first k_used columns of A and rows of B.
    let a_used: Vec<f32> = (0..m)
        .flat_map(|i| a[i * k..i * k + k_used].to_vec())
        .collect();
    let want = matmul_f64(&f64s(&a_used), &f64s(&b[..k_used * n]), m, k_used, n);
    // Stored layouts: A as [m, k] or as Aᵀ [k, m], each row padded by 3.
    let store = |v: &[f32], rows: usize, cols: usize, t: bool| -> (Vec<f32>, usize) {
        let src = if t {
            transpose(&f64s(v), rows, cols)
        } else {
            f64s(v)
        };
        let (sr, sc) = if t { (cols, rows) } else { (rows, cols) };
        let stride = sc + 3;
        let mut out = vec![f32::NAN; sr * stride];
        for i in 0..sr {
            for j in 0..sc {
                out[i * stride + j] = src[i * sc + j] as f32;
            }
        }
        (out, stride)
    };
    let (sa, lda) = store(&a, m, k, ta);
    let (sb, ldb) = store(&b, k, n, tb);
    let (ba, bb) = (gpu.upload(&sa), gpu.upload(&sb));
    let operand = |buf, stride, t| Operand {
        buf,
        stride: stride as u32,
        transposed: t,
    };
    let ldc = n + 2;
    let start = randn(r, m * ldc, 1.0);
    for (accumulate, alpha) in [(false, 1.0f32), (true, -0.75)] {
        let c = gpu.upload(&start);
        let step = gpu.step_of(Step::new(step_tokens as u32, 0));
        let d = ops::matmul::matmul(
            &gpu.0,
            layout,
            operand(&ba, lda, ta),
            operand(&bb, ldb, tb),
            &c,
            [m as u32, n as u32, k as u32],
            ldc as u32,
            alpha,
            accumulate,
            tokens,
            &step,
        )
        .unwrap();
        gpu.run(&[d], step_tokens);
        let got = gpu.read(&c, m * ldc);
        for i in 0..m {
            for j in 0..ldc {
                let g = got[i * ldc + j] as f64;
                let s = start[i * ldc + j] as f64;
                let w = if i < m_used && j < n {
                    alpha as f64 * want[i * n + j] + if accumulate { s } else { 0.0 }
                } else {
                    s
                };
                assert!(
                    (g - w).abs() <= 1e-5 * (w.abs() + k as f64),
                    "{layout:?} [{m}, {n}, {k}] {tokens:?} A{} B{} accumulate {accumulate}: c[{i}, {j}] = {g}, want {w}",
                    if ta { "ᵀ" } else { "" },
                    if tb { "ᵀ" } else { "" },
                );
            }
        }
    }
}

#[test]
fn matmul_rejects_strides_too_narrow() {
    let gpu = gpu_or_skip!();
    let b = gpu.upload(&[0.0; 64]);
    let step = gpu.step_of(Step::new(1, 0));
    let err = ops::matmul::matmul(
        &gpu.0,
        MatmulLayout::Tiled,
        Operand::new(&b, 3),
        Operand::new(&b, 4),
        &b,
        [2, 4, 4],
        4,
        1.0,
        false,
        TokenDim::None,
        &step,
    )
    .err()
    .expect("A's rows hold 4 values, its stride is 3");
    assert!(err.to_string().contains("matmul"), "{err}");
}

/// The LoRA path's gradients as a trainer computes them, from the kernels: u = A·x
/// (kept from the forward), dB = s · dYᵀ·u, du = s · dY·B, dA = duᵀ·x, and
/// dx = Wᵀ·dY + Aᵀ·du, against finite differences of y = W·x + s · B·(A·x).
#[test]
fn lora_gradients_match_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let (t, n_in, n_out, rank) = (13usize, 72usize, 40usize, 5usize);
    let scale = 1.7f32;
    let w = randn(&mut r, n_out * n_in, 1.0);
    let a = randn(&mut r, rank * n_in, 0.5);
    let b = randn(&mut r, n_out * rank, 0.5);
    let x = randn(&mut r, t * n_in, 1.0);
    let dy = randn(&mut r, t * n_out, 1.0);
    let (w64, dy64, s) = (f64s(&w), f64s(&dy), scale as f64);
    let forward = |x: &[f64], a: &[f64], b: &[f64]| -> f64 {
        let u = matmul_f64(x, &transpose(a, rank, n_in), t, n_in, rank);
        let lora = matmul_f64(&u, &transpose(b, n_out, rank), t, rank, n_out);
        let base = linear_f64(&w64, x, n_in);
        let y: Vec<f64> = base.iter().zip(&lora).map(|(p, q)| p + s * q).collect();
        dot(&y, &dy64)
    };
    let (x64, a64, b64) = (f64s(&x), f64s(&a), f64s(&b));
    // Analytic references.
    let u = matmul_f64(&x64, &transpose(&a64, rank, n_in), t, n_in, rank);
    let db_ref: Vec<f64> = matmul_f64(&transpose(&dy64, t, n_out), &u, n_out, t, rank)
        .iter()
        .map(|v| s * v)
        .collect();
    let du: Vec<f64> = matmul_f64(&dy64, &b64, t, n_out, rank)
        .iter()
        .map(|v| s * v)
        .collect();
    let da_ref = matmul_f64(&transpose(&du, t, rank), &x64, rank, t, n_in);
    let dx_ref: Vec<f64> = {
        let base = matmul_f64(&dy64, &w64, t, n_out, n_in);
        let lora = matmul_f64(&du, &a64, t, rank, n_in);
        base.iter().zip(&lora).map(|(p, q)| p + q).collect()
    };

    // On the GPU. u is what the forward keeps; here it is computed by the same matmul.
    let g = &gpu.0;
    let step = gpu.step_of(Step::new(t as u32, 0));
    let weight = GpuWeight::upload(
        g,
        "w",
        GgmlType::F32,
        n_out as u64,
        n_in as u64,
        bytemuck::cast_slice(&w),
        None,
    )
    .unwrap();
    let (ba, bb, bx, bdy) = (
        gpu.upload(&a),
        gpu.upload(&b),
        gpu.upload(&x),
        gpu.upload(&dy),
    );
    let zeros = |n: usize| gpu.upload(&vec![0.0; n]);
    let (bu, bdu, bda, bdb, bdx) = (
        zeros(t * rank),
        zeros(t * rank),
        zeros(rank * n_in),
        zeros(n_out * rank),
        zeros(t * n_in),
    );
    let (ti, to, tr) = (n_in as u32, n_out as u32, rank as u32);
    // The adapter's own layout (the matmul test covers both).
    let layout = MatmulLayout::for_context(g);
    let mm = |a, b, c, mnk, ldc, alpha, acc, tokens| {
        ops::matmul::matmul(g, layout, a, b, c, mnk, ldc, alpha, acc, tokens, &step).unwrap()
    };
    let mut ds = vec![
        // u [t, r] = x · Aᵀ
        mm(
            Operand::new(&bx, ti),
            Operand::t(&ba, ti),
            &bu,
            [t as u32, tr, ti],
            tr,
            1.0,
            false,
            TokenDim::Rows,
        ),
        // dB [out, r] = s · dYᵀ · u
        mm(
            Operand::t(&bdy, to),
            Operand::new(&bu, tr),
            &bdb,
            [to, tr, t as u32],
            tr,
            scale,
            false,
            TokenDim::Inner,
        ),
        // du [t, r] = s · dY · B
        mm(
            Operand::new(&bdy, to),
            Operand::new(&bb, tr),
            &bdu,
            [t as u32, tr, to],
            tr,
            scale,
            false,
            TokenDim::Rows,
        ),
        // dA [r, in] = duᵀ · x
        mm(
            Operand::t(&bdu, tr),
            Operand::new(&bx, ti),
            &bda,
            [tr, ti, t as u32],
            ti,
            1.0,
            false,
            TokenDim::Inner,
        ),
    ];
    // dx = Wᵀ · dY, then += du · A
    ds.extend(ops::matvec::matvec_backward(g, &weight, &bdy, &bdx, to, &step, false).unwrap());
    ds.push(mm(
        Operand::new(&bdu, tr),
        Operand::new(&ba, ti),
        &bdx,
        [t as u32, ti, tr],
        ti,
        1.0,
        true,
        TokenDim::Rows,
    ));
    gpu.run(&ds, t);

    let fd_a = {
        let at = sample(&mut r, a.len(), 60);
        let fd = finite_differences(|a| forward(&x64, a, &b64), &a64, &at);
        (at, fd)
    };
    let fd_b = {
        let at = sample(&mut r, b.len(), 60);
        let fd = finite_differences(|b| forward(&x64, &a64, b), &b64, &at);
        (at, fd)
    };
    let fd_x = {
        let at = sample(&mut r, x.len(), 60);
        let fd = finite_differences(|x| forward(x, &a64, &b64), &x64, &at);
        (at, fd)
    };
    check_gradient(
        &gpu.read(&bda, a.len()),
        &da_ref,
        &fd_a.1,
        &fd_a.0,
        1e-4,
        1.0,
        "LoRA dA",
    );
    check_gradient(
        &gpu.read(&bdb, b.len()),
        &db_ref,
        &fd_b.1,
        &fd_b.0,
        1e-4,
        1.0,
        "LoRA dB",
    );
    check_gradient(
        &gpu.read(&bdx, x.len()),
        &dx_ref,
        &fd_x.1,
        &fd_x.0,
        1e-4,
        1.0,
        "LoRA dx",
    );
}

// ---------------------------------------------------------------------------------------
// RMSNorm, plain and gated.

fn silu(v: f64) -> f64 {
    v / (1.0 + (-v).exp())
}

/// y = x / rms(x) · w (· silu(z)) per row of n; also the rows' 1 / rms.
fn rms_norm_f64(
    x: &[f64],
    w: &[f64],
    z: Option<&[f64]>,
    n: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0f64; x.len()];
    let mut rstd = Vec::new();
    for (row, xs) in x.chunks_exact(n).enumerate() {
        let s = 1.0 / (xs.iter().map(|v| v * v).sum::<f64>() / n as f64 + eps).sqrt();
        rstd.push(s);
        for i in 0..n {
            let g = z.map_or(1.0, |z| silu(z[row * n + i]));
            y[row * n + i] = xs[i] * s * w[i] * g;
        }
    }
    (y, rstd)
}

#[test]
fn rms_norm_backward_matches_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let eps = 1e-6f32;
    // (n, groups): a hidden-state norm wider than the workgroup, per-head norms.
    for (n, groups) in [(200usize, 1usize), (24, 3)] {
        for gated in [false, true] {
            let t = 5usize;
            let len = t * groups * n;
            let x = randn(&mut r, len, 1.0);
            let w = randn(&mut r, n, 1.5);
            let z = randn(&mut r, len, 2.0);
            let dy = randn(&mut r, len, 1.0);
            let (x64, w64, z64, dy64) = (f64s(&x), f64s(&w), f64s(&z), f64s(&dy));
            let zg = gated.then_some(&z64[..]);
            let (_, rstd) = rms_norm_f64(&x64, &w64, zg, n, eps as f64);
            let at = sample(&mut r, len, len);
            let fd_x = finite_differences(
                |x| dot(&rms_norm_f64(x, &w64, zg, n, eps as f64).0, &dy64),
                &x64,
                &at,
            );
            let fd_z = finite_differences(
                |z| dot(&rms_norm_f64(&x64, &w64, Some(z), n, eps as f64).0, &dy64),
                &z64,
                &at,
            );
            // Every element is differenced: the differences are the reference.
            let step = gpu.step_of(Step::new(t as u32, 0));
            let start = randn(&mut r, len, 1.0);
            let dx = gpu.upload(&start);
            let dz = gpu.upload(&vec![0.0; len]);
            let rstd32: Vec<f32> = rstd.iter().map(|&v| v as f32).collect();
            let (bz, bx, bw, bdy, brstd) = (
                gpu.upload(&z),
                gpu.upload(&x),
                gpu.upload(&w),
                gpu.upload(&dy),
                gpu.upload(&rstd32),
            );
            let d = ops::rms_norm::rms_norm_backward(
                &gpu.0,
                &bx,
                &bw,
                &brstd,
                &bdy,
                &dx,
                gated.then_some(GateGrad { z: &bz, dz: &dz }),
                n as u32,
                groups as u32,
                true,
                &step,
            )
            .unwrap();
            gpu.run(&[d], t);
            let got: Vec<f32> = gpu
                .read(&dx, len)
                .iter()
                .zip(&start)
                .map(|(g, s)| g - s)
                .collect();
            let what = format!("rms_norm n {n} groups {groups} gated {gated}");
            check_against_differences(&got, &fd_x, 1e-4, 0.1, &format!("{what}: dx"));
            if gated {
                check_against_differences(
                    &gpu.read(&dz, len),
                    &fd_z,
                    1e-4,
                    0.1,
                    &format!("{what}: dz"),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// SwiGLU.

#[test]
fn silu_mul_backward_matches_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let (t, row) = (6usize, 300usize);
    let len = t * row;
    let (a, b, d) = (
        randn(&mut r, len, 4.0),
        randn(&mut r, len, 2.0),
        randn(&mut r, len, 1.0),
    );
    let (a64, b64, d64) = (f64s(&a), f64s(&b), f64s(&d));
    let out = |a: &[f64], b: &[f64]| -> f64 {
        a.iter()
            .zip(b)
            .zip(&d64)
            .map(|((a, b), d)| silu(*a) * b * d)
            .sum()
    };
    let at: Vec<usize> = (0..len).collect();
    let fd_a = finite_differences(|a| out(a, &b64), &a64, &at);
    let fd_b = finite_differences(|b| out(&a64, b), &b64, &at);
    let step = gpu.step_of(Step::new(t as u32, 0));
    let (da, db) = (gpu.upload(&vec![0.0; len]), gpu.upload(&vec![0.0; len]));
    let k = ops::elementwise::silu_mul_backward(
        &gpu.0,
        &gpu.upload(&a),
        &gpu.upload(&b),
        &gpu.upload(&d),
        &da,
        &db,
        row as u32,
        &step,
    )
    .unwrap();
    gpu.run(&[k], t);
    check_against_differences(&gpu.read(&da, len), &fd_a, 1e-5, 0.01, "silu_mul da");
    check_against_differences(&gpu.read(&db, len), &fd_b, 1e-5, 0.01, "silu_mul db");
}

// ---------------------------------------------------------------------------------------
// RoPE.

fn rope_f64(
    x: &[f64],
    pos: &[u32],
    freqs: &[f32],
    heads: usize,
    hd: usize,
    n_rot: usize,
    neox: bool,
) -> Vec<f64> {
    let mut y = x.to_vec();
    let half = n_rot / 2;
    for (t, &p) in pos.iter().enumerate() {
        for h in 0..heads {
            let base = (t * heads + h) * hd;
            for (i, &f) in freqs.iter().enumerate().take(half) {
                let theta = p as f64 * f as f64;
                let (i0, i1) = if neox {
                    (base + i, base + i + half)
                } else {
                    (base + 2 * i, base + 2 * i + 1)
                };
                let (a, b) = (x[i0], x[i1]);
                y[i0] = a * theta.cos() - b * theta.sin();
                y[i1] = a * theta.sin() + b * theta.cos();
            }
        }
    }
    y
}

#[test]
fn rope_backward_matches_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let (t, heads, hd) = (7usize, 3usize, 20usize);
    // Partial rotation (Qwen3.5 rotates a quarter of each head) and full, both layouts.
    for (n_rot, mode) in [
        (8usize, RopeMode::Neox),
        (20, RopeMode::Neox),
        (12, RopeMode::Interleaved),
    ] {
        let pos0 = r.random_range(0..5000u32);
        let pos: Vec<u32> = (0..t as u32).map(|i| pos0 + i).collect();
        let freqs = ops::rope::frequencies(10000.0, n_rot as u32);
        let len = t * heads * hd;
        let x = randn(&mut r, len, 1.0);
        let dy = randn(&mut r, len, 1.0);
        let dy64 = f64s(&dy);
        let neox = mode == RopeMode::Neox;
        let at: Vec<usize> = (0..len).collect();
        let fd = finite_differences(
            |x| dot(&rope_f64(x, &pos, &freqs, heads, hd, n_rot, neox), &dy64),
            &f64s(&x),
            &at,
        );
        let buf = gpu.upload(&dy);
        let step = gpu.step_of(Step::new(t as u32, pos0));
        let d = ops::rope::rope_backward(
            &gpu.0,
            &buf,
            &gpu.upload(&freqs),
            heads as u32,
            hd as u32,
            n_rot as u32,
            mode,
            &step,
        )
        .unwrap();
        gpu.run(&[d], t);
        // sin/cos of angles up to ~5000 rad in f32: the GPU's angle rounds as the forward's.
        check_against_differences(
            &gpu.read(&buf, len),
            &fd,
            2e-3,
            0.1,
            &format!("rope {mode:?} n_rot {n_rot}"),
        );
    }
}

// ---------------------------------------------------------------------------------------
// The log-probability of chosen tokens.

fn log_prob_loss(x: &[f64], targets: &[u32], coef: &[f64], n: usize) -> f64 {
    x.chunks_exact(n)
        .zip(targets)
        .zip(coef)
        .map(|((row, &tg), c)| {
            let mx = row.iter().cloned().fold(f64::MIN, f64::max);
            let lse = mx + row.iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
            c * (row[tg as usize] - lse)
        })
        .sum()
}

#[test]
fn log_prob_backward_matches_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    // A vocabulary that is not a multiple of the workgroup; rows past the step stay untouched.
    let (t, max_rows, n) = (5usize, 7usize, 517usize);
    let x = randn(&mut r, max_rows * n, 6.0);
    let targets: Vec<u32> = (0..max_rows).map(|_| r.random_range(0..n as u32)).collect();
    let coef = randn(&mut r, max_rows, 2.0);
    let (x64, c64) = (f64s(&x), f64s(&coef));
    let live = t * n;
    let at: Vec<usize> = (0..live).collect();
    let fd = finite_differences(
        |x| log_prob_loss(x, &targets[..t], &c64[..t], n),
        &x64[..live],
        &at,
    );
    let start = randn(&mut r, max_rows * n, 1.0);
    let dx = gpu.upload(&start);
    let d = ops::softmax::log_prob_backward(
        &gpu.0,
        &gpu.upload(&x),
        &gpu.upload_u32(&targets),
        &gpu.upload(&coef),
        &dx,
        n as u32,
        max_rows as u32,
    )
    .unwrap();
    gpu.run(&[d], t);
    let got = gpu.read(&dx, max_rows * n);
    check_against_differences(&got[..live], &fd, 1e-4, 1e-3, "log-prob dlogits");
    assert_eq!(
        &got[live..],
        &start[live..],
        "rows past the step's tokens are left alone"
    );
}

// ---------------------------------------------------------------------------------------
// Causal grouped-query attention.

/// The attention of one sequence's tokens at positions pos0.. over its cache rows
/// (row = position), f64: out [T, heads, hd] and the log-sum-exp [T, heads].
fn attention_f64(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (heads, kv_heads, hd): (usize, usize, usize),
    pos0: usize,
    scale: f64,
) -> (Vec<f64>, Vec<f64>) {
    let t_n = q.len() / (heads * hd);
    let mut out = vec![0f64; q.len()];
    let mut lse = vec![0f64; t_n * heads];
    for t in 0..t_n {
        for h in 0..heads {
            let g = h / (heads / kv_heads);
            let qt = &q[(t * heads + h) * hd..][..hd];
            let scores: Vec<f64> = (0..=pos0 + t)
                .map(|j| scale * dot(qt, &k[(j * kv_heads + g) * hd..][..hd]))
                .collect();
            let m = scores.iter().cloned().fold(f64::MIN, f64::max);
            let sum: f64 = scores.iter().map(|s| (s - m).exp()).sum();
            lse[t * heads + h] = m + sum.ln();
            for (j, s) in scores.iter().enumerate() {
                let pr = (s - m).exp() / sum;
                for d in 0..hd {
                    out[(t * heads + h) * hd + d] += pr * v[(j * kv_heads + g) * hd + d];
                }
            }
        }
    }
    (out, lse)
}

/// What attention's backward reads (host copies, f32 as the GPU holds them) and where its
/// dK/dV start: caches of `ctx_rows` rows per sequence of `kv` elements (for f16, k and v
/// hold f16 values already), `step` saying where the queries sit.
struct AttentionBackwardCase<'a> {
    shape: (usize, usize, usize),
    kv: DType,
    scale: f64,
    ctx_rows: usize,
    step: Step,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    o: &'a [f32],
    lse: &'a [f32],
    d_o: &'a [f32],
    dk_start: &'a [f32],
    dv_start: &'a [f32],
}

impl AttentionBackwardCase<'_> {
    /// dq, dK and dV from attention's backward in `layout`, and its dispatch count.
    fn run(&self, gpu: &Gpu, layout: AttentionLayout) -> (Vec<f32>, Vec<f32>, Vec<f32>, usize) {
        let (heads, kv_heads, hd) = self.shape;
        let t_n = self.step.n_tokens as usize;
        let (dq, dk, dv, delta) = (
            gpu.zeros(self.q.len()),
            gpu.upload(self.dk_start),
            gpu.upload(self.dv_start),
            gpu.zeros(t_n * heads),
        );
        let upload_kv = |x: &[f32]| match self.kv {
            DType::F32 => gpu.upload(x),
            DType::F16 => {
                let h: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
                gpu.0
                    .storage_buffer_init("kv", bytemuck::cast_slice(&h))
                    .unwrap()
            }
        };
        let (bq, bk, bv, bo, blse, bdo) = (
            gpu.upload(self.q),
            upload_kv(self.k),
            upload_kv(self.v),
            gpu.upload(self.o),
            gpu.upload(self.lse),
            gpu.upload(self.d_o),
        );
        let grads = ops::attention::AttentionGrads {
            q: &bq,
            k: &bk,
            v: &bv,
            kv: self.kv,
            o: Some(&bo),
            lse: &blse,
            d_o: &bdo,
            delta: &delta,
            dq: &dq,
            dk: &dk,
            dv: &dv,
        };
        let step = gpu.step_of(self.step);
        let ds = ops::attention::attention_backward(
            &gpu.0,
            layout,
            &grads,
            heads as u32,
            kv_heads as u32,
            hd as u32,
            self.scale as f32,
            self.ctx_rows as u32,
            t_n as u32,
            &step,
        )
        .unwrap();
        gpu.run(&ds, t_n);
        (
            gpu.read(&dq, self.q.len()),
            gpu.read(&dk, self.dk_start.len()),
            gpu.read(&dv, self.dv_start.len()),
            ds.len(),
        )
    }
}

#[test]
fn attention_backward_matches_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    // Two query heads per KV head, a head dim that is no power of two; the step's 10 tokens
    // (positions 5..15, more than one workgroup of the per-thread layout) see 5 rows that an earlier step wrote. The sequence is in slot 1 of a
    // two-slot cache, so its rows start at ctx.
    let (heads, kv_heads, hd, t_n, pos0, ctx) = (4usize, 2usize, 12usize, 10usize, 5usize, 16usize);
    let shape = (heads, kv_heads, hd);
    let scale = 1.0 / (hd as f64).sqrt();
    let rows = pos0 + t_n;
    for dtype in [DType::F32, DType::F16] {
        let q = randn(&mut r, t_n * heads * hd, 1.5);
        // An f16 cache holds f16 values: the reference computes with those.
        let k = as_kv(randn(&mut r, rows * kv_heads * hd, 1.5), dtype);
        let v = as_kv(randn(&mut r, rows * kv_heads * hd, 1.0), dtype);
        let d_o = randn(&mut r, t_n * heads * hd, 1.0);
        let (q64, k64, v64, do64) = (f64s(&q), f64s(&k), f64s(&v), f64s(&d_o));
        let (out, lse) = attention_f64(&q64, &k64, &v64, shape, pos0, scale);
        let loss = |q: &[f64], k: &[f64], v: &[f64]| {
            dot(&attention_f64(q, k, v, shape, pos0, scale).0, &do64)
        };
        let all = |n: usize| (0..n).collect::<Vec<_>>();
        let fd_q = finite_differences(|q| loss(q, &k64, &v64), &q64, &all(q.len()));
        let fd_k = finite_differences(|k| loss(&q64, k, &v64), &k64, &all(k.len()));
        let fd_v = finite_differences(|v| loss(&q64, &k64, v), &v64, &all(v.len()));

        // The caches hold slot 0 (random, never read) then this sequence's rows.
        let row = kv_heads * hd;
        let cache = |seq: &[f32], r: &mut StdRng| {
            let mut c = randn(r, 2 * ctx * row, 1.0);
            c[ctx * row..ctx * row + seq.len()].copy_from_slice(seq);
            c
        };
        let (kc, vc) = (cache(&k, &mut r), cache(&v, &mut r));
        let (dk_start, dv_start) = (
            randn(&mut r, 2 * ctx * row, 1.0),
            randn(&mut r, 2 * ctx * row, 1.0),
        );
        let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
        let (out32, lse32) = (to32(&out), to32(&lse));
        let case = AttentionBackwardCase {
            shape,
            kv: dtype,
            scale,
            ctx_rows: ctx,
            step: Step::for_sequence(t_n as u32, pos0 as u32, 1, ctx as u32),
            q: &q,
            k: &kc,
            v: &vc,
            o: &out32,
            lse: &lse32,
            d_o: &d_o,
            dk_start: &dk_start,
            dv_start: &dv_start,
        };
        for layout in LAYOUTS {
            let (dq, dk, dv, _) = case.run(&gpu, layout);
            check_against_differences(
                &dq,
                &fd_q,
                1e-4,
                0.05,
                &format!("attention dq ({layout:?}, {dtype} cache)"),
            );
            // dK and dV: this sequence's rows gain the gradient, every other row keeps its start.
            for (name, got, start, fd) in
                [("dk", &dk, &dk_start, &fd_k), ("dv", &dv, &dv_start, &fd_v)]
            {
                let mine: Vec<f32> = (0..rows * row)
                    .map(|i| got[ctx * row + i] - start[ctx * row + i])
                    .collect();
                check_against_differences(
                    &mine,
                    fd,
                    1e-4,
                    0.05,
                    &format!("attention {name} ({layout:?}, {dtype} cache)"),
                );
                let untouched =
                    (0..2 * ctx * row).filter(|&i| i < ctx * row || i >= ctx * row + rows * row);
                for i in untouched {
                    assert_eq!(
                        got[i],
                        start[i],
                        "attention {name} ({layout:?}): row {} was not seen",
                        i / row
                    );
                }
            }
        }
    }
}

/// Qwen3.5's gated attention end to end: attn_q's output qg holds each head's query and
/// gate; att = attention(query) · σ(gate). The backward chain a trainer runs (the gate's
/// backward, which also gives delta, attention's with delta given, the query's scatter
/// back into dqg) against finite differences of the f64 forward through qg, K and V.
#[test]
fn gated_attention_backward_matches_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let (heads, kv_heads, hd, t_n, pos0) = (4usize, 1usize, 8usize, 5usize, 3usize);
    let shape = (heads, kv_heads, hd);
    let scale = 1.0 / (hd as f64).sqrt();
    let rows = pos0 + t_n;
    let qg = randn(&mut r, t_n * heads * 2 * hd, 2.0);
    let k = randn(&mut r, rows * kv_heads * hd, 1.5);
    let v = randn(&mut r, rows * kv_heads * hd, 1.0);
    let d_att = randn(&mut r, t_n * heads * hd, 1.0);
    let (qg64, k64, v64, d64) = (f64s(&qg), f64s(&k), f64s(&v), f64s(&d_att));
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let split = |qg: &[f64]| -> (Vec<f64>, Vec<f64>) {
        let (mut q, mut g) = (Vec::new(), Vec::new());
        for head in qg.chunks_exact(2 * hd) {
            q.extend_from_slice(&head[..hd]);
            g.extend_from_slice(&head[hd..]);
        }
        (q, g)
    };
    let gated = |qg: &[f64], k: &[f64], v: &[f64]| -> Vec<f64> {
        let (q, g) = split(qg);
        let (o, _) = attention_f64(&q, k, v, shape, pos0, scale);
        o.iter().zip(&g).map(|(o, g)| o * sig(*g)).collect()
    };
    let loss = |qg: &[f64], k: &[f64], v: &[f64]| dot(&gated(qg, k, v), &d64);
    let all = |n: usize| (0..n).collect::<Vec<_>>();
    let fd_qg = finite_differences(|x| loss(x, &k64, &v64), &qg64, &all(qg.len()));
    let fd_k = finite_differences(|x| loss(&qg64, x, &v64), &k64, &all(k.len()));
    let fd_v = finite_differences(|x| loss(&qg64, &k64, x), &v64, &all(v.len()));

    // What the forward keeps: the query, the gated output and the log-sum-exp.
    let (q, _) = split(&qg64);
    let (_, lse) = attention_f64(&q, &k64, &v64, shape, pos0, scale);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    let att = gated(&qg64, &k64, &v64);
    let (bqg, bq, batt, blse, bk, bv) = (
        gpu.upload(&qg),
        gpu.upload(&to32(&q)),
        gpu.upload(&to32(&att)),
        gpu.upload(&to32(&lse)),
        gpu.upload(&k),
        gpu.upload(&v),
    );
    for layout in LAYOUTS {
        let (bd, dqg, delta, dq, dk, dv) = (
            gpu.upload(&d_att),
            gpu.zeros(qg.len()),
            gpu.zeros(t_n * heads),
            gpu.zeros(t_n * heads * hd),
            gpu.zeros(k.len()),
            gpu.zeros(v.len()),
        );
        let step = gpu.step_of(Step::new(t_n as u32, pos0 as u32));
        let heads_of = ops::attn_gate::GatedHeads {
            n_head: heads as u32,
            head_dim: hd as u32,
            max_tokens: t_n as u32,
        };
        let mut ds = vec![
            heads_of
                .sigmoid_gate_backward(&gpu.0, &bqg, &batt, &bd, &dqg, &delta, &step)
                .unwrap(),
        ];
        let grads = ops::attention::AttentionGrads {
            q: &bq,
            k: &bk,
            v: &bv,
            kv: DType::F32,
            o: None,
            lse: &blse,
            d_o: &bd,
            delta: &delta,
            dq: &dq,
            dk: &dk,
            dv: &dv,
        };
        ds.extend(
            ops::attention::attention_backward(
                &gpu.0,
                layout,
                &grads,
                heads as u32,
                kv_heads as u32,
                hd as u32,
                scale as f32,
                rows as u32,
                t_n as u32,
                &step,
            )
            .unwrap(),
        );
        ds.push(
            heads_of
                .split_query_backward(&gpu.0, &dq, &dqg, &step)
                .unwrap(),
        );
        gpu.run(&ds, t_n);
        check_against_differences(
            &gpu.read(&dqg, qg.len()),
            &fd_qg,
            1e-4,
            0.05,
            &format!("gated attention dqg ({layout:?})"),
        );
        check_against_differences(
            &gpu.read(&dk, k.len()),
            &fd_k,
            1e-4,
            0.05,
            &format!("gated attention dk ({layout:?})"),
        );
        check_against_differences(
            &gpu.read(&dv, v.len()),
            &fd_v,
            1e-4,
            0.05,
            &format!("gated attention dv ({layout:?})"),
        );
    }
}

// ---------------------------------------------------------------------------------------
// The DeltaNet's causal depthwise conv with its rolling state.

/// silu(conv) over a whole sequence from an initial state [K − 1, C]: y [T, C] and the state
/// after the last token.
fn conv1d_f64(x: &[f64], w: &[f64], state: &[f64], c_n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let e: Vec<f64> = state.iter().chain(x).cloned().collect();
    let t_n = x.len() / c_n;
    let mut y = vec![0f64; x.len()];
    for t in 0..t_n {
        for c in 0..c_n {
            let a: f64 = (0..k).map(|j| w[c * k + j] * e[(t + j) * c_n + c]).sum();
            y[t * c_n + c] = silu(a);
        }
    }
    (y, e[t_n * c_n..].to_vec())
}

/// A sequence in two steps, the first shorter than the kernel (so its outgoing state still
/// holds rows of its incoming one): the second step's backward runs first and hands its
/// state gradient to the first's, as a trainer runs them. The final state's gradient is
/// random too (a loss may read it). Against finite differences through the inputs and the
/// initial state.
#[test]
fn conv1d_backward_matches_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let (c_n, k, t1, t2) = (300usize, 4usize, 2usize, 5usize);
    let sl = (k - 1) * c_n;
    let x = randn(&mut r, (t1 + t2) * c_n, 2.0);
    let w = randn(&mut r, c_n * k, 1.0);
    let s0 = randn(&mut r, sl, 2.0);
    let dy = randn(&mut r, (t1 + t2) * c_n, 1.0);
    let d_final = randn(&mut r, sl, 1.0);
    let (x64, w64, s064, dy64, df64) = (f64s(&x), f64s(&w), f64s(&s0), f64s(&dy), f64s(&d_final));
    let loss = |x: &[f64], s: &[f64]| {
        let (y, end) = conv1d_f64(x, &w64, s, c_n, k);
        dot(&y, &dy64) + dot(&end, &df64)
    };
    let at_x = sample(&mut r, x.len(), 300);
    let at_s = sample(&mut r, sl, 200);
    let fd_x = finite_differences(|x| loss(x, &s064), &x64, &at_x);
    let fd_s = finite_differences(|s| loss(&x64, s), &s064, &at_s);
    // Analytic: the same chain rule the kernel applies, in f64, over the whole sequence.
    let e: Vec<f64> = s064.iter().chain(&x64).cloned().collect();
    let n = t1 + t2;
    let mut de = vec![0f64; e.len()];
    for t in 0..n {
        for c in 0..c_n {
            let a: f64 = (0..k).map(|j| w64[c * k + j] * e[(t + j) * c_n + c]).sum();
            let s = 1.0 / (1.0 + (-a).exp());
            let da = dy64[t * c_n + c] * s * (1.0 + a * (1.0 - s));
            for j in 0..k {
                de[(t + j) * c_n + c] += w64[c * k + j] * da;
            }
        }
    }
    for (i, d) in df64.iter().enumerate() {
        de[n * c_n + i] += d;
    }

    // The state between the steps, as the forward leaves it.
    let (_, s1) = conv1d_f64(&x64[..t1 * c_n], &w64, &s064, c_n, k);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    let bw = gpu.upload(&w);
    let (dx1, dx2, ds1, ds0) = (
        gpu.zeros(t1 * c_n),
        gpu.zeros(t2 * c_n),
        gpu.zeros(sl),
        gpu.zeros(sl),
    );
    let part = |from: usize, to: usize, v: &[f32]| gpu.upload(&v[from * c_n..to * c_n]);
    let step2 = gpu.step_of(Step::new(t2 as u32, t1 as u32));
    let step1 = gpu.step_of(Step::new(t1 as u32, 0));
    let (x2, dy2, bs1, bdf) = (
        part(t1, n, &x),
        part(t1, n, &dy),
        gpu.upload(&[randn(&mut r, 2 * c_n, 9.0), to32(&s1)].concat()),
        gpu.upload(&d_final),
    );
    // Step 2 reads its incoming state from rows 2.. of a longer buffer, as from the step
    // before's own inputs.
    let back2 = ops::conv1d::conv1d_backward(
        &gpu.0, &x2, &bw, &bs1, 2, &dy2, &bdf, &dx2, &ds1, c_n as u32, k as u32, &step2,
    )
    .unwrap();
    gpu.run(&[back2], t2);
    let (x1, dy1, bs0) = (part(0, t1, &x), part(0, t1, &dy), gpu.upload(&s0));
    let back1 = ops::conv1d::conv1d_backward(
        &gpu.0, &x1, &bw, &bs0, 0, &dy1, &ds1, &dx1, &ds0, c_n as u32, k as u32, &step1,
    )
    .unwrap();
    gpu.run(&[back1], t1);
    let mut dx = gpu.read(&dx1, t1 * c_n);
    dx.extend(gpu.read(&dx2, t2 * c_n));
    check_gradient(&dx, &de[sl..], &fd_x, &at_x, 1e-4, 0.05, "conv1d dx");
    check_gradient(
        &gpu.read(&ds0, sl),
        &de[..sl],
        &fd_s,
        &at_s,
        1e-4,
        0.05,
        "conv1d d_state",
    );
}

// ---------------------------------------------------------------------------------------
// The gated delta rule.

struct DeltaProblem {
    shape: ops::delta_net::DeltaNetShape,
    t: usize,
    a: Vec<f64>,
    dt_bias: Vec<f64>,
    d_out: Vec<f64>,
    d_state_out: Vec<f64>,
}

impl DeltaProblem {
    /// out [T, n_v, d_v] and the final state, token by token in f64, as delta_net.wgsl's
    /// header defines them; value head s reads key head s mod n_k.
    fn forward(
        &self,
        qkv: &[f64],
        alpha: &[f64],
        beta: &[f64],
        state: &[f64],
    ) -> (Vec<f64>, Vec<f64>) {
        let s = self.shape;
        let (n_k, n_v, dk, dv) = (
            s.n_k as usize,
            s.n_v as usize,
            s.d_k as usize,
            s.d_v as usize,
        );
        let row = 2 * n_k * dk + n_v * dv;
        let mut st = state.to_vec();
        let mut out = vec![0f64; self.t * n_v * dv];
        for t in 0..self.t {
            for h in 0..n_v {
                let kh = h % n_k;
                let q = &qkv[t * row + kh * dk..][..dk];
                let k = &qkv[t * row + (n_k + kh) * dk..][..dk];
                let v = &qkv[t * row + 2 * n_k * dk + h * dv..][..dv];
                let rq = 1.0 / (dot(q, q) + s.eps as f64).sqrt() / (dk as f64).sqrt();
                let rk = 1.0 / (dot(k, k) + s.eps as f64).sqrt();
                let x = alpha[t * n_v + h] + self.dt_bias[h];
                let softplus = if x > 20.0 { x } else { (1.0 + x.exp()).ln() };
                let g = (softplus * self.a[h]).exp();
                let b = 1.0 / (1.0 + (-beta[t * n_v + h]).exp());
                let sh = &mut st[h * dk * dv..][..dk * dv];
                for c in 0..dv {
                    let u: f64 = (0..dk).map(|r| g * sh[r * dv + c] * k[r] * rk).sum();
                    let delta = b * (v[c] - u);
                    for r in 0..dk {
                        sh[r * dv + c] = g * sh[r * dv + c] + k[r] * rk * delta;
                    }
                    out[(t * n_v + h) * dv + c] = (0..dk).map(|r| sh[r * dv + c] * q[r] * rq).sum();
                }
            }
        }
        (out, st)
    }

    fn loss(&self, qkv: &[f64], alpha: &[f64], beta: &[f64], state: &[f64]) -> f64 {
        let (out, end) = self.forward(qkv, alpha, beta, state);
        dot(&out, &self.d_out) + dot(&end, &self.d_state_out)
    }
}

/// A 37-token step (a whole chunk of 32 and part of another) from a nonzero state, two value
/// heads per key head, and a gradient on the final state as well: every input's gradient
/// against finite differences of the f64 recurrence.
#[test]
fn delta_net_backward_matches_finite_differences() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let shape = |n_k, n_v, d_k, d_v| ops::delta_net::DeltaNetShape {
        n_k,
        n_v,
        d_k,
        d_v,
        eps: 1e-6,
    };
    // Both layouts where the per-lane one runs (CPU adapters with subgroups: lavapipe; value
    // heads of whole vec4s): a subgroup per block of 32 columns, the last block partly used.
    let cases = [
        (shape(2, 4, 12, 10), 37, None),
        (shape(2, 4, 12, 40), 37, None),
        // FrogNano's head sizes (128 × 128: a thread's whole column in registers), sampled.
        (shape(1, 2, 128, 128), 5, Some(150)),
    ];
    for (s, t, sampled) in cases {
        for layout in common::delta_layouts(&gpu, &s) {
            check_delta_net_backward(&gpu, &mut r, layout, s, t, sampled);
        }
    }
    // A CPU adapter would cut the loops of long steps short: they are refused, not garbage.
    if gpu.0.loops_limited() {
        let s = shape(1, 2, 128, 128);
        let b = gpu.zeros(1 << 16);
        let inputs = ops::delta_net::DeltaNetInputs {
            qkv: &b,
            alpha: &b,
            beta: &b,
            a: &b,
            dt_bias: &b,
        };
        let big = gpu.zeros(s.backward_scratch_len(512) as usize);
        let grads = ops::delta_net::DeltaNetGrads {
            state_in: &b,
            d_out: &b,
            d_state: &b,
            dqkv: &b,
            d_alpha: &b,
            d_beta: &b,
            scratch: &big,
        };
        let step = gpu.step_of(Step::new(1, 0));
        let err = ops::delta_net::delta_net_backward(&gpu.0, &inputs, &grads, s, 512, &step)
            .err()
            .expect("512-token steps refused on a CPU adapter");
        assert!(err.to_string().contains("65535"), "{err}");
        // The per-lane layout takes value heads of whole vec4s only.
        let odd = shape(1, 2, 128, 126);
        let err = ops::delta_net::delta_net_backward_with(
            &gpu.0,
            ops::delta_net::DeltaNetLayout::PerLane,
            &inputs,
            &grads,
            odd,
            1,
            &step,
        );
        assert!(
            matches!(err, Err(EngineError::Shape { .. })),
            "per-lane, d_v 126"
        );
    }
}

/// `sampled`: difference that many inputs of each kind instead of all of them.
fn check_delta_net_backward(
    gpu: &common::Gpu,
    r: &mut StdRng,
    layout: ops::delta_net::DeltaNetLayout,
    shape: ops::delta_net::DeltaNetShape,
    t: usize,
    sampled: Option<usize>,
) {
    let (n_v, row) = (shape.n_v as usize, shape.qkv_len() as usize);
    let sl = shape.state_len() as usize;
    let qkv = randn(r, t * row, 1.0);
    let alpha = randn(r, t * n_v, 2.0);
    let beta = randn(r, t * n_v, 3.0);
    let a: Vec<f32> = (0..n_v)
        .map(|_| -(r.random_range(-1.0f32..1.0)).exp())
        .collect();
    let dt_bias = randn(r, n_v, 1.0);
    let state = randn(r, sl, 1.0);
    let d_out = randn(r, t * n_v * shape.d_v as usize, 1.0);
    let d_state_out = randn(r, sl, 1.0);
    let pb = DeltaProblem {
        shape,
        t,
        a: f64s(&a),
        dt_bias: f64s(&dt_bias),
        d_out: f64s(&d_out),
        d_state_out: f64s(&d_state_out),
    };
    let (q64, al64, be64, st64) = (f64s(&qkv), f64s(&alpha), f64s(&beta), f64s(&state));
    let mut pick = |n: usize| sample(r, n, sampled.unwrap_or(n));
    let (at_qkv, at_alpha, at_beta, at_state) = (
        pick(qkv.len()),
        pick(alpha.len()),
        pick(beta.len()),
        pick(sl),
    );
    let fd_qkv = finite_differences(|x| pb.loss(x, &al64, &be64, &st64), &q64, &at_qkv);
    let fd_alpha = finite_differences(|x| pb.loss(&q64, x, &be64, &st64), &al64, &at_alpha);
    let fd_beta = finite_differences(|x| pb.loss(&q64, &al64, x, &st64), &be64, &at_beta);
    let fd_state = finite_differences(|x| pb.loss(&q64, &al64, &be64, x), &st64, &at_state);

    let (bqkv, balpha, bbeta, ba, bdt) = (
        gpu.upload(&qkv),
        gpu.upload(&alpha),
        gpu.upload(&beta),
        gpu.upload(&a),
        gpu.upload(&dt_bias),
    );
    let inputs = ops::delta_net::DeltaNetInputs {
        qkv: &bqkv,
        alpha: &balpha,
        beta: &bbeta,
        a: &ba,
        dt_bias: &bdt,
    };
    // d_state: the final state's gradient going in, the start state's coming out.
    let (bstate, bdo, dst) = (
        gpu.upload(&state),
        gpu.upload(&d_out),
        gpu.upload(&d_state_out),
    );
    let (dqkv, dal, dbe) = (gpu.zeros(qkv.len()), gpu.zeros(t * n_v), gpu.zeros(t * n_v));
    let scratch = gpu.zeros(shape.backward_scratch_len(t as u32) as usize);
    let grads = ops::delta_net::DeltaNetGrads {
        state_in: &bstate,
        d_out: &bdo,
        d_state: &dst,
        dqkv: &dqkv,
        d_alpha: &dal,
        d_beta: &dbe,
        scratch: &scratch,
    };
    let step = gpu.step_of(Step::new(t as u32, 0));
    let ds = ops::delta_net::delta_net_backward_with(
        &gpu.0, layout, &inputs, &grads, shape, t as u32, &step,
    )
    .unwrap();
    gpu.run(&ds, t);
    // Every differenced input, none skipped.
    let tol = 1e-4;
    for (what, buf, fd, at) in [
        ("dqkv", &dqkv, &fd_qkv, &at_qkv),
        ("dalpha", &dal, &fd_alpha, &at_alpha),
        ("dbeta", &dbe, &fd_beta, &at_beta),
        ("dstate", &dst, &fd_state, &at_state),
    ] {
        let got = gpu.read(buf, (buf.size() / 4) as usize);
        let picked: Vec<f64> = at.iter().map(|&i| got[i] as f64).collect();
        let worst = assert_close(
            &picked,
            fd,
            tol,
            0.05,
            &format!("delta rule {what} ({shape:?}, {layout:?})"),
        );
        eprintln!(
            "delta rule {what} ({} of {}): worst relative error {worst:.1e}",
            at.len(),
            got.len()
        );
    }
}

// ---------------------------------------------------------------------------------------
// The optimizer.

/// Five AdamW steps (fresh gradients each, a clipping factor, a stored scale, weight decay)
/// against the f64 update rule, and the gradient's sum of squares.
#[test]
fn adamw_matches_reference() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let n = 1000usize;
    let param0 = randn(&mut r, n, 1.0);
    let (bp, bm, bv) = (gpu.upload(&param0), gpu.zeros(n), gpu.zeros(n));
    let (mut p64, mut m64, mut v64) = (f64s(&param0), vec![0f64; n], vec![0f64; n]);
    let (param_scale, wd) = (2.5f32, 0.01f32);
    for t in 1..=5u32 {
        let grad = randn(&mut r, n, 3.0);
        let s = ops::adamw::AdamWStep {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: wd,
            t,
            grad_scale: 0.7,
        };
        let bg = gpu.upload(&grad);
        let d = ops::adamw::adamw(&gpu.0, &bp, &bg, &bm, &bv, n as u32, &s, param_scale).unwrap();
        gpu.run(&[d], 1);
        let (b1, b2) = (s.beta1 as f64, s.beta2 as f64);
        for i in 0..n {
            let g = grad[i] as f64 * s.grad_scale as f64;
            m64[i] = b1 * m64[i] + (1.0 - b1) * g;
            v64[i] = b2 * v64[i] + (1.0 - b2) * g * g;
            let mh = m64[i] / (1.0 - b1.powi(t as i32));
            let vh = v64[i] / (1.0 - b2.powi(t as i32));
            let step = param_scale as f64 * mh / (vh.sqrt() + s.eps as f64);
            p64[i] -= s.lr as f64 * (step + wd as f64 * p64[i]);
        }
        let got = f64s(&gpu.read(&bp, n));
        assert_close(&got, &p64, 1e-5, 1.0, &format!("adamw step {t} param"));
        assert_close(
            &f64s(&gpu.read(&bm, n)),
            &m64,
            1e-5,
            0.1,
            &format!("adamw step {t} m"),
        );
        assert_close(
            &f64s(&gpu.read(&bv, n)),
            &v64,
            1e-5,
            0.1,
            &format!("adamw step {t} v"),
        );
        // The gradient's sum of squares, into slot 1 of 3.
        let out = gpu.upload(&[5.0, 5.0, 5.0]);
        let d = ops::adamw::sum_squares(&gpu.0, &bg, n as u32, &out, 1).unwrap();
        gpu.run(&[d], 1);
        let got = gpu.read(&out, 3);
        let want: f64 = grad.iter().map(|&g| g as f64 * g as f64).sum();
        assert_close(&f64s(&got), &[5.0, want, 5.0], 1e-5, 1.0, "sum of squares");
    }
}

/// dq, dK and dV of [`attention_f64`] by the chain rule, in f64.
fn attention_grads_f64(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_o: &[f64],
    (heads, kv_heads, hd): (usize, usize, usize),
    pos0: usize,
    scale: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (out, lse) = attention_f64(q, k, v, (heads, kv_heads, hd), pos0, scale);
    let t_n = q.len() / (heads * hd);
    let (mut dq, mut dk, mut dv) = (
        vec![0f64; q.len()],
        vec![0f64; k.len()],
        vec![0f64; v.len()],
    );
    for t in 0..t_n {
        for h in 0..heads {
            let g = h / (heads / kv_heads);
            let at = (t * heads + h) * hd;
            let delta = dot(&d_o[at..at + hd], &out[at..at + hd]);
            for j in 0..=pos0 + t {
                let kb = (j * kv_heads + g) * hd;
                let p = (scale * dot(&q[at..at + hd], &k[kb..kb + hd]) - lse[t * heads + h]).exp();
                let ds = p * (dot(&d_o[at..at + hd], &v[kb..kb + hd]) - delta);
                for d in 0..hd {
                    dq[at + d] += scale * ds * k[kb + d];
                    dk[kb + d] += scale * ds * q[at + d];
                    dv[kb + d] += p * d_o[at + d];
                }
            }
        }
    }
    (dq, dk, dv)
}

/// Past what one dispatch covers: 130 query tokens at positions 400.. of 64-wide heads, four
/// per KV head, so both dq's positions and dK/dV's query tokens come in several blocks (CPU
/// adapters cut a loop short after 65535 iterations per invocation, silently). Against the f64
/// chain rule, itself checked against differences at a sample.
#[test]
fn attention_backward_covers_long_contexts() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let (heads, kv_heads, hd, t_n, pos0) = (8usize, 2usize, 64usize, 220usize, 700usize);
    let shape = (heads, kv_heads, hd);
    let scale = 1.0 / (hd as f64).sqrt();
    let rows = pos0 + t_n;
    let q = randn(&mut r, t_n * heads * hd, 1.0);
    let k = randn(&mut r, rows * kv_heads * hd, 1.0);
    let v = randn(&mut r, rows * kv_heads * hd, 1.0);
    let d_o = randn(&mut r, t_n * heads * hd, 1.0);
    let (q64, k64, v64, do64) = (f64s(&q), f64s(&k), f64s(&v), f64s(&d_o));
    let (dq_ref, dk_ref, dv_ref) = attention_grads_f64(&q64, &k64, &v64, &do64, shape, pos0, scale);
    let loss = |q: &[f64], k: &[f64]| dot(&attention_f64(q, k, &v64, shape, pos0, scale).0, &do64);
    let at_q = sample(&mut r, q.len(), 4);
    let at_k = sample(&mut r, k.len(), 4);
    let fd_q = finite_differences(|x| loss(x, &k64), &q64, &at_q);
    let fd_k = finite_differences(|x| loss(&q64, x), &k64, &at_k);
    let pick = |v: &[f64], at: &[usize]| at.iter().map(|&i| v[i]).collect::<Vec<_>>();
    assert_close(
        &pick(&dq_ref, &at_q),
        &fd_q,
        1e-5,
        0.05,
        "reference dq vs differences",
    );
    assert_close(
        &pick(&dk_ref, &at_k),
        &fd_k,
        1e-5,
        0.05,
        "reference dk vs differences",
    );

    let (out, lse) = attention_f64(&q64, &k64, &v64, shape, pos0, scale);
    let to32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
    let (out32, lse32) = (to32(&out), to32(&lse));
    let zeros = vec![0f32; k.len()];
    let case = AttentionBackwardCase {
        shape,
        kv: DType::F32,
        scale,
        ctx_rows: rows,
        step: Step::new(t_n as u32, pos0 as u32),
        q: &q,
        k: &k,
        v: &v,
        o: &out32,
        lse: &lse32,
        d_o: &d_o,
        dk_start: &zeros,
        dv_start: &zeros,
    };
    for layout in LAYOUTS {
        let (dq, dk, dv, dispatches) = case.run(&gpu, layout);
        assert!(
            dispatches >= 4,
            "positions and tokens each in more than one block ({layout:?}): {dispatches}"
        );
        for (what, got, want) in [
            ("dq", &dq, &dq_ref),
            ("dk", &dk, &dk_ref),
            ("dv", &dv, &dv_ref),
        ] {
            let worst = assert_close(
                &f64s(got),
                want,
                1e-4,
                0.05,
                &format!("long attention {what} ({layout:?})"),
            );
            eprintln!("long attention {what} ({layout:?}): worst relative error {worst:.1e}");
        }
    }
}
