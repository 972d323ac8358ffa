//! `lilypad`: run GGUF models on the GPU from the command line.

mod agent_stdio;
mod bench;
mod converse;
mod solve;
mod synth;
mod tokenize;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use lilypad_cli::checkpoint::Quantize;
use lilypad_cli::{Loaded, ModelArgs, open_file, open_tokenizer};
use lilypad_engine::{AdapterOptions, GpuContext, Logits, ModelConfig, ModelOptions};
use lilypad_gguf::GgufFile;
use lilypad_tokenizer::ChatMessage;

#[derive(Parser)]
#[command(
    name = "lilypad",
    version,
    about = "Quantized LLM inference on WebGPU-class GPUs (Vulkan, Metal, DX12)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Architecture, tensors, quant types, parameter count and the GPU memory a model needs.
    Inspect {
        /// GGUF path or URL, or a Hugging Face checkpoint folder.
        model: String,
        /// What a checkpoint folder's matrices are quantized to on load.
        #[arg(long, value_enum, default_value_t)]
        quantize: Quantize,
        /// List every tensor.
        #[arg(long)]
        tensors: bool,
        /// Context length to plan memory for (default: the model's, at most 4096).
        #[arg(long)]
        context: Option<u32>,
        /// The KV cache's element type to plan for.
        #[arg(long, default_value = "f16", value_name = "f16|f32")]
        kv_cache: lilypad_engine::DType,
        /// Also plan a training forward pass over sequences of these lengths: the memory of
        /// keeping every layer's activations, and of keeping only layer inputs and
        /// recomputing (checkpointing).
        #[arg(long, value_delimiter = ',')]
        train_tokens: Vec<u32>,
    },
    /// Generate text from a prompt, streaming tokens.
    Generate(converse::GenerateArgs),
    /// Chat interactively (the conversation's state is reused between turns).
    Chat(converse::ChatArgs),
    /// Log-probabilities of a text's tokens and the top logits at each position.
    Score {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, short)]
        text: String,
        #[arg(long)]
        chat: bool,
        /// Top logits to report per position.
        #[arg(long, default_value_t = 8)]
        top: usize,
        #[arg(long)]
        json: bool,
    },
    /// Copy bandwidth, each quantized matvec's bandwidth and ratio, prefill and decode speed.
    Bench {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(long, default_value_t = 128)]
        prompt_tokens: usize,
        #[arg(long, default_value_t = 32)]
        gen_tokens: usize,
        /// Also time each kernel of one prefill step and one decode step on its own (with
        /// --batch, of one step of each batch size).
        #[arg(long)]
        profile: bool,
        /// Only batched decode: total tokens/s with each of these numbers of sequences
        /// decoded together (e.g. 1,2,4,8,16), measured in one run.
        #[arg(long, value_delimiter = ',', value_name = "SIZES")]
        batch: Vec<u32>,
        /// Also run llama.cpp's llama-bench (this path) on the same GGUF with the same prompt
        /// and generation lengths and all CPU cores, and print lilypad's speed as a ratio to it
        /// (scripts/llama-cpp/build.sh builds it).
        #[arg(long, value_name = "PATH")]
        llama_bench: Option<std::path::PathBuf>,
        /// Also run llama.cpp's Vulkan build (this llama-bench) with every layer on the GPU,
        /// on lilypad's adapter where it is a CPU one (lavapipe), and print the same ratios
        /// (scripts/llama-cpp/build.sh --vulkan builds it).
        #[arg(long, value_name = "PATH")]
        llama_bench_vulkan: Option<std::path::PathBuf>,
        /// Write every figure of the run to this file as JSON.
        #[arg(long, value_name = "FILE")]
        json: Option<std::path::PathBuf>,
    },
    /// List GPU adapters (pick one with LILYPAD_ADAPTER=name-or-index).
    Adapters,
    /// Text to token ids (or ids to text with --decode) with the model's tokenizer; no GPU.
    Tokenize(tokenize::TokenizeArgs),
    /// Let the coding agent work on a task in a repository folder; writes a patch and a trajectory.
    Solve(solve::SolveArgs),
    /// Write a GGUF with FrogNano-4B's shapes and random quantized weights (for benchmarks).
    Synth(synth::SynthArgs),
    /// The agent for editors: JSON lines on stdin/stdout, working on an in-memory snapshot.
    AgentStdio(agent_stdio::AgentArgs),
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {}", lilypad_cli::error_message(&e));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Inspect {
            model,
            quantize,
            tensors,
            context,
            kv_cache,
            train_tokens,
        } => inspect(&model, quantize, tensors, context, kv_cache, &train_tokens),
        Command::Generate(args) => converse::generate(&args),
        Command::Chat(args) => converse::chat(&args),
        Command::Score {
            model,
            text,
            chat,
            top,
            json,
        } => score(&model, &text, chat, top, json),
        Command::Bench {
            model,
            prompt_tokens,
            gen_tokens,
            profile,
            batch,
            llama_bench,
            llama_bench_vulkan,
            json,
        } => {
            if !batch.is_empty() {
                if llama_bench.is_some() || llama_bench_vulkan.is_some() || json.is_some() {
                    bail!(
                        "--llama-bench, --llama-bench-vulkan and --json go with the whole-model benchmark, not --batch"
                    );
                }
                let max = ModelOptions::default().max_batch;
                if let Some(b) = batch.iter().find(|&&b| b == 0 || b > max) {
                    bail!("--batch {b}: batch sizes go from 1 to {max}");
                }
                let sequences = batch.iter().copied().max().unwrap_or(1);
                let mut lm = Loaded::open_with_progress(&model, sequences, &mut |_| {})?;
                return bench::run_batch(
                    &mut lm.model,
                    &lm.tok,
                    &batch,
                    prompt_tokens,
                    gen_tokens,
                    profile,
                );
            }
            let mut lm = Loaded::open(&model)?;
            bench::run(
                &mut lm.model,
                &lm.file,
                &lm.src,
                &lm.tok,
                &bench::Options {
                    prompt_tokens,
                    gen_tokens,
                    profile,
                    model_path: model.model.clone(),
                    llama_bench,
                    llama_bench_vulkan,
                    json,
                },
            )
        }
        Command::Adapters => {
            for (i, a) in pollster::block_on(lilypad_engine::gpu::list_adapters())
                .iter()
                .enumerate()
            {
                println!(
                    "{i}: {} ({:?}, {:?}) {} {}",
                    a.name, a.backend, a.device_type, a.driver, a.driver_info
                );
            }
            Ok(())
        }
        Command::Tokenize(args) => tokenize::run(&args),
        Command::Solve(args) => solve::run(&args),
        Command::Synth(args) => synth::run(&args),
        Command::AgentStdio(args) => agent_stdio::run(&args),
    }
}

