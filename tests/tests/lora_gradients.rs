//! LoRA gradients against PyTorch autograd (tests/fixtures/lora/<name>/grads/, made by
//! scripts/reference/make_lora_grad_fixtures.sh): for the tiny Llama, Qwen3 and Qwen3.5 with their
//! random PEFT adapters on every linear, transformers + peft in float64 differentiate
//! L = Σ_t coef[t] · log p(token[t + 1] | token[..=t]) over the fixture's 20 tokens with
//! respect to every lora_A and lora_B. The engine runs its training forward pass (in steps of
//! 8 tokens, so gradients also cross steps through the keys and values) and its backward
//! kernels, and must give the same gradients. The fixture's gradients are read as a PEFT
//! adapter, which maps them onto the GGUF's layout as the adapter itself is mapped.
//!
//! Tolerance: per tensor, max |Δ| ≤ 2e-3 · max |reference| (f32 against float64 over three
//! layers and a 512-token vocabulary; measured margins are printed). A gradient left out, a
//! wrong sign or a missing path (the skip connections, the keys and values of earlier steps)
//! moves whole tensors by far more.

use lilypad_engine::ActivationMode;
use lilypad_gguf::peft::LoraTensor;
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tests::qwen;
use lilypad_tests::{peft_adapter, repo_root};
use serde::Deserialize;

#[derive(Deserialize)]
struct GradManifest {
    token_ids: Vec<u32>,
    targets: Vec<u32>,
    coef: Vec<f32>,
}

const TOL: f32 = 2e-3;

/// A LoRA fixture's folder and its base model's GGUF (llama-tiny carries its own base; the
/// Qwen adapters sit on tests/fixtures/qwen's models).
fn fixture(name: &str) -> (std::path::PathBuf, MmapSource, GgufFile) {
    let dir = repo_root().join("tests/fixtures/lora").join(name);
    let gguf = match name {
        "llama-tiny" => dir.join("model/model.gguf"),
        _ => qwen::fixture_dir(name).join("model.gguf"),
    };
    let src = MmapSource::open(gguf).unwrap();
    let file = GgufFile::read(&src).unwrap();
    (dir, src, file)
}

fn check(name: &str) {
    let (dir, src, file) = fixture(name);
    let adapter = peft_adapter(&dir.join("adapter"), &file);
    let reference = peft_adapter(&dir.join("grads"), &file);
    let m: GradManifest =
        serde_json::from_slice(&std::fs::read(dir.join("grads/grads.json")).unwrap()).unwrap();
    let Some(mut model) = qwen::load_model(&file, &src, &qwen::options(32, 8)) else {
        return;
    };
    model.set_lora(Some(&adapter)).unwrap();
    let fwd =
        pollster::block_on(model.forward_for_training(&m.token_ids, ActivationMode::Keep)).unwrap();
    assert_eq!(fwd.steps.len(), 3, "20 tokens in steps of 8");
    let grads: Vec<LoraTensor> =
        pollster::block_on(model.lora_gradients(&fwd, &m.targets, &m.coef)).unwrap();
    assert_eq!(
        grads.len(),
        reference.tensors.len(),
        "{name}: one gradient per adapted linear"
    );
    let mut worst = 0f32;
    for want in &reference.tensors {
        let got = grads
            .iter()
            .find(|g| g.target == want.target)
            .unwrap_or_else(|| panic!("{name}: no gradient for {}", want.target));
        assert_eq!(
            (got.rank, got.n_in, got.n_out),
            (want.rank, want.n_in, want.n_out)
        );
        for (what, g, w) in [("A", &got.a, &want.a), ("B", &got.b, &want.b)] {
            let scale = w.iter().map(|v| v.abs()).fold(0f32, f32::max);
            assert!(
                scale > 0.0,
                "{name} {}: a zero reference gradient",
                want.target
            );
            let diff = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let rel = diff / scale;
            assert!(
                rel <= TOL,
                "{name} {} d{what}: max |Δ| {diff:.3e} against max |ref| {scale:.3e} (relative {rel:.2e})",
                want.target
            );
            worst = worst.max(rel);
        }
    }
    eprintln!(
        "{name}: {} gradients, worst relative max |Δ| {worst:.2e}",
        grads.len()
    );

    // A checkpointed forward pass (each layer run again before its backward) gives the same
    // gradients as a kept one.
    let ckpt =
        pollster::block_on(model.forward_for_training(&m.token_ids, ActivationMode::Checkpoint))
            .unwrap();
    let again = pollster::block_on(model.lora_gradients(&ckpt, &m.targets, &m.coef)).unwrap();
    for (k, c) in grads.iter().zip(&again) {
        assert_eq!(k.target, c.target);
        for (a, b) in k.a.iter().chain(&k.b).zip(c.a.iter().chain(&c.b)) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + a.abs()),
                "{name} {}: kept {a}, checkpointed {b}",
                k.target
            );
        }
    }
}

#[test]
fn llama_lora_gradients_match_pytorch() {
    check("llama-tiny");
}

#[test]
fn qwen3_lora_gradients_match_pytorch() {
    check("qwen3-tiny");
}

