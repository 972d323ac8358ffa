//! A short seeded training run on the tiny Llama of tests/fixtures/lora/ with its random
//! adapter: the engine's training forward pass, backward kernels and AdamW on the GPU lower
//! the negative log-likelihood of a fixed 20-token sequence (measured by the inference path's
//! own log-probabilities), and a run resumed from a checkpoint of the optimizer takes exactly
//! the steps of the uninterrupted run, bit for bit.

use lilypad_engine::{ActivationMode, AdamWConfig, LoraAdamW, LoraGradients, Model};
use lilypad_gguf::{GgufFile, MmapSource};
use lilypad_tests::qwen;
use lilypad_tests::{peft_adapter, repo_root};
use serde::Deserialize;

#[derive(Deserialize)]
struct Manifest {
    token_ids: Vec<u32>,
}

const LR: f32 = 1e-2;

struct Run {
    tokens: Vec<u32>,
    targets: Vec<u32>,
    coef: Vec<f32>,
}

impl Run {
    /// Mean negative log-likelihood of each next token, through the inference path.
    fn nll(&self, model: &mut Model) -> f64 {
        model.truncate(0);
        let lp = pollster::block_on(model.log_probs(0, &self.tokens, &self.targets)).unwrap();
        let n = self.tokens.len() - 1;
        -lp[..n].iter().map(|&v| v as f64).sum::<f64>() / n as f64
    }

    /// One optimizer step on the whole sequence.
    fn step(&self, model: &mut Model, grads: &LoraGradients, opt: &mut LoraAdamW) {
        let fwd =
            pollster::block_on(model.forward_for_training(&self.tokens, ActivationMode::Keep))
                .unwrap();
        pollster::block_on(model.lora_backward(&fwd, &self.targets, &self.coef, grads)).unwrap();
        let stats = pollster::block_on(opt.step(model, grads, LR)).unwrap();
        assert!(
            stats.grad_norm.is_finite() && stats.grad_norm > 0.0,
            "{stats:?}"
        );
    }
}

/// The tiny Llama with its adapter, or None without a GPU.
fn model() -> Option<Model> {
    let dir = repo_root().join("tests/fixtures/lora/llama-tiny");
    let src = MmapSource::open(dir.join("model/model.gguf")).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let mut model = qwen::load_model(&file, &src, &qwen::options(32, 8))?;
    model
        .set_lora(Some(&peft_adapter(&dir.join("adapter"), &file)))
        .unwrap();
    Some(model)
}

