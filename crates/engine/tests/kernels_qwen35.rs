//! The kernels of Qwen3.5's hybrid layers against f64 CPU references on fresh random inputs:
//! the DeltaNet causal conv, the gated delta rule (recurrent and chunked), the gated RMSNorm,
//! and the gated full-attention extras (query/gate split, per-head QK norm, partial NeoX RoPE,
//! sigmoid output gate). Formulas and layouts follow tests/fixtures/qwen/README.md. Shapes are
//! not multiples of the workgroup sizes, value heads come two per key head, state is carried
//! across calls, and one step may hold tokens of several sequence slots, each with its own
//! state. Skips without an adapter unless LILYPAD_REQUIRE_GPU=1.

use lilypad_engine::EngineError;
use lilypad_engine::kernels::Dispatch;
use lilypad_engine::ops::attn_gate::GatedHeads;
use lilypad_engine::ops::delta_net::{self, DeltaNetInputs, DeltaNetLayout, DeltaNetShape};
use lilypad_engine::ops::{self, Step, rope::RopeMode};
use rand::{Rng, rngs::StdRng};

mod common;
use common::{Gpu, delta_layouts, seeded};

/// Uniform in [lo, hi).
fn uniform(r: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| r.random_range(lo..hi)).collect()
}

fn wide(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// Asserts max |got − want| / (|want| + floor) ≤ tol and returns that maximum (printed, so a
/// run shows the margins).
fn check(got: &[f32], want: &[f64], tol: f64, floor: f64, what: &str) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs() / (w.abs() + floor);
        assert!(g.is_finite(), "{what}: index {i} is {g}");
        if err > worst.0 {
            worst = (err, i);
        }
    }
    let (err, i) = worst;
    eprintln!("{what}: max rel err {err:.2e} (floor {floor:.0e})");
    assert!(
        err <= tol,
        "{what}: index {i}: got {}, want {} (rel err {err:.2e} > {tol:.0e})",
        got[i],
        want[i]
    );
    err
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// x / sqrt(mean(x²) + eps) · w for one row.
fn rms_reference(x: &[f32], w: &[f32], eps: f32) -> Vec<f64> {
    let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / x.len() as f64;
    let sc = 1.0 / (ms + eps as f64).sqrt();
    x.iter()
        .zip(w)
        .map(|(&v, &w)| v as f64 * sc * w as f64)
        .collect()
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn shape_error<T>(r: Result<T, EngineError>, what: &str) {
    match r {
        Err(EngineError::Shape { .. }) => {}
        Err(e) => panic!("{what}: wrong error {e}"),
        Ok(_) => panic!("{what}: accepted"),
    }
}

// ---- conv1d ----

/// y = silu(causal depthwise conv) over [state; x]; returns y and the new state.
fn conv_reference(
    x: &[f64],
    w: &[f32],
    state: &[f64],
    ch: usize,
    taps: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut seq = state.to_vec();
    seq.extend_from_slice(x);
    let n = x.len() / ch;
    let mut y = vec![0.0; n * ch];
    for t in 0..n {
        for c in 0..ch {
            let acc: f64 = (0..taps)
                .map(|j| w[c * taps + j] as f64 * seq[(t + j) * ch + c])
                .sum();
            y[t * ch + c] = silu(acc);
        }
    }
    (y, seq[n * ch..].to_vec())
}

/// Conv over a prefill then single decode tokens, from a random carried-in state; a batch and
/// token-by-token calls agree bit for bit. Tolerance 1e-5 relative (+0.1: inputs and
/// weights are O(1), so f32 sums of 4 terms carry ~1e-7 absolute error).
#[test]
fn conv1d_matches_reference() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    for &(ch, taps, prefill, decode) in &[
        (300usize, 4usize, 9usize, 4usize),
        (128, 4, 1, 2),
        (37, 2, 5, 1),
    ] {
        let total = prefill + decode;
        let x = uniform(&mut r, total * ch, -2.0, 2.0);
        let w = uniform(&mut r, ch * taps, -1.0, 1.0);
        let state0 = uniform(&mut r, (taps - 1) * ch, -2.0, 2.0);
        let (want, want_state) = conv_reference(&wide(&x), &w, &wide(&state0), ch, taps);
        let wb = gpu.upload(&w);
        // One call over everything, then prefill + token-by-token decode.
        let mut runs = Vec::new();
        for split in [vec![total], [vec![prefill], vec![1; decode]].concat()] {
            let state = gpu.upload(&state0);
            let mut got = Vec::new();
            let mut t0 = 0;
            for n in split {
                let xb = gpu.upload(&x[t0 * ch..(t0 + n) * ch]);
                let y = gpu.zeros(n * ch);
                let s = gpu.step(n, t0);
                let d =
                    ops::conv1d::conv1d(&gpu.0, &xb, &wb, &state, &y, ch as u32, taps as u32, &s);
                gpu.run(&[d.unwrap()], n);
                got.extend(gpu.read(&y, n * ch));
                t0 += n;
            }
            let what = format!("conv1d ch={ch} taps={taps}");
            check(&got, &want, 1e-5, 0.1, &what);
            check(
                &gpu.read(&state, (taps - 1) * ch),
                &want_state,
                0.0,
                1.0,
                &what,
            );
            runs.push(got);
        }
        assert!(
            same_bits(&runs[0], &runs[1]),
            "conv1d: a batch and token-by-token calls differ"
        );
    }
}

