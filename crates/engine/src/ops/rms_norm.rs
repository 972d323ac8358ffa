use crate::error::Result;
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};

const WG: u32 = 64;

/// y[t, g, ..n] = rmsnorm(x[t, g, ..n]) · w for `groups` rows per token (1, or the head
/// count for per-head norms). w is f32 [n].
pub fn rms_norm(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    w: &wgpu::Buffer,
    y: &wgpu::Buffer,
    n: u32,
    groups: u32,
    eps: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let pipeline = ctx.pipeline("rms_norm.wgsl", "rms_norm", &Macros::new().u32("WG", WG))?;
    let p = params(ctx, "rms_norm", &[n, groups, eps.to_bits()]);
    Ok(Dispatch::new(
        ctx,
        "rms_norm",
        pipeline,
        &[bind(x), bind(w), bind(y), bind(&p), bind(step)],
        Grid::PerTokens {
            x: groups,
            per_y: 1,
        },
    ))
}
