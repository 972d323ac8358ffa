//! The language-model side of the agent: messages in, streamed text out. An implementation
//! renders the conversation with its chat template and keeps its state between calls, so a
//! turn only evaluates what is new.

use std::future::Future;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Message;

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: u32,
    pub seed: u64,
    /// 1 = off; llama.cpp's repetition penalty over the recent tokens.
    #[serde(default = "no_repeat_penalty")]
    pub repeat_penalty: f32,
    /// 0 = off; subtracted once from each recent token's logit.
    #[serde(default)]
    pub presence_penalty: f32,
}

fn no_repeat_penalty() -> f32 {
    1.0
}

impl Default for Sampling {
    /// FrogNano's evaluation settings.
    fn default() -> Self {
        Self {
            temperature: 0.6,
            top_p: 0.95,
            top_k: 20,
            seed: 0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
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
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
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
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
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
    /// Generated tokens that a draft proposed and the model kept (speculative decoding): the
    /// generation took `generated_tokens - draft_accepted` steps of the model.
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(optional, as = "Option<usize>"))]
    pub draft_accepted: usize,
}

#[derive(Debug, Error)]
pub enum ModelError {
    /// The conversation no longer fits the context window.
    #[error("the conversation ({needed} tokens) does not fit the context window ({capacity})")]
    ContextFull { needed: usize, capacity: usize },
    /// The prompt alone is longer than the context window.
    #[error(
        "the prompt is {prompt} tokens, but the context holds {context}: shorten the prompt or give a longer context"
    )]
    PromptTooLong { prompt: usize, context: usize },
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

#[cfg(test)]
mod tests {
    use super::Sampling;

    #[test]
    fn sampling_recorded_without_penalties_reads_as_penalties_off() {
        let s: Sampling =
            serde_json::from_str(r#"{"temperature":0.6,"top_p":0.95,"top_k":20,"seed":3}"#)
                .unwrap();
        assert_eq!((s.repeat_penalty, s.presence_penalty), (1.0, 0.0));
        assert_eq!(s.seed, 3);
    }
}