#[test]
fn training_lowers_the_loss_and_resumes_exactly() {
    let Some(mut m) = model() else {
        return;
    };
    let dir = repo_root().join("tests/fixtures/lora/llama-tiny");
    let manifest: Manifest =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let tokens = manifest.token_ids;
    let n = tokens.len();
    // Minimising the mean NLL: L = Σ coef · log p with coef = −1 / (n − 1); the last position
    // has no next token.
    let mut targets = tokens[1..].to_vec();
    targets.push(0);
    let mut coef = vec![-1.0 / (n - 1) as f32; n];
    coef[n - 1] = 0.0;
    let run = Run {
        tokens,
        targets,
        coef,
    };
    let config = AdamWConfig::default();
    let grads = LoraGradients::new(&mut m).unwrap();
    let mut opt = LoraAdamW::new(&mut m, config).unwrap();
    let mut losses = vec![run.nll(&mut m)];
    let mut checkpoint = None;
    for step in 1..=8 {
        // Saved states are keyed by the adapter: each step makes the key a new one.
        let key = m.state_key();
        run.step(&mut m, &grads, &mut opt);
        assert_ne!(m.state_key(), key, "step {step} changes the state key");
        losses.push(run.nll(&mut m));
        if step == 4 {
            checkpoint = Some(pollster::block_on(opt.state(&mut m)).unwrap());
        }
    }
    eprintln!("NLL by step: {losses:.4?}");
    let (first, last) = (losses[0], losses[8]);
    assert!(
        last < first - 0.5,
        "eight steps at lr {LR} lower the NLL by more than 0.5: {losses:?}"
    );
    let rises = losses.windows(2).filter(|w| w[1] > w[0]).count();
    assert!(rises <= 1, "the NLL falls step after step: {losses:?}");
    let end = pollster::block_on(opt.state(&mut m)).unwrap();

    // Resume from step 4 in a fresh model: steps 5..=8 again, the same bits.
    let Some(mut m2) = model() else {
        return;
    };
    let checkpoint = checkpoint.unwrap();
    let key = m2.state_key();
    let mut opt2 = LoraAdamW::restore(&mut m2, config, &checkpoint).unwrap();
    assert_ne!(
        m2.state_key(),
        key,
        "a restored adapter has a key of its own"
    );
    assert_eq!(opt2.step, 4);
    assert!(
        (run.nll(&mut m2) - losses[4]).abs() < 1e-9,
        "the restored adapter is step 4's"
    );
    let grads2 = LoraGradients::new(&mut m2).unwrap();
    for _ in 5..=8 {
        run.step(&mut m2, &grads2, &mut opt2);
    }
    let resumed = pollster::block_on(opt2.state(&mut m2)).unwrap();
    assert_eq!(resumed.step, 8);
    assert!(
        resumed == end,
        "the resumed run's adapter and moments equal the uninterrupted run's"
    );

    // The trained adapter leaves as PEFT files and, read back onto a fresh base model, gives
    // the trained model's loss.
    let trained = pollster::block_on(m.lora_adapter()).unwrap().unwrap();
    let src = MmapSource::open(dir.join("model/model.gguf")).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let files = trained.to_peft(&file).unwrap();
    let back = lilypad_gguf::peft::LoraAdapter::from_peft(&files.config, &files.safetensors, &file)
        .unwrap();
    assert_eq!(back.tensors.len(), trained.tensors.len());
    let Some(mut fresh) = model() else {
        return;
    };
    fresh.set_lora(Some(&back)).unwrap();
    let exported = run.nll(&mut fresh);
    eprintln!("NLL of the exported adapter on a fresh model: {exported:.6} (trained {last:.6})");
    assert!(
        (exported - last).abs() < 1e-5,
        "the exported adapter is the trained one: {exported} vs {last}"
    );
}

/// The training pass's log-probabilities (from its kept hidden states, what a clipped policy
/// loss compares with the sampler's) equal the inference path's.
#[test]
fn training_log_probs_equal_inference() {
    let Some(mut m) = model() else {
        return;
    };
    let tokens: Vec<u32> = (0..21).map(|i| (i * 37 + 11) % 500).collect();
    let targets: Vec<u32> = tokens.iter().map(|t| (t * 7 + 3) % 512).collect();
    let fwd = pollster::block_on(m.forward_for_training(&tokens, ActivationMode::Keep)).unwrap();
    let train = pollster::block_on(m.training_log_probs(&fwd, &targets)).unwrap();
    m.truncate(0);
    let infer = pollster::block_on(m.log_probs(0, &tokens, &targets)).unwrap();
    assert_eq!(train.len(), tokens.len());
    let worst = train
        .iter()
        .zip(&infer)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        worst < 1e-4,
        "max |Δ log p| {worst}: {train:?} vs {infer:?}"
    );
}

/// The base model's log-probabilities with the adapter still loaded (a KL penalty's
/// reference) equal those of the same model with no adapter, and differ from the adapted
/// model's; the adapter is untouched afterwards. 21 tokens in steps of 8: steps of 8, 8 and 5.
#[test]
fn base_log_probs_leave_the_adapter_out() {
    let Some(mut m) = model() else {
        return;
    };
    let tokens: Vec<u32> = (0..21).map(|i| (i * 41 + 5) % 500).collect();
    let targets: Vec<u32> = tokens.iter().map(|t| (t * 3 + 1) % 512).collect();
    let run = |m: &mut Model, base: bool| {
        m.truncate(0);
        if base {
            pollster::block_on(m.base_log_probs(0, &tokens, &targets)).unwrap()
        } else {
            pollster::block_on(m.log_probs(0, &tokens, &targets)).unwrap()
        }
    };
    let adapted = run(&mut m, false);
    let base = run(&mut m, true);
    assert_eq!(
        run(&mut m, false),
        adapted,
        "the adapter is still on afterwards"
    );
    m.set_lora(None).unwrap();
    let plain = run(&mut m, false);
    let worst = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    };
    assert!(
        worst(&base, &plain) < 1e-5,
        "base vs no adapter: max |Δ log p| {}",
        worst(&base, &plain)
    );
    assert!(
        worst(&base, &adapted) > 1e-3,
        "the fixture's adapter moves the log-probabilities: {}",
        worst(&base, &adapted)
    );
}

