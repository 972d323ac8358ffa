//! One file per model architecture: each reads its config from GGUF metadata, uploads its
//! weights and records its forward graph from the shared blocks in `blocks.rs`. The
//! architecture-independent runtime (steps, logits, sampling, sequence state) is
//! `crate::model::Model`.

pub(crate) mod blocks;
pub mod hf;
pub mod llama;

pub use llama::{LLAMA_LIKE, LlamaConfig, memory_plan};

use crate::error::Result;
use crate::gpu::GpuContext;
use crate::kernels::Dispatch;
use crate::state::StateBuffer;
use crate::weights::GpuWeight;

/// What an architecture provides to the runtime.
pub(crate) trait Forward: wgpu::WasmNotSendSync {
    /// The dispatches taking the step's token ids (`ids`) to the final normalised hidden
    /// states [T, n_embd] in [`Forward::hidden`]; `tile` tokens per workgroup in the matrix
    /// products (1 for decode, `PREFILL_TILE` for prefill).
    fn graph(
        &self,
        ctx: &GpuContext,
        ids: &wgpu::Buffer,
        step: &wgpu::Buffer,
        tile: u32,
    ) -> Result<Vec<Dispatch>>;

    fn hidden(&self) -> &wgpu::Buffer;

    /// The [vocab, n_embd] output projection.
    fn lm_head(&self) -> &GpuWeight;

    /// Per layer, the buffers holding one sequence's state.
    fn state(&self) -> Vec<Vec<StateBuffer>>;
}