/// KV-cache rows per sequence slot in the batched tests' steps (conv1d and the delta rule read
/// only the slot).
const SLOT_CONTEXT: u32 = 256;

/// (slot, position) per token for a batched step: each slot's tokens at consecutive positions
/// from 3 + 10 · slot.
fn slot_tokens(slots: &[usize]) -> Vec<(u32, u32)> {
    let mut next = [0u32; 8];
    slots
        .iter()
        .map(|&s| {
            next[s] += 1;
            (s as u32, 3 + 10 * s as u32 + next[s] - 1)
        })
        .collect()
}

/// Tokens of several sequences in one step (batched decode) over a state of 4 slots
/// [slots, taps − 1, ch], each slot with its own random state: token t convolves with its own
/// slot's window, switching slot mid-step (slots interleaved, the first token not of slot 0).
/// Against each slot's tokens run in order on its own state (f64), and bit for bit against one
/// GPU step per token (`Step::for_sequence`); slots no token uses keep their state bit for bit.
/// Tolerance as above (1e-5 relative + 0.1; states exact).
#[test]
fn conv1d_batched_slots_match_reference() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    const SLOTS: usize = 4;
    let mut worst = 0f64;
    for &(ch, taps, slots) in &[
        (300usize, 4usize, &[0usize, 2, 0, 1, 2, 2, 0][..]),
        (37, 2, &[2, 0, 0, 2, 0][..]),
        (128, 4, &[1, 2, 0, 1, 0, 2, 2, 1, 0, 1, 1][..]),
    ] {
        let what = format!("conv1d batched ch={ch} taps={taps} slots {slots:?}");
        let n = slots.len();
        let slot_len = (taps - 1) * ch;
        let x = uniform(&mut r, n * ch, -2.0, 2.0);
        let w = uniform(&mut r, ch * taps, -1.0, 1.0);
        let state0 = uniform(&mut r, SLOTS * slot_len, -2.0, 2.0);
        let mut want = vec![0.0; n * ch];
        let mut want_state = wide(&state0);
        for s in 0..SLOTS {
            let mine: Vec<usize> = (0..n).filter(|&t| slots[t] == s).collect();
            let xs: Vec<f64> = mine
                .iter()
                .flat_map(|&t| wide(&x[t * ch..][..ch]))
                .collect();
            let st = &mut want_state[s * slot_len..][..slot_len];
            let (y, new_state) = conv_reference(&xs, &w, st, ch, taps);
            st.copy_from_slice(&new_state);
            for (i, &t) in mine.iter().enumerate() {
                want[t * ch..][..ch].copy_from_slice(&y[i * ch..][..ch]);
            }
        }
        let toks = slot_tokens(slots);
        let wb = gpu.upload(&w);
        // One batched step, then one step per token.
        let mut runs = Vec::new();
        for batched in [true, false] {
            let state = gpu.upload(&state0);
            let mut got = Vec::new();
            let steps: Vec<(usize, usize, Step)> = if batched {
                vec![(0, n, Step::batch(&toks, SLOT_CONTEXT))]
            } else {
                (0..n)
                    .map(|t| {
                        let (slot, pos) = toks[t];
                        (t, 1, Step::for_sequence(1, pos, slot, SLOT_CONTEXT))
                    })
                    .collect()
            };
            for (t0, k, st) in steps {
                let xb = gpu.upload(&x[t0 * ch..(t0 + k) * ch]);
                let y = gpu.zeros(k * ch);
                let s = gpu.step_of(st);
                let d =
                    ops::conv1d::conv1d(&gpu.0, &xb, &wb, &state, &y, ch as u32, taps as u32, &s);
                gpu.run(&[d.unwrap()], k);
                got.extend(gpu.read(&y, k * ch));
            }
            let got_state = gpu.read(&state, SLOTS * slot_len);
            worst = worst.max(check(&got, &want, 1e-5, 0.1, &what));
            check(
                &got_state,
                &want_state,
                0.0,
                1.0,
                &format!("{what}: state of every slot"),
            );
            for s in 0..SLOTS {
                let range = s * slot_len..(s + 1) * slot_len;
                if !slots.contains(&s) {
                    assert!(
                        same_bits(&got_state[range.clone()], &state0[range]),
                        "{what}: slot {s}, used by no token, changed"
                    );
                }
            }
            runs.push((got, got_state));
        }
        assert!(
            same_bits(&runs[0].0, &runs[1].0) && same_bits(&runs[0].1, &runs[1].1),
            "{what}: a batched step and one step per token differ"
        );
    }
    eprintln!("conv1d batched slots: max rel err {worst:.2e} (floor 1e-1)");
}

// ---- gated delta rule ----