/// Per sequence length, the activation memory of a training forward pass both ways, and
/// the total with the weights and that context's KV cache and recurrent state.
fn print_training_plans(file: &GgufFile, cfg: &ModelConfig, lengths: &[u32]) {
    use lilypad_engine::ActivationPlan;
    use lilypad_engine::error::human_bytes;
    // A trainer loads the model with the longest steps the engine takes.
    let step = lilypad_engine::ops::MAX_STEP_TOKENS as u32;
    for &tokens in lengths {
        let plan = ActivationPlan::new(&cfg.activation_shape(), tokens, step);
        // The model itself at this context: weights, KV cache, recurrent state, inference
        // activations and the logits of a step.
        let kv = ModelOptions::default().kv_cache;
        let fixed = cfg.memory_plan(file, tokens, step, kv, false).total();
        println!(
            "training {tokens} tokens (steps of {}): activations kept {} / checkpointed {}; \
             with the model at this context {} / {}",
            plan.step_tokens,
            human_bytes(plan.keep),
            human_bytes(plan.checkpoint),
            human_bytes(fixed + plan.keep),
            human_bytes(fixed + plan.checkpoint),
        );
    }
}

fn inspect(
    spec: &str,
    quantize: Quantize,
    list: bool,
    context: Option<u32>,
    kv_cache: lilypad_engine::DType,
    train_tokens: &[u32],
) -> Result<()> {
    let (path, _src, file) = open_file(spec, None, quantize, false)?;
    let md = &file.metadata;
    println!(
        "file:         {} ({} bytes, GGUF v{})",
        path.display(),
        file.file_len,
        file.version
    );
    println!("architecture: {}", md.architecture().unwrap_or("(none)"));
    if let Ok(name) = md.str("general.name") {
        println!("name:         {name}");
    }
    let mut by_type = std::collections::BTreeMap::<&str, (usize, u64)>::new();
    for t in &file.tensors {
        let e = by_type.entry(t.ty.name()).or_default();
        e.0 += 1;
        e.1 += t.n_bytes();
    }
    println!("tensors:      {}", file.tensors.len());
    for (ty, (n, bytes)) in &by_type {
        println!(
            "  {ty:>6}: {n:4} tensors, {}",
            lilypad_engine::error::human_bytes(*bytes)
        );
    }
    println!(
        "parameters:   {} ({:.1} M)",
        file.parameter_count(),
        file.parameter_count() as f64 / 1e6
    );
    match ModelConfig::from_gguf(&file) {
        Ok(cfg) => {
            println!("{}", cfg.summary());
            let ctx = context.unwrap_or(cfg.context_train().min(4096));
            let max_batch = ModelOptions::default().max_batch;
            let plan = cfg.memory_plan(&file, ctx, max_batch, kv_cache, false);
            println!("GPU memory:   {plan} at context {ctx}, {kv_cache} KV cache");
            println!(
                "largest single buffer: {}",
                lilypad_engine::error::human_bytes(plan.largest_unsplittable)
            );
            // Whether the default adapter can hold it (wgpu reports limits, not free memory).
            match pollster::block_on(GpuContext::new(&AdapterOptions::from_env())) {
                Ok(gpu) => match plan.check_fits(&gpu, ctx) {
                    Ok(()) => println!("fits:         yes, within {}'s limits", gpu.adapter.name),
                    Err(e) => println!("fits:         NO: {e}"),
                },
                Err(e) => println!("fits:         unknown (no GPU adapter: {e})"),
            }
            print_training_plans(&file, &cfg, train_tokens);
        }
        Err(e) => println!("runnable:     no: {e}"),
    }
    match open_tokenizer(&path, &file) {
        Ok(t) => println!(
            "tokenizer:    {} tokens, BOS {:?} (added: {}), EOS {:?}, chat template: {}",
            t.vocab_size(),
            t.bos.and_then(|b| t.token(b)),
            t.add_bos,
            t.eos.and_then(|b| t.token(b)),
            if t.chat_template.is_some() {
                "yes"
            } else {
                "no"
            }
        ),
        Err(e) => println!("tokenizer:    {e}"),
    }
    if list {
        for t in &file.tensors {
            println!("  {:40} {:>6} {:?}", t.name, t.ty.name(), t.dims);
        }
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct TopLogit {
    id: u32,
    token: String,
    logit: f32,
}

#[derive(serde::Serialize)]
struct Position {
    /// Index of the token whose next-token distribution this is.
    pos: usize,
    /// The token that actually follows, and its log-probability.
    next: Option<u32>,
    logprob: Option<f64>,
    top: Vec<TopLogit>,
}

#[derive(serde::Serialize)]
struct ScoreReport {
    text: String,
    tokens: Vec<u32>,
    positions: Vec<Position>,
    mean_logprob: f64,
    perplexity: f64,
}

fn score(args: &ModelArgs, text: &str, chat: bool, top: usize, json: bool) -> Result<()> {
    let mut lm = Loaded::open(args)?;
    let text = if chat {
        lm.render_chat(None, &[ChatMessage::new("user", text)])?
    } else {
        text.to_string()
    };
    let ids = lm.tok.encode(&text, true)?;
    if ids.is_empty() {
        bail!("the text has no tokens");
    }
    let vocab = lm.model.config.vocab() as usize;
    let logits = pollster::block_on(lm.model.eval(&ids, Logits::All))?;
    let mut positions = Vec::new();
    let mut sum = 0.0;
    for (pos, row) in logits.chunks(vocab).enumerate() {
        let m = row.iter().cloned().fold(f32::MIN, f32::max) as f64;
        let lse = m + row.iter().map(|&l| (l as f64 - m).exp()).sum::<f64>().ln();
        let next = ids.get(pos + 1).copied();
        let logprob = next.map(|n| row[n as usize] as f64 - lse);
        sum += logprob.unwrap_or(0.0);
        let mut idx: Vec<usize> = (0..vocab).collect();
        let k = top.min(vocab);
        idx.select_nth_unstable_by(k.saturating_sub(1), |&a, &b| row[b].total_cmp(&row[a]));
        idx.truncate(k);
        idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        let top = idx
            .iter()
            .map(|&i| TopLogit {
                id: i as u32,
                token: lm.tok.decode(&[i as u32]).unwrap_or_default(),
                logit: row[i],
            })
            .collect();
        positions.push(Position {
            pos,
            next,
            logprob,
            top,
        });
    }
    let n = (ids.len() - 1).max(1) as f64;
    let report = ScoreReport {
        text,
        tokens: ids,
        positions,
        mean_logprob: sum / n,
        perplexity: (-sum / n).exp(),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for p in &report.positions {
            let cur = lm.tok.decode(&[report.tokens[p.pos]]).unwrap_or_default();
            let best = p
                .top
                .first()
                .map(|t| format!("{:?} {:.3}", t.token, t.logit))
                .unwrap_or_default();
            println!(
                "{:5} {:20} logprob(next) {:>9}  top: {best}",
                p.pos,
                format!("{cur:?}"),
                p.logprob.map(|l| format!("{l:.4}")).unwrap_or("-".into())
            );
        }
        println!(
            "tokens {}, mean logprob {:.4}, perplexity {:.3}",
            report.tokens.len(),
            report.mean_logprob,
            report.perplexity
        );
    }
    Ok(())
}
