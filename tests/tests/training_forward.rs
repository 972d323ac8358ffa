//! The training forward pass (`Model::forward_for_training`) over a 40-token sequence in
//! steps of 16 (so three steps, the last partial), for Llama, Qwen3 and Qwen3.5:
//! - its final hidden states, put through the LM head on the CPU (f64), give the logits of
//!   ordinary inference of the same tokens (`eval`, all rows), within the fixtures' tolerance;
//! - what a layer keeps is that layer's: each layer's kept input, normed on the CPU with the
//!   GGUF's norm weight, is its mixer's input, and the kept reciprocal RMS is 1/sqrt(mean x² +
//!   eps) of that input (f64);
//! - a checkpointed pass, recomputing each layer of each step, reproduces every value the
//!   kept pass holds for it (same kernels on the same inputs: differences ≤ 1e-6 relative),
//!   and leaves the model holding the sequence (the next token's logits equal a fresh run's);
//! - both passes allocate exactly the bytes `ActivationPlan` predicts.
//!
//! The models are the tiny reference fixtures, themselves checked against transformers.

use lilypad_engine::activations::{LayerActivations, MixerActivations};
use lilypad_engine::{ActivationMode, ActivationPlan, Logits, Model, ModelOptions, Tensor};
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tests::qwen::{TOL, load_model};
use lilypad_tests::repo_root;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MODELS: [&str; 3] = [
    "lora/llama-tiny/model/model.gguf",
    "qwen/qwen3-tiny/model.gguf",
    "qwen/qwen35-tiny/model.gguf",
];
const STEP: u32 = 16;
const TOKENS: usize = 40;

fn open(path: &str) -> (GgufFile, MmapSource) {
    let src = MmapSource::open(repo_root().join("tests/fixtures").join(path)).unwrap();
    (GgufFile::read(&src).unwrap(), src)
}

fn model(file: &GgufFile, src: &MmapSource) -> Option<Model> {
    let opts = ModelOptions {
        context: Some(64),
        max_batch: STEP,
        ..Default::default()
    };
    load_model(file, src, &opts)
}

fn weight(file: &GgufFile, src: &MmapSource, name: &str) -> Vec<f32> {
    let t = file.tensor(name).unwrap_or_else(|| panic!("{name}"));
    let mut v = vec![0f32; t.n_elements() as usize];
    lilypad_gguf::dequantize(t.ty, &file.tensor_bytes(src, t).unwrap(), &mut v).unwrap();
    v
}

fn read(m: &Model, t: &Tensor, rows: usize) -> Vec<f32> {
    let n = rows * t.cols() as usize;
    let bytes = pollster::block_on(m.gpu().read_back(&t.buffer, 0, n as u64 * 4)).unwrap();
    bytemuck::cast_slice(&bytes).to_vec()
}

/// Named values read back.
type Values = Vec<(String, Vec<f32>)>;

/// Every tensor a layer's backward pass reads, by name, its first `rows` rows.
fn layer_values(m: &Model, l: &LayerActivations, rows: usize) -> Values {
    let mut v: Vec<(&str, &Tensor)> = vec![
        ("mixer in", &l.mixer_in),
        ("mlp in", &l.mlp_in),
        ("gate", &l.gate),
        ("up", &l.up),
        ("act", &l.act),
    ];
    for (name, t) in [
        ("x in", &l.x_in),
        ("mixer rstd", &l.mixer_rstd),
        ("mlp rstd", &l.mlp_rstd),
    ] {
        v.extend(t.as_ref().map(|t| (name, t)));
    }
    match &l.mixer {
        MixerActivations::Attention(a) => {
            v.extend([("q", &a.q), ("att", &a.att)]);
            if let Some((q, k)) = &a.qk_raw {
                v.extend([("q raw", q), ("k raw", k)]);
            }
            if let Some((q, k)) = &a.qk_rstd {
                v.extend([("q rstd", q), ("k rstd", k)]);
            }
            v.extend(a.qg.as_ref().map(|t| ("q and gate", t)));
            v.extend(a.lse.as_ref().map(|t| ("lse", t)));
        }
        MixerActivations::DeltaNet(d) => {
            v.extend([
                ("qkv raw", &d.qkv_raw),
                ("qkv", &d.qkv),
                ("z", &d.z),
                ("alpha", &d.alpha),
                ("beta", &d.beta),
                ("o", &d.o),
                ("o normed", &d.o_normed),
            ]);
            v.extend(d.o_rstd.as_ref().map(|t| ("o rstd", t)));
            if let Some(s) = &d.states {
                v.push(("chunk states", s));
            }
        }
    }
    v.into_iter()
        .map(|(name, t)| {
            // Chunk states are per 32-token chunk, not per token.
            let r = if name == "chunk states" {
                rows.div_ceil(32)
            } else {
                rows
            };
            (name.to_string(), read(m, t, r))
        })
        .collect()
}

fn max_rel_diff(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().map(|v| v.abs()).fold(1f32, f32::max);
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max)
        / scale
}