/// One random DeltaNet layer input over `n` tokens, and the layout its recurrent steps run in.
#[derive(Clone)]
struct DeltaCase {
    layout: DeltaNetLayout,
    shape: DeltaNetShape,
    n: usize,
    qkv: Vec<f32>,
    alpha: Vec<f32>,
    beta: Vec<f32>,
    a: Vec<f32>,
    dt_bias: Vec<f32>,
    state0: Vec<f32>,
}

impl DeltaCase {
    fn new(r: &mut StdRng, shape: DeltaNetShape, n: usize) -> Self {
        let nv = shape.n_v as usize;
        // Parameters drawn as the fixture's: A_log = log U(0.05, 2), dt_bias U(−1, 1).
        let a = uniform(r, nv, 0.05, 2.0).iter().map(|v| -v).collect();
        Self {
            layout: DeltaNetLayout::Split,
            shape,
            n,
            qkv: uniform(r, n * shape.qkv_len() as usize, -1.0, 1.0),
            alpha: uniform(r, n * nv, -3.0, 3.0),
            beta: uniform(r, n * nv, -4.0, 4.0),
            a,
            dt_bias: uniform(r, nv, -1.0, 1.0),
            state0: uniform(r, shape.state_len() as usize, -0.5, 0.5),
        }
    }

    /// This case with its recurrent steps in `layout`.
    fn in_layout(&self, layout: DeltaNetLayout) -> Self {
        Self {
            layout,
            ..self.clone()
        }
    }

    /// The README's recurrence in f64 over tokens [0, n) from `state0`: the outputs [n, n_v, d_v].
    fn reference(&self) -> Vec<f64> {
        let all: Vec<usize> = (0..self.n).collect();
        self.reference_on(&all, &mut wide(&self.state0))
    }

    /// The recurrence over the tokens `tokens` (indices into this case's inputs, in this order)
    /// on `st` [n_v, d_k, d_v], updated in place: their outputs [tokens, n_v, d_v].
    fn reference_on(&self, tokens: &[usize], st: &mut [f64]) -> Vec<f64> {
        let DeltaNetShape {
            n_k,
            n_v,
            d_k,
            d_v,
            eps,
        } = self.shape;
        let (nk, nv, dk, dv) = (n_k as usize, n_v as usize, d_k as usize, d_v as usize);
        let row = self.shape.qkv_len() as usize;
        let mut out = vec![0.0; tokens.len() * nv * dv];
        let l2 = |x: &[f32], scale: f64| -> Vec<f64> {
            let ss: f64 = x.iter().map(|&v| v as f64 * v as f64).sum();
            let inv = 1.0 / (ss + eps as f64).sqrt() * scale;
            x.iter().map(|&v| v as f64 * inv).collect()
        };
        for (o, &t) in tokens.iter().enumerate() {
            let c = &self.qkv[t * row..][..row];
            for s in 0..nv {
                let j = s % nk;
                let q = l2(&c[j * dk..][..dk], 1.0 / (dk as f64).sqrt());
                let k = l2(&c[(nk + j) * dk..][..dk], 1.0);
                let v = &c[2 * nk * dk + s * dv..][..dv];
                let x = self.alpha[t * nv + s] as f64 + self.dt_bias[s] as f64;
                let decay = (x.exp().ln_1p() * self.a[s] as f64).exp();
                let beta = sigmoid(self.beta[t * nv + s] as f64);
                let sm = &mut st[s * dk * dv..][..dk * dv];
                sm.iter_mut().for_each(|e| *e *= decay);
                for col in 0..dv {
                    let mem: f64 = (0..dk).map(|i| sm[i * dv + col] * k[i]).sum();
                    let delta = (v[col] as f64 - mem) * beta;
                    for i in 0..dk {
                        sm[i * dv + col] += k[i] * delta;
                    }
                    out[(o * nv + s) * dv + col] = (0..dk).map(|i| sm[i * dv + col] * q[i]).sum();
                }
            }
        }
        out
    }

    /// Runs the steps `split` (token counts), each recurrent (false) or chunked (true), over one
    /// state buffer; returns all outputs.
    fn run(&self, gpu: &Gpu, split: &[(usize, bool)]) -> Vec<f32> {
        let state = gpu.upload(&self.state0);
        self.run_on(gpu, &state, split, |t0, n| Step::new(n as u32, t0 as u32))
    }

