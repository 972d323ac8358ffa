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
    norm(ctx, [x, w, y], None, (n, groups, eps), false, step)
}

/// [`rms_norm`] into a cache: y is [ctx, groups, n] and token t writes row pos0 + t
/// (Qwen3's per-head K norm writes the normalised keys straight into the KV cache).
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_to_cache(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    w: &wgpu::Buffer,
    cache: &wgpu::Buffer,
    n: u32,
    groups: u32,
    eps: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    norm(ctx, [x, w, cache], None, (n, groups, eps), true, step)
}

/// y[t, g, ..n] = rmsnorm(x[t, g, ..n]) · w · silu(z[t, g, ..n]): Qwen3.5's gated DeltaNet
/// output norm, one row per value head (`groups` heads of n = d_v, w shared by all heads).
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_gated(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    z: &wgpu::Buffer,
    w: &wgpu::Buffer,
    y: &wgpu::Buffer,
    n: u32,
    groups: u32,
    eps: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    norm(ctx, [x, w, y], Some(z), (n, groups, eps), false, step)
}

fn norm(
    ctx: &GpuContext,
    [x, w, y]: [&wgpu::Buffer; 3],
    z: Option<&wgpu::Buffer>,
    (n, groups, eps): (u32, u32, f32),
    y_in_cache: bool,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let mut macros = Macros::new().u32("WG", WG);
    if z.is_some() {
        macros = macros.flag("GATED");
    }
    let pipeline = ctx.pipeline("rms_norm.wgsl", "rms_norm", &macros)?;
    let p = params(
        ctx,
        "rms_norm",
        &[n, groups, eps.to_bits(), y_in_cache as u32],
    );
    let mut bindings = vec![bind(x), bind(w), bind(y), bind(&p), bind(step)];
    bindings.extend(z.map(bind));
    Ok(Dispatch::new(
        ctx,
        if z.is_some() {
            "rms_norm_gated"
        } else {
            "rms_norm"
        },
        pipeline,
        &bindings,
        Grid::PerTokens {
            x: groups,
            per_y: 1,
        },
    ))
}
