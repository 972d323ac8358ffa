use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};

const WG: u32 = 256;

/// The heads of a Qwen3.5 gated attention layer, whose attn_q output qg [T, n_head,
/// 2 · head_dim] holds each head's query followed by its output gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatedHeads {
    pub n_head: u32,
    pub head_dim: u32,
    /// The longest step the dispatches serve (they are sized for it).
    pub max_tokens: u32,
}

impl GatedHeads {
    /// q[t, h, ..head_dim] = qg[t, h, ..head_dim]: the contiguous query for QK-norm, RoPE and
    /// attention.
    pub fn split_query(
        &self,
        ctx: &GpuContext,
        qg: &wgpu::Buffer,
        q: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        self.launch(ctx, "split_query", qg, q, step)
    }

    /// x[t, h, d] *= sigmoid(qg[t, h, head_dim + d]): the output gate on the attention output
    /// x [T, n_head, head_dim], read from the same qg `split_query` took the query from.
    pub fn sigmoid_gate(
        &self,
        ctx: &GpuContext,
        x: &wgpu::Buffer,
        qg: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        self.launch(ctx, "sigmoid_gate", qg, x, step)
    }

    fn launch(
        &self,
        ctx: &GpuContext,
        entry: &'static str,
        qg: &wgpu::Buffer,
        x: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let row = self.n_head as u64 * self.head_dim as u64;
        // qg is twice as long as x: its indices must stay in u32 too.
        if row == 0 || 2 * row * self.max_tokens as u64 > u32::MAX as u64 {
            return Err(EngineError::Shape {
                op: entry,
                detail: format!("{self:?}"),
            });
        }
        let pipeline = ctx.pipeline("attn_gate.wgsl", entry, &Macros::new().u32("WG", WG))?;
        let p = params(ctx, entry, &[self.n_head, self.head_dim]);

        Ok(Dispatch::new(
            ctx,
            entry,
            pipeline,
            &[bind(qg), bind(x), bind(&p), bind(step)],
            // A row of workgroups per token of the step.
            Grid::PerTokens {
                x: (row as u32).div_ceil(WG),
                per_y: 1,
            },
        ))
    }
}
