//! The language-model interface the agent, the chat session and the browser bindings share:
//! OpenAI-style messages in, streamed text and a [`Completion`] out. It knows nothing about
//! GPUs, tokenizers or tools, so every side of it stays small.

mod message;
mod model;

pub use message::{Message, Role, ToolCall};
pub use model::{
    Completion, FinishReason, LanguageModel, ModelError, ProgressSink, PromptProgress, Request,
    Sampling, TokenSink,
};
