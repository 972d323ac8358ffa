use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::matvec::MatvecLayout;
use crate::ops::{bind, params};

const WG: u32 = 64;
/// Tokens per workgroup of the per-thread layout (`shaders/attention.wgsl`).
const LANES: u32 = 8;
/// Widest head the per-thread layout takes: a thread keeps a whole K/V row and its output
/// in registers, and past this they spill (FrogNano's 256-wide heads ran several times
/// slower per-thread than per-workgroup on lavapipe).
const PER_THREAD_MAX_DIM: u32 = 128;

/// How threads share the work (see `shaders/attention.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionLayout {
    /// A thread per query, no barriers: CPU adapters. `subgroups` as for matvec.
    PerThread { subgroups: bool },
    /// A workgroup per query with shared-memory reductions: GPUs.
    PerWorkgroup,
}

impl AttentionLayout {
    /// CPU adapters (those that get matvec's row-per-thread layout) get a thread per query.
    pub fn for_context(ctx: &GpuContext) -> Self {
        match ctx.matvec_layout {
            MatvecLayout::RowPerThread { .. } => Self::PerThread { subgroups: true },
            MatvecLayout::RowPerWorkgroup => Self::PerWorkgroup,
        }
    }
}

/// Causal GQA: out[t, h] = softmax(q[t, h] · K[..=pos0+t, h / group] · scale) · V.
/// q, out: [T, n_head, head_dim]; k, v: one layer's cache [ctx, n_kv, head_dim].
/// The per-thread layout needs head_dim % 4 == 0 (vec4 rows) and at most
/// `PER_THREAD_MAX_DIM`; other head dims fall back to the workgroup layout.
pub fn attention(
    ctx: &GpuContext,
    layout: AttentionLayout,
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
    attention_saving(
        ctx, layout, q, k, v, out, None, n_head, n_kv, head_dim, scale, step,
    )
}

/// [`attention`] that also writes each (token, head)'s softmax statistics, the log of the
/// sum of its exponentiated scaled scores, to `lse` [T, n_head]: with them a backward pass
/// recomputes the probabilities without a second softmax pass.
pub fn attention_saving(
    ctx: &GpuContext,
    layout: AttentionLayout,
    q: &wgpu::Buffer,
    k: &wgpu::Buffer,
    v: &wgpu::Buffer,
    out: &wgpu::Buffer,
    lse: Option<&wgpu::Buffer>,
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    scale: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    if head_dim > 256 || n_kv == 0 || !n_head.is_multiple_of(n_kv) {
        return Err(EngineError::Shape {
            op: "attention",
            detail: format!("{n_head} query heads, {n_kv} KV heads, head dim {head_dim} (max 256)"),
        });
    }
    let (macros, per_y) = match layout {
        AttentionLayout::PerThread { subgroups }
            if head_dim.is_multiple_of(4) && head_dim <= PER_THREAD_MAX_DIM =>
        {
            let mut m = Macros::new().flag("PER_THREAD").u32("HD4", head_dim / 4);
            // Native only, as for matvec (browsers need `enable subgroups;`, naga rejects it).
            if subgroups
                && cfg!(not(target_arch = "wasm32"))
                && ctx.features.contains(wgpu::Features::SUBGROUP)
            {
                m = m.flag("SUBGROUPS");
            }
            (m, LANES)
        }
        _ => (
            Macros::new()
                .u32("WG", WG)
                .u32("MAX_D", head_dim.div_ceil(WG)),
            1,
        ),
    };
    let macros = match lse {
        Some(_) => macros.flag("SAVE_LSE"),
        None => macros,
    };
    let pipeline = ctx.pipeline("attention.wgsl", "attention", &macros)?;
    let p = params(ctx, "attention", &[n_head, n_kv, head_dim, scale.to_bits()]);
    let mut bindings = vec![bind(q), bind(k), bind(v), bind(out), bind(&p), bind(step)];
    bindings.extend(lse.map(bind));
    Ok(Dispatch::new(
        ctx,
        "attention",
        pipeline,
        &bindings,
        Grid::PerTokens { x: n_head, per_y },
    ))
}
