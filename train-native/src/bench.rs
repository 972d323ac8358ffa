//! `train-native bench-step`: one training step of a model on this machine's GPU, timed by
//! part (the training forward pass, the current policy's log-probabilities, the backward
//! pass, the optimizer), with a random LoRA adapter of a given rank on every linear and
//! random tokens, so it runs on any GGUF without data.

use std::time::Instant;

use anyhow::Result;
use lilypad_engine::{
    ActivationMode, AdamWConfig, AdapterOptions, GpuContext, LoraAdamW, LoraGradients, Model,
    ModelOptions,
};
use lilypad_gguf::peft::{LoraAdapter, LoraTensor};
use rand::{Rng, SeedableRng, rngs::StdRng};

#[derive(clap::Args)]
pub struct BenchStepArgs {
    /// A GGUF file (or a name `lilypad` resolves).
    #[arg(long, short)]
    model: String,
    /// Tokens in the sequence.
    #[arg(long, default_value_t = 512)]
    tokens: u32,
    /// Tokens per step of the forward and backward passes (the model's batch; fewer where a
    /// backward kernel cannot take as many on this adapter).
    #[arg(long, default_value_t = 64)]
    step_tokens: u32,
    /// The adapter's rank (on every linear).
    #[arg(long, default_value_t = 16)]
    rank: usize,
    /// Training steps timed (the first also builds every kernel).
    #[arg(long, default_value_t = 3)]
    steps: usize,
    /// AdamW's learning rate.
    #[arg(long, default_value_t = 1e-4)]
    lr: f32,
    /// First check the gradient against finite differences of the loss along it (the
    /// inference path evaluates the loss with the adapter moved each way).
    #[arg(long)]
    check_gradient: bool,
    /// Adapt only the linears whose weight name contains this (`blk.29.ffn_down`).
    #[arg(long)]
    only: Option<String>,
    /// Then one more step with every kernel timed: per-kernel times of the forward pass,
    /// the log-probabilities and the backward pass.
    #[arg(long)]
    profile: bool,
}

pub fn bench_step(args: &BenchStepArgs) -> Result<()> {
    let (_, src, file) = lilypad_cli::open_file(
        &args.model,
        None,
        lilypad_cli::checkpoint::Quantize::default(),
        false,
    )?;
    let ctx = pollster::block_on(GpuContext::new(&AdapterOptions::from_env()))?;
    println!("adapter: {}", ctx.adapter);
    let opts = ModelOptions {
        context: Some(args.tokens),
        max_batch: args.step_tokens,
        ..Default::default()
    };
    let mut model = pollster::block_on(Model::load(ctx.clone(), &file, &src, &opts, &mut |_| {}))?;
    let mut rng = StdRng::seed_from_u64(7);
    let tensors: Vec<LoraTensor> = model
        .lora_targets()
        .into_iter()
        .filter(|(t, _, _)| args.only.as_ref().is_none_or(|o| t.contains(o.as_str())))
        .map(|(target, n_out, n_in)| {
            let mut normal = |n: usize, std: f32| -> Vec<f32> {
                (0..n)
                    .map(|_| (rng.random::<f32>() * 2.0 - 1.0) * std * 1.7)
                    .collect()
            };
            LoraTensor {
                a: normal(args.rank * n_in, 1.0 / (n_in as f32).sqrt()),
                b: normal(n_out * args.rank, 0.01),
                target,
                rank: args.rank,
                n_in,
                n_out,
            }
        })
        .collect();
    let params: usize = tensors.iter().map(|t| t.a.len() + t.b.len()).sum();
    let adapter = LoraAdapter {
        rank: args.rank,
        alpha: 2.0 * args.rank as f32,
        scale: 2.0,
        base_model: None,
        tensors,
    };
    model.set_lora(Some(&adapter))?;
    println!(
        "model: {} layers, LoRA rank {} on {} linears ({:.2} M parameters); {} tokens in steps of {}",
        model.config.activation_shape().layers.len(),
        args.rank,
        adapter.tensors.len(),
        params as f64 / 1e6,
        args.tokens,
        model.training_step_tokens()
    );
    let vocab = model.config.vocab();
    let tokens: Vec<u32> = (0..args.tokens)
        .map(|_| rng.random_range(0..vocab))
        .collect();
    let mut targets = tokens[1..].to_vec();
    targets.push(0);
    let coef = vec![-1.0 / args.tokens as f32; tokens.len()];
    let grads = LoraGradients::new(&mut model)?;
    let mut opt = LoraAdamW::new(&mut model, AdamWConfig::default())?;
    if args.check_gradient {
        check_gradient(&mut model, &adapter, &tokens, &targets, &coef)?;
    }
    println!("step  forward  log-probs  backward  optimizer  total  tokens/s");
    for step in 1..=args.steps {
        let t0 = Instant::now();
        let fwd = pollster::block_on(model.forward_for_training(&tokens, ActivationMode::Keep))?;
        ctx.wait()?;
        let t1 = Instant::now();
        let lp = pollster::block_on(model.training_log_probs(&fwd, &targets))?;
        let t2 = Instant::now();
        pollster::block_on(model.lora_backward(&fwd, &targets, &coef, &grads))?;
        ctx.wait()?;
        let t3 = Instant::now();
        let stats = pollster::block_on(opt.step(&mut model, &grads, args.lr))?;
        ctx.wait()?;
        let t4 = Instant::now();
        let s = |a: Instant, b: Instant| (b - a).as_secs_f64();
        let nll = -lp.iter().map(|&v| v as f64).sum::<f64>() / lp.len() as f64;
        println!(
            "{step:4}  {:7.2}  {:9.2}  {:8.2}  {:9.3}  {:5.2}  {:8.1}   (NLL {nll:.3}, gradient norm {:.3})",
            s(t0, t1),
            s(t1, t2),
            s(t2, t3),
            s(t3, t4),
            s(t0, t4),
            args.tokens as f64 / s(t0, t4),
            stats.grad_norm
        );
    }
    if args.profile {
        model.profile_kernels(true);
        let part = |what: &str, model: &mut Model| {
            let times = model.take_kernel_times().unwrap_or_default();
            print!("profile of the {what}: {times}");
        };
        let fwd = pollster::block_on(model.forward_for_training(&tokens, ActivationMode::Keep))?;
        part("forward pass", &mut model);
        pollster::block_on(model.training_log_probs(&fwd, &targets))?;
        part("log-probabilities", &mut model);
        pollster::block_on(model.lora_backward(&fwd, &targets, &coef, &grads))?;
        part("backward pass", &mut model);
        model.profile_kernels(false);
    }
    Ok(())
}

