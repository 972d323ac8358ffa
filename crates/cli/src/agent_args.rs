//! The agent's command-line settings, shared by `lilypad solve` and `train-native eval`.

use clap::Args;
use lilypad_agent::{AgentConfig, Sampling};

/// How the agent runs: its step and token budgets and the sampling of its replies.
#[derive(Args, Clone, Debug)]
pub struct AgentArgs {
    #[arg(long, default_value_t = AgentConfig::default().max_steps)]
    pub max_steps: usize,
    /// Token budget of one model reply.
    #[arg(long, default_value_t = AgentConfig::default().max_tokens_per_step)]
    pub max_tokens_per_step: usize,
    /// Ask the model to answer without a thinking phase.
    #[arg(long)]
    pub no_thinking: bool,
    #[arg(long, default_value_t = Sampling::default().temperature)]
    pub temperature: f32,
    #[arg(long, default_value_t = Sampling::default().top_p)]
    pub top_p: f32,
    #[arg(long, default_value_t = Sampling::default().top_k)]
    pub top_k: u32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl AgentArgs {
    /// The loop's configuration, sampling with `seed` (the `--seed` itself, or one derived
    /// from it per run).
    pub fn config(&self, seed: u64) -> AgentConfig {
        AgentConfig {
            max_steps: self.max_steps,
            max_tokens_per_step: self.max_tokens_per_step,
            enable_thinking: !self.no_thinking,
            sampling: Sampling {
                temperature: self.temperature,
                top_p: self.top_p,
                top_k: self.top_k,
                seed,
                ..Sampling::default()
            },
            ..AgentConfig::default()
        }
    }
}
