//! lilypad in the browser. The engine, tokenizer and chat session run unchanged on browser
//! WebGPU; this crate adds what only a page needs: a `ByteSource` over synchronous ranged
//! reads that a Web Worker serves (OPFS, `File`, HTTP), and the wasm-bindgen API the worker
//! calls (`web/src/lib/worker.ts`), LoRA adapters included (`lora.rs`). Requests, results and
//! errors are plain serde types so they are tested natively.

pub mod api;
pub mod error;
pub mod lora;

#[cfg(target_arch = "wasm32")]
mod bindings;
#[cfg(target_arch = "wasm32")]
mod source;

pub use error::WebError;