/// A gradient holding a NaN (here from a NaN loss weight) is a typed error that changes
/// nothing: the adapter, its moments and the step count stay as they were, the gradient
/// buffers are cleared, and the next finite step goes ahead as if the bad one never came.
#[test]
fn a_gradient_that_is_not_finite_changes_nothing() {
    let Some(mut m) = model() else {
        return;
    };
    let tokens: Vec<u32> = (1..12).collect();
    let mut targets = tokens[1..].to_vec();
    targets.push(0);
    let good = Run {
        tokens: tokens.clone(),
        targets: targets.clone(),
        coef: vec![-0.1; tokens.len()],
    };
    let config = AdamWConfig::default();
    let grads = LoraGradients::new(&mut m).unwrap();
    let mut opt = LoraAdamW::new(&mut m, config).unwrap();
    good.step(&mut m, &grads, &mut opt);
    let before = pollster::block_on(opt.state(&mut m)).unwrap();

    let mut coef = vec![-0.1; tokens.len()];
    coef[3] = f32::NAN;
    let fwd = pollster::block_on(m.forward_for_training(&tokens, ActivationMode::Keep)).unwrap();
    pollster::block_on(m.lora_backward(&fwd, &targets, &coef, &grads)).unwrap();
    match pollster::block_on(opt.step(&mut m, &grads, LR)) {
        Err(lilypad_engine::EngineError::NonFiniteGradient(norm)) => assert!(!norm.is_finite()),
        other => panic!("a NaN gradient must be refused: {other:?}"),
    }
    let after = pollster::block_on(opt.state(&mut m)).unwrap();
    assert!(after == before, "nothing changed");

    // The same good step from here equals a run that never saw the NaN.
    good.step(&mut m, &grads, &mut opt);
    let Some(mut m2) = model() else {
        return;
    };
    let grads2 = LoraGradients::new(&mut m2).unwrap();
    let mut opt2 = LoraAdamW::new(&mut m2, config).unwrap();
    good.step(&mut m2, &grads2, &mut opt2);
    good.step(&mut m2, &grads2, &mut opt2);
    assert!(
        pollster::block_on(opt.state(&mut m)).unwrap()
            == pollster::block_on(opt2.state(&mut m2)).unwrap(),
        "the bad step left no trace"
    );
}

/// Profiling the training passes times their kernels without changing what they compute:
/// the same gradients bit for bit, and the kernels of each pass named in its times.
#[test]
fn profiled_training_passes_compute_the_same_gradients() {
    let Some(mut m) = model() else {
        return;
    };
    let tokens: Vec<u32> = (0..19).map(|i| (i * 53 + 7) % 500).collect();
    let mut targets = tokens[1..].to_vec();
    targets.push(0);
    let coef = vec![-0.05; tokens.len()];
    let gradients = |m: &mut Model| {
        let fwd =
            pollster::block_on(m.forward_for_training(&tokens, ActivationMode::Keep)).unwrap();
        pollster::block_on(m.lora_gradients(&fwd, &targets, &coef)).unwrap()
    };
    let plain = gradients(&mut m);
    assert!(m.take_kernel_times().is_none(), "not profiled unless asked");
    m.profile_kernels(true);
    let profiled = gradients(&mut m);
    let times = m.take_kernel_times().unwrap();
    m.profile_kernels(false);
    assert!(plain == profiled, "profiling changes no gradient");
    let kernels: Vec<&str> = times.slowest_first().iter().map(|k| k.0).collect();
    for kernel in [
        "matvec",
        "attention",
        "matvec_backward",
        "attention_backward_dq",
        "attention_backward_dkv",
        "matmul",
    ] {
        assert!(kernels.contains(&kernel), "{kernel} timed: {times}");
    }
    assert!(times.total() > 0.0, "{times}");
}