    /// [`DeltaCase::run`] on a given state buffer, the step of tokens t0 .. t0 + n being
    /// `step(t0, n)`.
    fn run_on(
        &self,
        gpu: &Gpu,
        state: &wgpu::Buffer,
        split: &[(usize, bool)],
        step: impl Fn(usize, usize) -> Step,
    ) -> Vec<f32> {
        let sh = &self.shape;
        let (nv, row, dv) = (sh.n_v as usize, sh.qkv_len() as usize, sh.d_v as usize);
        let (a, dt_bias) = (gpu.upload(&self.a), gpu.upload(&self.dt_bias));
        let max_tokens = split.iter().map(|s| s.0).max().unwrap_or(1) as u32;
        let scratch = gpu.zeros(sh.chunk_scratch_bytes(max_tokens) as usize / 4);
        let mut got = Vec::new();
        let mut t0 = 0;
        for &(n, chunked) in split {
            let qkv = gpu.upload(&self.qkv[t0 * row..(t0 + n) * row]);
            let alpha = gpu.upload(&self.alpha[t0 * nv..(t0 + n) * nv]);
            let beta = gpu.upload(&self.beta[t0 * nv..(t0 + n) * nv]);
            let inputs = DeltaNetInputs {
                qkv: &qkv,
                alpha: &alpha,
                beta: &beta,
                a: &a,
                dt_bias: &dt_bias,
            };
            let out = gpu.zeros(n * nv * dv);
            let s = gpu.step_of(step(t0, n));
            let ds: Vec<Dispatch> = if chunked {
                delta_net::delta_net_chunked(
                    &gpu.0, sh, &inputs, state, &out, &scratch, max_tokens, &s,
                )
                .unwrap()
                .into()
            } else {
                let d =
                    delta_net::delta_net_with(&gpu.0, self.layout, sh, &inputs, state, &out, &s);
                vec![d.unwrap()]
            };
            gpu.run(&ds, n);
            got.extend(gpu.read(&out, n * nv * dv));
            t0 += n;
        }
        got
    }
}

fn deltanet_shapes() -> [DeltaNetShape; 4] {
    let shape = |n_k, n_v, d_k, d_v| DeltaNetShape {
        n_k,
        n_v,
        d_k,
        d_v,
        eps: 1e-6,
    };
    // The tiny fixture's heads; odd dims that fill no block evenly (the second for the
    // per-lane layout, whose value heads are whole vec4s); FrogNano's head dims.
    [
        shape(2, 4, 16, 16),
        shape(3, 6, 20, 37),
        shape(3, 6, 21, 44),
        shape(1, 2, 128, 128),
    ]
}

/// The delta rule's outputs are sums of cancelling terms: errors are measured relative to each
/// value plus a tenth of the outputs' RMS, with this tolerance.
const DELTA_TOL: f64 = 1e-4;

/// A 150-token case for each of [`deltanet_shapes`], with its f64 reference.
fn delta_cases(r: &mut StdRng) -> Vec<(DeltaCase, Vec<f64>)> {
    deltanet_shapes()
        .into_iter()
        .map(|shape| {
            let case = DeltaCase::new(r, shape, 150);
            let want = case.reference();
            (case, want)
        })
        .collect()
}

fn check_delta(got: &[f32], want: &[f64], what: String) {
    let floor = 0.1 * (want.iter().map(|w| w * w).sum::<f64>() / want.len() as f64).sqrt();
    check(got, want, DELTA_TOL, floor, &what);
}

/// The recurrent form, in each layout, over a 150-token prefill from a random carried-in
/// state, against the f64 recurrence; a prefill followed by single-token decode steps gives
/// the same bits. On the test adapter, lavapipe, FrogNano's heads take the per-lane layout;
/// with them a 500-token step too (past ~200 tokens one invocation's walk once passed
/// llvmpipe's loop budget: the walk now takes ranges of tokens, a dispatch each).
#[test]
fn delta_net_recurrent_matches_reference() {
    let gpu = gpu_or_skip!();
    // A CPU adapter with subgroups (the test adapter, lavapipe) runs FrogNano's heads per lane.
    if gpu.0.adapter.device_type == "Cpu" && gpu.0.adapter.subgroups {
        let frognano = deltanet_shapes()[3];
        assert_eq!(
            DeltaNetLayout::for_shape(&gpu.0, &frognano),
            DeltaNetLayout::PerLane
        );
    }
    for (case, want) in delta_cases(&mut seeded()) {
        for layout in delta_layouts(&gpu, &case.shape) {
            let case = case.in_layout(layout);
            let what = format!("delta_net {layout:?} {:?}", case.shape);
            let batch = case.run(&gpu, &[(150, false)]);
            check_delta(&batch, &want, what.clone());
            if case.shape.d_k == 128 {
                let long = DeltaCase::new(&mut seeded(), case.shape, 500).in_layout(layout);
                let got = long.run(&gpu, &[(500, false)]);
                check_delta(&got, &long.reference(), format!("{what}, 500 tokens"));
            }
            let mut split = vec![(143, false)];
            split.extend([(1, false); 7]);
            assert!(
                same_bits(&batch, &case.run(&gpu, &split)),
                "{what}: prefill 143 + 7 decode steps differ from one prefill"
            );
        }
    }
}

/// The chunked form across chunk boundaries (150 = 4 × 32 + 22 tokens), a step of one token, a
/// step of exactly one chunk, and mixed with recurrent decode steps on one state, against the
/// f64 recurrence and the recurrent kernel.
#[test]
fn delta_net_chunked_matches_recurrent() {
    let gpu = gpu_or_skip!();
    for (case, want) in delta_cases(&mut seeded()) {
        let what = format!("delta_net_chunked {:?}", case.shape);
        let chunked = case.run(&gpu, &[(150, true)]);
        check_delta(&chunked, &want, format!("{what} prefill 150"));
        let recurrent = wide(&case.run(&gpu, &[(150, false)]));
        check_delta(&chunked, &recurrent, format!("{what} vs recurrent"));
        let split = [
            (1, true),
            (32, true),
            (3, false),
            (70, true),
            (1, false),
            (43, true),
        ];
        for layout in delta_layouts(&gpu, &case.shape) {
            let mixed = case.in_layout(layout).run(&gpu, &split);
            check_delta(
                &mixed,
                &want,
                format!("{what} 1 + 32 + 3 + 70 + 1 + 43, {layout:?}"),
            );
        }
    }
}