/// Qwen3.5: DeltaNet layers (the conv and the delta rule carry state gradients from step to
/// step) and gated full attention, with adapters on all of their linears.
#[test]
fn qwen35_lora_gradients_match_pytorch() {
    check("qwen35-tiny");
}

/// A model without an adapter, and targets that do not fit the sequence, are refused with
/// clear errors.
#[test]
fn gradients_refuse_what_they_cannot_use() {
    let (dir, src, file) = fixture("llama-tiny");
    let Some(mut model) = qwen::load_model(&file, &src, &qwen::options(32, 8)) else {
        return;
    };
    let tokens = [1u32, 2, 3, 4, 5];
    let fwd =
        pollster::block_on(model.forward_for_training(&tokens, ActivationMode::Keep)).unwrap();
    let err = pollster::block_on(model.lora_gradients(&fwd, &tokens, &[1.0; 5])).unwrap_err();
    assert!(err.to_string().contains("no LoRA adapter"), "{err}");
    model
        .set_lora(Some(&peft_adapter(&dir.join("adapter"), &file)))
        .unwrap();
    let fwd =
        pollster::block_on(model.forward_for_training(&tokens, ActivationMode::Keep)).unwrap();
    let err = pollster::block_on(model.lora_gradients(&fwd, &tokens[..4], &[1.0; 5])).unwrap_err();
    assert!(err.to_string().contains("4 targets"), "{err}");
    let err =
        pollster::block_on(model.lora_gradients(&fwd, &[1, 2, 3, 4, 9999], &[1.0; 5])).unwrap_err();
    assert!(err.to_string().contains("9999"), "{err}");
}

/// What a training plan says the backward pass allocates is what it allocates, for each
/// architecture (attention, QK-norm, gated attention and DeltaNet layers).
#[test]
fn backward_plan_matches_allocation() {
    use lilypad_engine::backward::BackwardBuffers;
    for name in ["llama-tiny", "qwen3-tiny", "qwen35-tiny"] {
        let (_, src, file) = fixture(name);
        let Some(model) = qwen::load_model(&file, &src, &qwen::options(32, 8)) else {
            return;
        };
        let shape = model.config.activation_shape();
        let vocab = model.config.vocab();
        let made = BackwardBuffers::new(model.gpu(), &shape, vocab, 8, 32, 16, Default::default())
            .unwrap()
            .bytes();
        let planned = BackwardBuffers::planned_bytes(&shape, vocab, 8, 32, 16);
        assert_eq!(made, planned, "{name}");
    }
}

/// The configuration lists the same LoRA targets, with the same shapes, as the loaded model.
#[test]
fn config_lists_the_models_lora_targets() {
    for name in ["llama-tiny", "qwen3-tiny", "qwen35-tiny"] {
        let (_, src, file) = fixture(name);
        let Some(mut model) = qwen::load_model(&file, &src, &qwen::options(32, 8)) else {
            return;
        };
        let from_config = model.config.lora_targets();
        assert!(!from_config.is_empty());
        assert_eq!(from_config, model.lora_targets(), "{name}");
    }
}

/// A model whose batch is more than the gated delta rule's backward takes on this adapter
/// (CPU adapters cap a step by its loops: 85 tokens for this fixture's d_k of 16) trains in
/// steps of what it takes, and its gradients equal those of steps of 8.
#[test]
fn training_steps_fit_what_the_backward_kernels_take() {
    let (dir, src, file) = fixture("qwen35-tiny");
    let adapter = peft_adapter(&dir.join("adapter"), &file);
    let tokens: Vec<u32> = (0..100).map(|i| (i * 67 + 13) % 512).collect();
    let targets: Vec<u32> = tokens.iter().map(|t| (t * 5 + 2) % 512).collect();
    let coef: Vec<f32> = (0..100).map(|i| -0.01 * (1 + i % 3) as f32).collect();
    let gradients = |max_batch: u32| {
        let mut model = qwen::load_model(&file, &src, &qwen::options(128, max_batch))?;
        model.set_lora(Some(&adapter)).unwrap();
        let step = model.training_step_tokens();
        let fwd =
            pollster::block_on(model.forward_for_training(&tokens, ActivationMode::Keep)).unwrap();
        assert_eq!(fwd.step_tokens, step);
        Some((
            step,
            pollster::block_on(model.lora_gradients(&fwd, &targets, &coef)).unwrap(),
        ))
    };
    let (Some((small, by_8)), Some((large, by_large))) = (gradients(8), gradients(128)) else {
        return;
    };
    assert_eq!(small, 8);
    eprintln!("a batch of 128 trains in steps of {large}");
    assert!(large > 8 && large <= 128, "{large}");
    let mut worst = 0f32;
    for (a, b) in by_8.iter().zip(&by_large) {
        assert_eq!(a.target, b.target);
        for (x, y) in [(&a.a, &b.a), (&a.b, &b.b)] {
            let scale = x.iter().map(|v| v.abs()).fold(1e-6f32, f32::max);
            for (p, q) in x.iter().zip(y) {
                worst = worst.max((p - q).abs() / scale);
            }
        }
    }
    eprintln!("steps of 8 vs {large}: worst difference {worst:.1e} of each tensor's largest");
    assert!(worst < 1e-4, "{worst}");
}