/// L = Σ coef · log p through the inference path, with `adapter` on the model.
fn loss(
    model: &mut Model,
    adapter: &LoraAdapter,
    tokens: &[u32],
    targets: &[u32],
    coef: &[f32],
) -> Result<f64> {
    model.set_lora(Some(adapter))?;
    model.truncate(0);
    let lp = pollster::block_on(model.log_probs(0, tokens, targets))?;
    Ok(lp
        .iter()
        .zip(coef)
        .map(|(&l, &c)| l as f64 * c as f64)
        .sum())
}

/// The gradient's norm |G| against (L(θ + εĜ) − L(θ − εĜ)) / 2ε, the loss's slope along it.
fn check_gradient(
    model: &mut Model,
    adapter: &LoraAdapter,
    tokens: &[u32],
    targets: &[u32],
    coef: &[f32],
) -> Result<()> {
    let fwd = pollster::block_on(model.forward_for_training(tokens, ActivationMode::Keep))?;
    let grads = pollster::block_on(model.lora_gradients(&fwd, targets, coef))?;
    let train = pollster::block_on(model.training_log_probs(&fwd, targets))?;
    let train_loss: f64 = train
        .iter()
        .zip(coef)
        .map(|(&l, &c)| l as f64 * c as f64)
        .sum();
    println!(
        "loss: training pass {train_loss:.6}, inference path {:.6}",
        loss(model, adapter, tokens, targets, coef)?
    );
    let norm = grads
        .iter()
        .flat_map(|g| g.a.iter().chain(&g.b))
        .map(|&v| v as f64 * v as f64)
        .sum::<f64>()
        .sqrt();
    let moved = |eps: f64| {
        let mut a = adapter.clone();
        for t in &mut a.tensors {
            let g = grads
                .iter()
                .find(|g| g.target == t.target)
                .expect("a gradient per tensor");
            for (p, d) in t.a.iter_mut().zip(&g.a).chain(t.b.iter_mut().zip(&g.b)) {
                *p += (eps * *d as f64 / norm) as f32;
            }
        }
        a
    };
    for eps in [1e-1, 3e-2, 1e-2] {
        let up = loss(model, &moved(eps), tokens, targets, coef)?;
        let down = loss(model, &moved(-eps), tokens, targets, coef)?;
        println!(
            "gradient check: |G| {norm:.5}, slope along G at ε {eps}: {:.5}",
            (up - down) / (2.0 * eps)
        );
    }
    model.set_lora(Some(adapter))?;
    Ok(())
}