/// The training forms keep each 32-token chunk's incoming state — the chunked rule, and the
/// per-lane recurrent form where it runs: over a 150-token step (5 chunks, the last partial)
/// from a random state, states[c] equals the f64 recurrence's state after tokens 0 .. 32c
/// (tolerance as above), and the outputs are the same bits as without keeping.
#[test]
fn delta_net_keeps_chunk_states() {
    let gpu = gpu_or_skip!();
    for (case, _) in delta_cases(&mut seeded()) {
        let sh = &case.shape;
        let (nv, dv) = (sh.n_v as usize, sh.d_v as usize);
        let n = case.n;
        let (a, dt_bias) = (gpu.upload(&case.a), gpu.upload(&case.dt_bias));
        let (qkv, alpha, beta) = (
            gpu.upload(&case.qkv),
            gpu.upload(&case.alpha),
            gpu.upload(&case.beta),
        );
        let inputs = DeltaNetInputs {
            qkv: &qkv,
            alpha: &alpha,
            beta: &beta,
            a: &a,
            dt_bias: &dt_bias,
        };
        let scratch = gpu.zeros(sh.chunk_scratch_bytes(n as u32) as usize / 4);
        let states_len = sh.chunk_states_len(n as u32) as usize;
        let s = gpu.step_of(Step::new(n as u32, 0));
        let per_lane = delta_net::per_lane_allowed(&gpu.0, sh);
        for chunked in [true, false].into_iter().filter(|&c| c || per_lane) {
            let what = format!("delta_net states {sh:?}, chunked {chunked}");
            let state = gpu.upload(&case.state0);
            let out = gpu.zeros(n * nv * dv);
            let states = gpu.zeros(states_len);
            let (ds, plain): (Vec<Dispatch>, _) = if chunked {
                let ds = delta_net::delta_net_chunked_saving(
                    &gpu.0,
                    sh,
                    &inputs,
                    &state,
                    &out,
                    &scratch,
                    Some(&states),
                    n as u32,
                    &s,
                );
                (ds.unwrap().into(), case.run(&gpu, &[(n, true)]))
            } else {
                let d = delta_net::delta_net_keeping(
                    &gpu.0, sh, &inputs, &state, &out, &states, n as u32, &s,
                );
                let plain = case.in_layout(DeltaNetLayout::PerLane);
                (vec![d.unwrap()], plain.run(&gpu, &[(n, false)]))
            };
            gpu.run(&ds, n);
            assert!(
                same_bits(&gpu.read(&out, n * nv * dv), &plain),
                "{what}: outputs differ from the same form without states"
            );
            let got = gpu.read(&states, states_len);
            let per = sh.state_len() as usize;
            let mut st = wide(&case.state0);
            for c in 0..n.div_ceil(32) {
                check_delta(&got[c * per..][..per], &st, format!("{what} chunk {c}"));
                let next: Vec<usize> = (c * 32..((c + 1) * 32).min(n)).collect();
                case.reference_on(&next, &mut st);
            }
        }
    }
}

