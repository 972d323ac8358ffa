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

    /// The gradient of [`GatedHeads::sigmoid_gate`] from its output `att` (the gated
    /// attention output the forward keeps) and `d` = ∂L/∂att, which becomes ∂L/∂o (the
    /// ungated output's gradient) in place. Writes the gate half of `dqg` [T, n_head,
    /// 2 · head_dim] and `delta` [T, n_head] = Σ ∂L/∂o · o, which
    /// [`attention_backward`](crate::ops::attention::attention_backward) then takes as given.
    pub fn sigmoid_gate_backward(
        &self,
        ctx: &GpuContext,
        qg: &wgpu::Buffer,
        att: &wgpu::Buffer,
        d: &wgpu::Buffer,
        dqg: &wgpu::Buffer,
        delta: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        self.check("sigmoid_gate_backward")?;
        let pipeline = ctx.pipeline(
            "attn_gate_backward.wgsl",
            "sigmoid_gate_backward",
            &Macros::new().u32("WG", WG),
        )?;
        let p = params(ctx, "sigmoid_gate_backward", &[self.n_head, self.head_dim]);
        Ok(Dispatch::with_bindings(
            ctx,
            "sigmoid_gate_backward",
            pipeline,
            &[
                (0, bind(qg)),
                (1, bind(att)),
                (2, bind(d)),
                (3, bind(dqg)),
                (4, bind(delta)),
                (6, bind(&p)),
                (7, bind(step)),
            ],
            Grid::PerTokens {
                x: self.n_head.div_ceil(WG),
                per_y: 1,
            },
        ))
    }

    /// The gradient of [`GatedHeads::split_query`]: the query half of `dqg` = dq.
    pub fn split_query_backward(
        &self,
        ctx: &GpuContext,
        dq: &wgpu::Buffer,
        dqg: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let row = self.check("split_query_backward")?;
        let pipeline = ctx.pipeline(
            "attn_gate_backward.wgsl",
            "split_query_backward",
            &Macros::new().u32("WG", WG),
        )?;
        let p = params(ctx, "split_query_backward", &[self.n_head, self.head_dim]);
        Ok(Dispatch::with_bindings(
            ctx,
            "split_query_backward",
            pipeline,
            &[
                (3, bind(dqg)),
                (5, bind(dq)),
                (6, bind(&p)),
                (7, bind(step)),
            ],
            Grid::PerTokens {
                x: row.div_ceil(WG),
                per_y: 1,
            },
        ))
    }

    /// Values per token of the query (or of the output), checked to keep qg's indices in u32.
    fn check(&self, op: &'static str) -> Result<u32> {
        let row = self.n_head as u64 * self.head_dim as u64;
        // qg is twice as long as x: its indices must stay in u32 too.
        if row == 0 || 2 * row * self.max_tokens as u64 > u32::MAX as u64 {
            return Err(EngineError::Shape {
                op,
                detail: format!("{self:?}"),
            });
        }
        Ok(row as u32)
    }

    fn launch(
        &self,
        ctx: &GpuContext,
        entry: &'static str,
        qg: &wgpu::Buffer,
        x: &wgpu::Buffer,
        step: &wgpu::Buffer,
    ) -> Result<Dispatch> {
        let row = self.check(entry)?;
        let pipeline = ctx.pipeline("attn_gate.wgsl", entry, &Macros::new().u32("WG", WG))?;
        let p = params(ctx, entry, &[self.n_head, self.head_dim]);

        Ok(Dispatch::new(
            ctx,
            entry,
            pipeline,
            &[bind(qg), bind(x), bind(&p), bind(step)],
            // A row of workgroups per token of the step.
            Grid::PerTokens {
                x: row.div_ceil(WG),
                per_y: 1,
            },
        ))
    }
}
