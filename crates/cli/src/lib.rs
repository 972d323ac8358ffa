//! Model loading and agent settings shared by the `lilypad` command line and the
//! `train-native` trainer.

mod agent_args;
pub mod checkpoint;
pub mod download;
mod load;
pub mod lora;
mod report;
pub mod stdio_protocol;

pub use agent_args::AgentArgs;
pub use load::{Loaded, ModelArgs, model_name, open_file, open_tokenizer};
pub use report::error_message;
