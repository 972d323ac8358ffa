use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};

const WG: u32 = 64;

/// Causal GQA: out[t, h] = softmax(q[t, h] · K[..=pos0+t, h / group] · scale) · V.
/// q, out: [T, n_head, head_dim]; k, v: one layer's cache [ctx, n_kv, head_dim].
pub fn attention(
    ctx: &GpuContext,
    q: &wgpu::Buffer,
    k: &wgpu::Buffer,
    v: &wgpu::Buffer,
    out: &wgpu::Buffer,
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    scale: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    if head_dim > 256 || n_kv == 0 || n_head % n_kv != 0 {
        return Err(EngineError::Shape {
            op: "attention",
            detail: format!("{n_head} query heads, {n_kv} KV heads, head dim {head_dim} (max 256)"),
        });
    }
    let macros = Macros::new()
        .u32("WG", WG)
        .u32("MAX_D", head_dim.div_ceil(WG));
    let pipeline = ctx.pipeline("attention.wgsl", "attention", &macros)?;
    let p = params(ctx, "attention", &[n_head, n_kv, head_dim, scale.to_bits()]);
    Ok(Dispatch::new(
        ctx,
        "attention",
        pipeline,
        &[bind(q), bind(k), bind(v), bind(out), bind(&p), bind(step)],
        Grid::PerTokens {
            x: n_head,
            per_y: 1,
        },
    ))
}
