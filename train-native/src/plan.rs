//! `train-native plan`: the GPU memory a training configuration needs, before anything is
//! loaded: the model at the sequence's length, the activations (kept, or checkpointed: each
//! layer's input only, the layer run again before its backward), the LoRA adapter with its
//! gradient and AdamW moments, and the backward pass's buffers. Read from the GGUF's header
//! alone, with the engine's own sizing (the same sums its allocations are tested against).

use anyhow::{Result, bail};
use lilypad_engine::backward::BackwardBuffers;
use lilypad_engine::error::human_bytes;
use lilypad_engine::{ActivationPlan, ModelConfig, ModelOptions};

#[derive(clap::Args)]
pub struct PlanArgs {
    /// A GGUF file (or a name `lilypad` resolves); only its header is read.
    #[arg(long, short)]
    model: String,
    /// Sequence lengths to plan for.
    #[arg(long, value_delimiter = ',', default_value = "8192,16384")]
    tokens: Vec<u32>,
    /// LoRA ranks to plan for (on every linear).
    #[arg(long, value_delimiter = ',', default_value = "16,32,64")]
    rank: Vec<u32>,
    /// Tokens per step of the forward and backward passes.
    #[arg(long, default_value_t = 512)]
    step_tokens: u32,
}

/// The memory of one configuration, by part.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub model: u64,
    /// Activations kept, and checkpointed.
    pub kept: u64,
    pub checkpointed: u64,
    pub adapter: u64,
    pub backward: u64,
}

impl Plan {
    /// The total with the activations kept, and checkpointed.
    pub fn totals(&self) -> (u64, u64) {
        let rest = self.model + self.adapter + self.backward;
        (rest + self.kept, rest + self.checkpointed)
    }
}

/// Bytes for `tokens` tokens in steps of `step` with a rank-`rank` adapter on every linear.
pub fn plan(
    cfg: &ModelConfig,
    file: &lilypad_gguf::GgufFile,
    tokens: u32,
    step: u32,
    rank: u32,
) -> Plan {
    let shape = cfg.activation_shape();
    // The engine pads ranks to whole groups of eight (its matrix products read eight at a time).
    let padded = rank.next_multiple_of(lilypad_engine::linear::RANK_MULTIPLE as u32) as u64;
    let params: u64 = cfg
        .lora_targets()
        .iter()
        .map(|(_, n_out, n_in)| padded * (*n_out + *n_in) as u64)
        .sum();
    let activations = ActivationPlan::new(&shape, tokens, step);
    Plan {
        model: cfg
            .memory_plan(file, tokens, step, ModelOptions::default().kv_cache, false)
            .total(),
        kept: activations.keep,
        checkpointed: activations.checkpoint,
        // The adapter, its gradient and AdamW's two moments, f32.
        adapter: 4 * 4 * params,
        backward: BackwardBuffers::planned_bytes(&shape, cfg.vocab(), step, tokens, padded as u32),
    }
}

pub fn plan_command(args: &PlanArgs) -> Result<()> {
    let (_, _, file) = lilypad_cli::open_file(
        &args.model,
        None,
        lilypad_cli::checkpoint::Quantize::default(),
        true,
    )?;
    let cfg = ModelConfig::from_gguf(&file)?;
    if args.step_tokens == 0 || args.tokens.contains(&0) || args.rank.contains(&0) {
        bail!("tokens, ranks and --step-tokens must be positive");
    }
    println!("{}", cfg.summary());
    println!(
        "LoRA on {} linears; steps of {} tokens; activations kept, or checkpointed (each layer \
         run again before its backward: one more forward pass)",
        cfg.lora_targets().len(),
        args.step_tokens
    );
    println!(
        "{:>8} {:>5}  {:>10} {:>12} {:>12} {:>18} {:>10} {:>11} {:>11}",
        "tokens",
        "rank",
        "model",
        "kept",
        "checkpointed",
        "adapter+grad+Adam",
        "backward",
        "total kept",
        "total ckpt"
    );
    for &tokens in &args.tokens {
        for &rank in &args.rank {
            let p = plan(&cfg, &file, tokens, args.step_tokens.min(tokens), rank);
            let (kept, checkpointed) = p.totals();
            println!(
                "{tokens:>8} {rank:>5}  {:>10} {:>12} {:>12} {:>18} {:>10} {:>11} {:>11}",
                human_bytes(p.model),
                human_bytes(p.kept),
                human_bytes(p.checkpointed),
                human_bytes(p.adapter),
                human_bytes(p.backward),
                human_bytes(kept),
                human_bytes(checkpointed)
            );
        }
    }
    Ok(())
}
