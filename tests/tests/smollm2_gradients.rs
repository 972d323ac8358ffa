//! The LoRA gradient of a real quantized model, SmolLM2-135M-Instruct (Q4_1, tied Q8_0
//! embeddings, 30 layers, a 49152-token vocabulary), against the loss it claims to be the
//! gradient of: along the gradient G, (L(θ + εĜ) − L(θ − εĜ)) / 2ε must approach |G|, with L
//! evaluated by the inference path. 96 tokens in steps of 64, so keys' and values' gradients
//! cross steps, on shapes whose loops exceed what CPU adapters run in one invocation (the
//! kernels split them). The exact whole-model comparisons against PyTorch are in
//! lora_gradients.rs; this one covers the sizes and weight types of a model people run.
//!
//! Tolerance: 1% at ε = 0.01 (measured: ~3e-4; the central difference's own error is O(ε²)).

use lilypad_engine::ActivationMode;
use lilypad_gguf::peft::{LoraAdapter, LoraTensor};
use lilypad_tests::smollm2;
use rand::{Rng, SeedableRng, rngs::StdRng};

#[test]
fn smollm2_gradient_is_the_loss_slope() {
    let Some(smol) = smollm2() else {
        return;
    };
    let mut smol = smol.lock().unwrap();
    let model = &mut smol.model;
    let mut rng = StdRng::seed_from_u64(11);
    let rank = 8;
    let tensors: Vec<LoraTensor> = model
        .lora_targets()
        .into_iter()
        .map(|(target, n_out, n_in)| {
            let mut uniform = |n: usize, scale: f32| -> Vec<f32> {
                (0..n)
                    .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * scale)
                    .collect()
            };
            LoraTensor {
                a: uniform(rank * n_in, 1.7 / (n_in as f32).sqrt()),
                b: uniform(n_out * rank, 0.02),
                target,
                rank,
                n_in,
                n_out,
            }
        })
        .collect();
    let adapter = LoraAdapter {
        rank,
        alpha: 16.0,
        scale: 2.0,
        base_model: None,
        tensors,
    };
    let vocab = model.config.vocab();
    let tokens: Vec<u32> = (0..96).map(|_| rng.random_range(0..vocab)).collect();
    let mut targets = tokens[1..].to_vec();
    targets.push(0);
    let coef: Vec<f32> = (0..96)
        .map(|i| if i < 95 { -1.0 / 95.0 } else { 0.0 })
        .collect();
    model.set_lora(Some(&adapter)).unwrap();
    let fwd =
        pollster::block_on(model.forward_for_training(&tokens, ActivationMode::Keep)).unwrap();
    assert_eq!(fwd.steps.len(), 2);
    let grads = pollster::block_on(model.lora_gradients(&fwd, &targets, &coef)).unwrap();
    let norm = grads
        .iter()
        .flat_map(|g| g.a.iter().chain(&g.b))
        .map(|&v| v as f64 * v as f64)
        .sum::<f64>()
        .sqrt();
    let mut loss_at = |eps: f64| {
        let mut a = adapter.clone();
        for (t, g) in a.tensors.iter_mut().zip(&grads) {
            assert_eq!(t.target, g.target);
            for (p, d) in t.a.iter_mut().zip(&g.a).chain(t.b.iter_mut().zip(&g.b)) {
                *p += (eps * *d as f64 / norm) as f32;
            }
        }
        model.set_lora(Some(&a)).unwrap();
        model.truncate(0);
        let lp = pollster::block_on(model.log_probs(0, &tokens, &targets)).unwrap();
        lp.iter()
            .zip(&coef)
            .map(|(&l, &c)| l as f64 * c as f64)
            .sum::<f64>()
    };
    let eps = 0.01;
    let slope = (loss_at(eps) - loss_at(-eps)) / (2.0 * eps);
    model.set_lora(None).unwrap();
    eprintln!("|G| {norm:.5}, slope along G {slope:.5}");
    assert!(norm > 0.1, "a gradient to check: |G| {norm}");
    assert!(
        (slope - norm).abs() <= 0.01 * norm,
        "the loss's slope along the gradient {slope} should be its norm {norm}"
    );
}