/// Tokens of three sequences interleaved in one recurrent step (slots 2, 0, 2, 1, 0, 0, then 18
/// drawn at random from 0..3) over a state buffer of 4 slots [slots, n_v, d_k, d_v], each with
/// its own random state: every token's output, and every slot's final state, equal its slot's
/// tokens run in order on that slot's state (the f64 recurrence); slot 3, used by no token,
/// keeps its state bit for bit; one GPU step per token (`Step::for_sequence`) gives the same
/// bits. Tolerance as above (outputs and states).
#[test]
fn delta_net_recurrent_batched_slots_match_reference() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    const SLOTS: usize = 4;
    let n = 24;
    for shape in deltanet_shapes() {
        let what = format!("delta_net batched {shape:?}");
        let case = DeltaCase::new(&mut r, shape, n);
        let mut slots = vec![2usize, 0, 2, 1, 0, 0];
        while slots.len() < n {
            slots.push(r.random_range(0..3));
        }
        let (nv, dv) = (shape.n_v as usize, shape.d_v as usize);
        let len = shape.state_len() as usize;
        let state0 = uniform(&mut r, SLOTS * len, -0.5, 0.5);
        let mut want = vec![0.0; n * nv * dv];
        let mut want_state = wide(&state0);
        for s in 0..SLOTS {
            let mine: Vec<usize> = (0..n).filter(|&t| slots[t] == s).collect();
            let out = case.reference_on(&mine, &mut want_state[s * len..][..len]);
            for (i, &t) in mine.iter().enumerate() {
                want[t * nv * dv..][..nv * dv].copy_from_slice(&out[i * nv * dv..][..nv * dv]);
            }
        }
        let toks = slot_tokens(&slots);
        for layout in delta_layouts(&gpu, &case.shape) {
            let case = case.in_layout(layout);
            let what = format!("{what} {layout:?}");
            let state = gpu.upload(&state0);
            let got = case.run_on(&gpu, &state, &[(n, false)], |_, _| {
                Step::batch(&toks, SLOT_CONTEXT)
            });
            check_delta(&got, &want, format!("{what}: outputs, slots {slots:?}"));
            let got_state = gpu.read(&state, SLOTS * len);
            for s in 0..SLOTS {
                let range = s * len..(s + 1) * len;
                if slots.contains(&s) {
                    check_delta(
                        &got_state[range.clone()],
                        &want_state[range],
                        format!("{what}: state of slot {s}"),
                    );
                } else {
                    assert!(
                        same_bits(&got_state[range.clone()], &state0[range]),
                        "{what}: slot {s}, used by no token, changed"
                    );
                }
            }
            let single = gpu.upload(&state0);
            let one_by_one = case.run_on(&gpu, &single, &vec![(1, false); n], |t0, _| {
                let (slot, pos) = toks[t0];
                Step::for_sequence(1, pos, slot, SLOT_CONTEXT)
            });
            assert!(
                same_bits(&got, &one_by_one)
                    && same_bits(&got_state, &gpu.read(&single, SLOTS * len)),
                "{what}: a batched step and one step per token differ"
            );
        }
    }
}

/// The chunked form on the sequence in slot 1 of a state buffer of 3 slots, each with its own
/// random state (`Step::for_sequence`): chunked steps across chunk boundaries mixed with
/// recurrent steps on that slot (40 + 1 + 33 + 6 tokens), against the f64 recurrence from slot
/// 1's state, outputs and final state; slots 0 and 2 keep their state bit for bit. Tolerance as
/// above.
#[test]
fn delta_net_chunked_on_one_slot_of_several() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let n = 80;
    for shape in deltanet_shapes() {
        let what = format!("delta_net_chunked slot 1 {shape:?}");
        let case = DeltaCase::new(&mut r, shape, n);
        let len = shape.state_len() as usize;
        let state0 = uniform(&mut r, 3 * len, -0.5, 0.5);
        let mut want_state = wide(&state0[len..2 * len]);
        let all: Vec<usize> = (0..n).collect();
        let want = case.reference_on(&all, &mut want_state);
        for layout in delta_layouts(&gpu, &case.shape) {
            let case = case.in_layout(layout);
            let what = format!("{what} {layout:?}");
            let state = gpu.upload(&state0);
            let split = [(40, true), (1, false), (33, true), (6, false)];
            let got = case.run_on(&gpu, &state, &split, |t0, k| {
                Step::for_sequence(k as u32, t0 as u32, 1, SLOT_CONTEXT)
            });
            check_delta(&got, &want, format!("{what}: outputs"));
            let got_state = gpu.read(&state, 3 * len);
            check_delta(
                &got_state[len..2 * len],
                &want_state,
                format!("{what}: state of slot 1"),
            );
            for s in [0, 2] {
                let range = s * len..(s + 1) * len;
                assert!(
                    same_bits(&got_state[range.clone()], &state0[range]),
                    "{what}: slot {s} changed"
                );
            }
        }
    }
}

/// Typed errors for head layouts and buffers the kernels cannot take.
#[test]
fn qwen35_ops_reject_bad_shapes() {
    let gpu = gpu_or_skip!();
    let ctx = &gpu.0;
    let b = gpu.zeros(64);
    let s = gpu.step(1, 0);
    let inputs = DeltaNetInputs {
        qkv: &b,
        alpha: &b,
        beta: &b,
        a: &b,
        dt_bias: &b,
    };
    let good = DeltaNetShape {
        n_k: 1,
        n_v: 2,
        d_k: 4,
        d_v: 4,
        eps: 1e-6,
    };
    for bad in [
        DeltaNetShape {
            n_v: 3,
            n_k: 2,
            ..good
        },
        DeltaNetShape { n_k: 0, ..good },
        DeltaNetShape { d_k: 300, ..good },
        DeltaNetShape { d_v: 0, ..good },
        DeltaNetShape { d_v: 16, ..good }, // state of 2·4·16 values > the 64 given
    ] {
        shape_error(
            delta_net::delta_net(ctx, &bad, &inputs, &b, &b, &s),
            &format!("{bad:?}"),
        );
    }
    // The per-lane layout takes value heads of whole vec4s only.
    if delta_net::per_lane_allowed(ctx, &good) {
        let odd = DeltaNetShape { d_v: 6, ..good };
        shape_error(
            delta_net::delta_net_with(ctx, DeltaNetLayout::PerLane, &odd, &inputs, &b, &b, &s),
            "per-lane, value heads 6 wide",
        );
    }
    // Scratch for 1 token, asked to cover 100.
    let scratch = gpu.zeros(good.chunk_scratch_bytes(1) as usize / 4);
    if delta_net::per_lane_allowed(ctx, &good) {
        shape_error(
            delta_net::delta_net_keeping(ctx, &good, &inputs, &b, &b, &gpu.zeros(32), 100, &s),
            "per-lane, chunk states for 1 chunk asked to cover 100 tokens",
        );
    }
    shape_error(
        delta_net::delta_net_chunked(ctx, &good, &inputs, &b, &b, &scratch, 100, &s),
        "small scratch",
    );
    for (ch, taps) in [(8u32, 1u32), (8, 9), (0, 4), (64, 4)] {
        shape_error(
            ops::conv1d::conv1d(ctx, &b, &b, &b, &b, ch, taps, &s),
            &format!("conv1d {ch} channels, {taps} taps"),
        );
    }
    let heads = |n_head, head_dim, max_tokens| GatedHeads {
        n_head,
        head_dim,
        max_tokens,
    };
    shape_error(heads(0, 32, 4).split_query(ctx, &b, &b, &s), "no heads");
    shape_error(heads(4, 0, 4).sigmoid_gate(ctx, &b, &b, &s), "empty heads");
    shape_error(
        heads(64, 256, 1 << 17).split_query(ctx, &b, &b, &s),
        "u32 overflow",
    );
}