#[test]
fn training_forward_keeps_what_backward_needs() {
    let mut r = StdRng::seed_from_u64(12);
    for path in MODELS {
        let (file, src) = open(path);
        let Some(mut m) = model(&file, &src) else {
            return;
        };
        let cfg = m.config.clone();
        let (vocab, e) = (cfg.vocab() as usize, cfg.n_embd() as usize);
        let tokens: Vec<u32> = (0..TOKENS)
            .map(|_| r.random_range(0..vocab as u32))
            .collect();
        let want_logits = pollster::block_on(m.eval(&tokens, Logits::All)).unwrap();

        let keep =
            pollster::block_on(m.forward_for_training(&tokens, ActivationMode::Keep)).unwrap();
        let plan = ActivationPlan::new(&cfg.activation_shape(), TOKENS as u32, STEP);
        assert_eq!(keep.steps.len(), 3, "{path}");
        assert_eq!(
            keep.bytes(),
            plan.keep,
            "{path}: kept bytes against the plan"
        );

        // The final hidden states through the LM head on the CPU = inference's logits.
        let head_name = if file.tensor("output.weight").is_some() {
            "output.weight"
        } else {
            "token_embd.weight"
        };
        let head = weight(&file, &src, head_name);
        for (s, store) in keep.steps.iter().enumerate() {
            let rows = (TOKENS - s * STEP as usize).min(STEP as usize);
            let hidden = read(&m, &store.hidden, rows);
            for t in 0..rows {
                let h = &hidden[t * e..][..e];
                let got: Vec<f32> = (0..vocab)
                    .map(|v| {
                        let w = &head[v * e..][..e];
                        w.iter()
                            .zip(h)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>() as f32
                    })
                    .collect();
                let row = s * STEP as usize + t;
                let want = &want_logits[row * vocab..][..vocab];
                let d = max_rel_diff(&got, want);
                assert!(d <= TOL, "{path}: logits of token {row} differ by {d:.2e}");
            }
        }

        // Each layer's kept input, normed on the CPU, is its mixer's input.
        let eps = match &cfg {
            lilypad_engine::ModelConfig::Llama(c) => c.rms_eps,
            lilypad_engine::ModelConfig::Qwen35(c) => c.rms_eps,
        } as f64;
        for (s, store) in keep.steps.iter().enumerate() {
            let rows = (TOKENS - s * STEP as usize).min(STEP as usize);
            for (i, l) in store.layers.iter().enumerate() {
                let w = weight(&file, &src, &format!("blk.{i}.attn_norm.weight"));
                let x_in = read(&m, l.x_in.as_ref().unwrap(), rows);
                let xn = read(&m, &l.mixer_in, rows);
                let rstd = read(&m, l.mixer_rstd.as_ref().unwrap(), rows);
                for t in 0..rows {
                    let x = &x_in[t * e..][..e];
                    let ms = x.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / e as f64;
                    let want_rstd = 1.0 / (ms + eps).sqrt();
                    let rel = (rstd[t] as f64 - want_rstd).abs() / want_rstd;
                    assert!(
                        rel <= 1e-5,
                        "{path} step {s} layer {i} token {t}: rstd {rel:.2e}"
                    );
                    let want: Vec<f32> = x
                        .iter()
                        .zip(&w)
                        .map(|(&v, &w)| (v as f64 * want_rstd * w as f64) as f32)
                        .collect();
                    let d = max_rel_diff(&xn[t * e..][..e], &want);
                    assert!(
                        d <= 1e-5,
                        "{path} step {s} layer {i} token {t}: norm {d:.2e}"
                    );
                }
            }
        }
        let kept: Vec<Vec<Values>> = keep
            .steps
            .iter()
            .enumerate()
            .map(|(s, store)| {
                let rows = (TOKENS - s * STEP as usize).min(STEP as usize);
                store
                    .layers
                    .iter()
                    .map(|l| layer_values(&m, l, rows))
                    .collect()
            })
            .collect();
        drop(keep);

        // Checkpointed: each layer of each step recomputed equals what Keep kept.
        let ckpt = pollster::block_on(m.forward_for_training(&tokens, ActivationMode::Checkpoint))
            .unwrap();
        assert_eq!(
            ckpt.bytes(),
            plan.checkpoint,
            "{path}: checkpoint bytes against the plan"
        );
        assert!(plan.checkpoint < plan.keep, "{path}: {plan:?}");
        for (s, store) in ckpt.steps.iter().enumerate() {
            let rows = (TOKENS - s * STEP as usize).min(STEP as usize);
            for (i, l) in store.layers.iter().enumerate() {
                pollster::block_on(ckpt.recompute(&mut m, s, i)).unwrap();
                let got = layer_values(&m, l, rows);
                let want = &kept[s][i];
                assert_eq!(got.len(), want.len(), "{path} step {s} layer {i}");
                for ((name, g), (_, w)) in got.iter().zip(want) {
                    let d = max_rel_diff(g, w);
                    assert!(d <= 1e-6, "{path} step {s} layer {i} {name}: {d:.2e}");
                }
            }
        }
        // The model still holds the sequence: the next token scores as in a fresh run.
        let next = r.random_range(0..vocab as u32);
        let got = pollster::block_on(m.eval(&[next], Logits::Last)).unwrap();
        let mut all = tokens.clone();
        all.push(next);
        let mut fresh = model(&file, &src).unwrap();
        let want = pollster::block_on(fresh.eval(&all, Logits::Last)).unwrap();
        let d = max_rel_diff(&got, &want);
        assert!(d <= TOL, "{path}: next token after recomputing: {d:.2e}");
        // Once the model holds another sequence, recomputing is refused.
        let moved_on = pollster::block_on(ckpt.recompute(&mut m, 0, 0));
        assert!(
            moved_on.is_err(),
            "{path}: recomputed after the sequence changed"
        );
    }
}
