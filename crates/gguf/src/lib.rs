//! GGUF model files: a hardened reader over any byte source, tensor views, ggml block
//! formats, CPU reference (de)quantization and a writer; Hugging Face checkpoints converted
//! into GGUFs ([`hf`]) and PEFT LoRA adapters mapped onto them ([`peft`]).
//!
//! Everything a file says is untrusted: counts, lengths, shapes, type ids, offsets and
//! alignment are checked against the file size and ggml's limits before they are used, so a
//! broken or hostile file produces a [`GgufError`] naming what is wrong, never a panic or an
//! allocation the file cannot back. The crate knows nothing of GPUs or async, and builds for
//! `wasm32-unknown-unknown`, where a [`ByteSource`] can be backed by HTTP range requests.
//!
//! Format authority: ggml's `gguf.cpp`, `ggml.h`, `ggml-common.h` and `ggml-quants.c`.

mod error;
mod fingerprint;
pub mod hf;
mod kquant;
pub mod peft;
mod quant;
mod reader;
mod source;
mod types;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use fingerprint::fingerprint;
pub use quant::{can_convert, dequantize, quantize};
pub use reader::{
    DEFAULT_ALIGNMENT, GGUF_MAGIC, GgufFile, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_DIMS,
    MAX_ELEMENTS, MAX_METADATA_BYTES, MAX_STRING_LEN, TensorInfo,
};
pub use source::ByteSource;
#[cfg(not(target_arch = "wasm32"))]
pub use source::MmapSource;
pub use types::GgmlType;
pub use value::{Metadata, Packed, Value};
pub use writer::GgufWriter;