// ---- gated RMSNorm ----

/// y = rmsnorm(x per value head) · w · silu(z), w shared across heads. Tolerance 1e-5
/// relative (+1e-5).
#[test]
fn gated_rms_norm_matches_reference() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    for &(dv, heads, tokens) in &[(16usize, 4usize, 3usize), (128, 3, 2), (100, 5, 1)] {
        let len = dv * heads * tokens;
        let x = uniform(&mut r, len, -3.0, 3.0);
        let z = uniform(&mut r, len, -4.0, 4.0);
        let w = uniform(&mut r, dv, 0.5, 1.5);
        let y = gpu.zeros(len);
        let eps = 1e-6f32;
        let s = gpu.step(tokens, 0);
        let (xb, zb, wb) = (gpu.upload(&x), gpu.upload(&z), gpu.upload(&w));
        let d = ops::rms_norm::rms_norm_gated(
            &gpu.0,
            &xb,
            &zb,
            &wb,
            &y,
            dv as u32,
            heads as u32,
            eps,
            &s,
        );
        gpu.run(&[d.unwrap()], tokens);
        let want: Vec<f64> = x
            .chunks(dv)
            .flat_map(|row| rms_reference(row, &w, eps))
            .zip(&z)
            .map(|(y, &g)| y * silu(g as f64))
            .collect();
        check(
            &gpu.read(&y, len),
            &want,
            1e-5,
            1e-5,
            &format!("rms_norm_gated d_v={dv} heads={heads}"),
        );
    }
}

// ---- gated full attention ----

/// The query path of a gated attention layer, q = rope(rmsnorm_per_head(split(qg))), and the
/// output gate x · sigmoid(gate), at the tiny fixture's settings (head dim 32, 8 rotated dims,
/// base 1000) and FrogNano's (256, 64, 1e7), from a nonzero position. Tolerance 1e-5 relative
/// (+1e-5) for split and gate; 2e-4 absolute after RoPE (f32 sin/cos of angles up to ~100 rad).
#[test]
fn gated_attention_extras_match_reference() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    for &(n_head, hd, n_rot, base, pos0, tokens) in &[
        (4usize, 32usize, 8u32, 1000.0f64, 61usize, 3usize),
        (3, 256, 64, 1e7, 17, 2),
    ] {
        let what = format!("gated attention heads={n_head} head_dim={hd} n_rot={n_rot}");
        let max_tokens = tokens + 1;
        let qg = uniform(&mut r, max_tokens * n_head * 2 * hd, -2.0, 2.0);
        let w = uniform(&mut r, hd, 0.75, 1.25);
        let eps = 1e-6f32;
        let qgb = gpu.upload(&qg);
        let s = gpu.step(tokens, pos0);
        let len = tokens * n_head * hd;
        let (q, qn) = (gpu.zeros(len), gpu.zeros(len));
        let freqs = gpu.upload(&ops::rope::frequencies(base, n_rot));
        let ctx = &gpu.0;
        let (nh, d) = (n_head as u32, hd as u32);
        let heads = GatedHeads {
            n_head: nh,
            head_dim: d,
            max_tokens: max_tokens as u32,
        };
        let ds = [
            heads.split_query(ctx, &qgb, &q, &s).unwrap(),
            ops::rms_norm::rms_norm(ctx, &q, &gpu.upload(&w), &qn, d, nh, eps, &s).unwrap(),
            ops::rope::rope(ctx, &qn, &freqs, nh, d, n_rot, RopeMode::Neox, &s).unwrap(),
        ];
        gpu.run(&ds, tokens);
        let query = |t: usize, h: usize| &qg[(t * n_head + h) * 2 * hd..][..hd];
        let gate = |t: usize, h: usize| &qg[(t * n_head + h) * 2 * hd + hd..][..hd];
        let split_want: Vec<f64> = (0..tokens * n_head)
            .flat_map(|th| wide(query(th / n_head, th % n_head)))
            .collect();
        check(
            &gpu.read(&q, len),
            &split_want,
            0.0,
            1.0,
            &format!("{what}: split_query"),
        );
        let mut want = Vec::new();
        for t in 0..tokens {
            for h in 0..n_head {
                let mut y = rms_reference(query(t, h), &w, eps);
                let half = n_rot as usize / 2;
                for i in 0..half {
                    let theta = (pos0 + t) as f64 * base.powf(-2.0 * i as f64 / n_rot as f64);
                    let (a, b) = (y[i], y[i + half]);
                    y[i] = a * theta.cos() - b * theta.sin();
                    y[i + half] = a * theta.sin() + b * theta.cos();
                }
                want.extend(y);
            }
        }
        check(
            &gpu.read(&qn, len),
            &want,
            2e-4,
            1.0,
            &format!("{what}: q norm + rope"),
        );

        let attn = uniform(&mut r, len, -2.0, 2.0);
        let ab = gpu.upload(&attn);
        gpu.run(&[heads.sigmoid_gate(ctx, &ab, &qgb, &s).unwrap()], tokens);
        let want: Vec<f64> = (0..len)
            .map(|i| {
                let th = i / hd;
                attn[i] as f64 * sigmoid(gate(th / n_head, th % n_head)[i % hd] as f64)
            })
            .collect();
        check(
            &gpu.read(&ab, len),
            &want,
            1e-5,
            1e-5,
            &format!("{what}: sigmoid_gate"),
        );
    }
}

