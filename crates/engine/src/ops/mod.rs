//! Host side of each kernel family in `shaders/`: shape checks, uniforms, bindings, grids.
//! Every op returns [`Dispatch`]es that a graph records; `tests/kernels.rs` checks each one
//! against a CPU reference.

pub mod attention;
pub mod attn_gate;
pub mod conv1d;
pub mod copy;
pub mod delta_net;
pub mod elementwise;
pub mod get_rows;
pub mod matvec;
pub mod rms_norm;
pub mod rope;
pub mod sample;
pub mod softmax;

use crate::gpu::GpuContext;

/// Per-step values every token-dependent kernel reads (`shaders/common/step.wgsl`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Step {
    pub n_tokens: u32,
    pub pos0: u32,
    pub kv_len: u32,
    pub _pad: u32,
}

impl Step {
    pub fn new(n_tokens: u32, pos0: u32) -> Self {
        Self {
            n_tokens,
            pos0,
            kv_len: pos0 + n_tokens,
            _pad: 0,
        }
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
