//! Host side of each kernel family in `shaders/`: shape checks, uniforms, bindings, grids.
//! Every op returns [`Dispatch`]es that a graph records; `tests/kernels.rs` checks each one
//! against a CPU reference.

// A kernel call names each buffer it binds and each shape it checks: many arguments by
// nature, and a struct per kernel would only rename them.
#![allow(clippy::too_many_arguments)]

pub mod adamw;
pub mod attention;
pub mod attn_gate;
pub mod conv1d;
pub mod copy;
pub mod delta_net;
pub mod elementwise;
pub mod get_rows;
pub mod matmul;
pub mod matvec;
pub mod rms_norm;
pub mod rope;
pub mod sample;
pub mod softmax;

use crate::gpu::GpuContext;

/// Tokens one step can hold (the size of `Step.tok` in `shaders/common/step.wgsl`).
pub const MAX_STEP_TOKENS: usize = 512;

/// Loop iterations one invocation may take where loops are cut short
/// ([`GpuContext::loops_limited`]: llvmpipe ends a shader's loops after 65,535 in all,
/// silently), so kernels that walk long ranges split them across dispatches or workgroups.
pub(crate) const LOOP_BUDGET: u32 = 60_000;

/// Per-step values every token-dependent kernel reads (`shaders/common/step.wgsl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Step {
    pub n_tokens: u32,
    pub pos0: u32,
    pub kv_len: u32,
    pub _pad: u32,
    /// Per token: position, KV-cache row (slot · context + position), sequence slot, and 0 or
    /// 1 + the slot that also receives the recurrent state after the token
    /// ([`Step::checkpoint_after`]).
    pub tok: [[u32; 4]; MAX_STEP_TOKENS],
}

impl Default for Step {
    fn default() -> Self {
        bytemuck::Zeroable::zeroed()
    }
}

impl Step {
    /// `n_tokens` tokens of one sequence in slot 0, from position `pos0`.
    pub fn new(n_tokens: u32, pos0: u32) -> Self {
        Self::for_sequence(n_tokens, pos0, 0, 0)
    }

    /// `n_tokens` tokens of the sequence in `slot` (whose cache rows start at
    /// slot · `context`), from position `pos0`.
    pub fn for_sequence(n_tokens: u32, pos0: u32, slot: u32, context: u32) -> Self {
        let mut s = Self {
            n_tokens,
            pos0,
            kv_len: pos0 + n_tokens,
            ..Default::default()
        };
        for (t, tok) in s.tok.iter_mut().take(n_tokens as usize).enumerate() {
            let pos = pos0 + t as u32;
            *tok = [pos, slot * context + pos, slot, 0];
        }
        s
    }

    /// Marks token `t` as a checkpoint: the recurrent kernels also write the sequence's state
    /// after it (conv window, delta-rule state) into `slot`. Only the recurrent forms honour
    /// it (steps of batch graphs, `GraphIo::multi_sequence`, and decode steps), not the chunked
    /// prefill.
    pub fn checkpoint_after(mut self, t: usize, slot: u32) -> Self {
        self.tok[t][3] = slot + 1;
        self
    }

    /// One token each of several sequences: (slot, position) per token.
    pub fn batch(tokens: &[(u32, u32)], context: u32) -> Self {
        let mut s = Self {
            n_tokens: tokens.len() as u32,
            ..Default::default()
        };
        for (tok, &(slot, pos)) in s.tok.iter_mut().zip(tokens) {
            *tok = [pos, slot * context + pos, slot, 0];
        }
        s.pos0 = tokens.first().map_or(0, |t| t.1);
        s.kv_len = tokens.iter().map(|t| t.1 + 1).max().unwrap_or(0);
        s
    }
}

/// A uniform buffer holding `Step`, rewritten before each submit.
pub fn step_buffer(ctx: &GpuContext) -> wgpu::Buffer {
    ctx.uniform_buffer("step", bytemuck::bytes_of(&Step::default()))
}

pub fn write_step(ctx: &GpuContext, buf: &wgpu::Buffer, step: Step) {
    ctx.queue.write_buffer(buf, 0, bytemuck::bytes_of(&step));
}

/// Uniform of 16-byte-padded words.
pub(crate) fn params(ctx: &GpuContext, label: &str, words: &[u32]) -> wgpu::Buffer {
    let mut w = words.to_vec();
    w.resize(words.len().next_multiple_of(4).max(4), 0);
    ctx.uniform_buffer(label, bytemuck::cast_slice(&w))
}

pub(crate) fn bind(buf: &wgpu::Buffer) -> wgpu::BindingResource<'_> {
    buf.as_entire_binding()
}