/// A checkpoint (`Step::checkpoint_after`): a step of several tokens of the sequence in slot 0
/// also leaves the state after token k in slot 1 — conv1d's window exactly, the delta rule's
/// state against the f64 recurrence over the first k + 1 tokens (tolerance as above) — while
/// its outputs and slot 0's final state keep the bits of the same step without one.
#[test]
fn recurrent_kernels_write_checkpoints() {
    let gpu = gpu_or_skip!();
    let mut r = seeded();
    let (n, k) = (5usize, 2usize);
    let step = || Step::for_sequence(n as u32, 7, 0, SLOT_CONTEXT);
    let marked = || step().checkpoint_after(k, 1);

    let (ch, taps) = (300usize, 4usize);
    let slot_len = (taps - 1) * ch;
    let x = uniform(&mut r, n * ch, -2.0, 2.0);
    let w = uniform(&mut r, ch * taps, -1.0, 1.0);
    let state0 = uniform(&mut r, slot_len, -2.0, 2.0);
    let (_, want_ckpt) = conv_reference(&wide(&x[..(k + 1) * ch]), &w, &wide(&state0), ch, taps);
    let (wb, xb) = (gpu.upload(&w), gpu.upload(&x));
    let mut runs = Vec::new();
    for s in [step(), marked()] {
        let state = gpu.upload(&[&state0[..], &vec![9.0; slot_len][..]].concat());
        let y = gpu.zeros(n * ch);
        let sb = gpu.step_of(s);
        let d = ops::conv1d::conv1d(&gpu.0, &xb, &wb, &state, &y, ch as u32, taps as u32, &sb);
        gpu.run(&[d.unwrap()], n);
        runs.push((gpu.read(&y, n * ch), gpu.read(&state, 2 * slot_len)));
    }
    let ((y0, s0), (y1, s1)) = (&runs[0], &runs[1]);
    assert!(same_bits(y0, y1) && same_bits(&s0[..slot_len], &s1[..slot_len]));
    assert!(
        s0[slot_len..].iter().all(|&v| v == 9.0),
        "no checkpoint: slot 1 untouched"
    );
    check(&s1[slot_len..], &want_ckpt, 0.0, 1.0, "conv1d checkpoint");

    for shape in deltanet_shapes() {
        let what = format!("delta_net checkpoint {shape:?}");
        let case = DeltaCase::new(&mut r, shape, n);
        let len = shape.state_len() as usize;
        let mut want_ckpt = wide(&case.state0);
        let first: Vec<usize> = (0..=k).collect();
        case.reference_on(&first, &mut want_ckpt);
        for layout in delta_layouts(&gpu, &case.shape) {
            let case = case.in_layout(layout);
            let what = format!("{what} {layout:?}");
            let mut runs = Vec::new();
            for s in [step(), marked()] {
                let state = gpu.upload(&[&case.state0[..], &vec![9.0; len][..]].concat());
                let out = case.run_on(&gpu, &state, &[(n, false)], |_, _| s);
                runs.push((out, gpu.read(&state, 2 * len)));
            }
            let ((o0, s0), (o1, s1)) = (&runs[0], &runs[1]);
            assert!(
                same_bits(o0, o1) && same_bits(&s0[..len], &s1[..len]),
                "{what}: the checkpoint changed the step"
            );
            assert!(
                s0[len..].iter().all(|&v| v == 9.0),
                "{what}: slot 1 written without one"
            );
            check_delta(&s1[len..], &want_ckpt, what);
        }
    }
}
