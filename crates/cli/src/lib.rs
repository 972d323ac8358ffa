//! Model loading shared by the `lilypad` command line and the `train-native` trainer.

pub mod checkpoint;
pub mod download;
mod load;
pub mod lora;

pub use load::{Loaded, ModelArgs, open_file, open_tokenizer};
