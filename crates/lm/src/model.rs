//! The language-model side of the agent: messages in, streamed text out. An implementation
//! renders the conversation with its chat template and keeps its state between calls, so a
//! turn only evaluates what is new.

use std::future::Future;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Message;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: u32,
    pub seed: u64,
}

impl Default for Sampling {
    /// FrogNano's evaluation settings.
    fn default() -> Self {
        Self {
            temperature: 0.6,
            top_p: 0.95,
            top_k: 20,
            seed: 0,
        }
    }
}

pub struct Request<'a> {
    pub messages: &'a [Message],
    /// OpenAI-style function schemas, passed to the chat template as `tools`.
    pub tools: &'a [serde_json::Value],
    pub sampling: Sampling,
    pub max_tokens: usize,
    pub enable_thinking: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its turn.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The context window filled up.
    ContextFull,
    /// The caller asked to stop.
    Aborted,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// The raw text the model generated (thinking and tool calls included, end token excluded).
    pub text: String,
    pub finish: FinishReason,
    /// Length of the rendered prompt in tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens evaluated for this call; the rest came from the model's cached state.
    pub prefilled_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

#[derive(Debug, Error)]
pub enum ModelError {
    /// The conversation no longer fits the context window.
    #[error("the conversation ({needed} tokens) does not fit the context window ({capacity})")]
    ContextFull { needed: usize, capacity: usize },
    #[error("{0}")]
    Other(String),
}

/// Streams tokens as they are generated; returning false stops generation.
pub type TokenSink<'a> = dyn FnMut(&str) -> bool + 'a;

/// How far the model has read a prompt: `done` of the `total` tokens it has to evaluate
/// (those its cached state did not hold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptProgress {
    pub done: usize,
    pub total: usize,
}

/// Hears of a long prompt's progress; returning false stops before the first token.
pub type ProgressSink<'a> = dyn FnMut(PromptProgress) -> bool + 'a;

pub trait LanguageModel {
    /// A short name for trajectories (e.g. the model file's name).
    fn name(&self) -> String;

    /// Context window in tokens.
    fn context_length(&self) -> usize;

    /// Generates the assistant's next message for `request`.
    fn complete(
        &mut self,
        request: &Request<'_>,
        on_text: &mut TokenSink<'_>,
    ) -> impl Future<Output = Result<Completion, ModelError>>;
}
