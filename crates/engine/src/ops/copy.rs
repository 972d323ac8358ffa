use crate::error::Result;
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros, fold_grid};
use crate::ops::{bind, params};

const WG: u32 = 256;

/// dst[..n_vec4] = src[..n_vec4] (vec4<f32> elements): the bandwidth reference kernel.
pub fn copy(
    ctx: &GpuContext,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    n_vec4: u32,
) -> Result<Dispatch> {
    let pipeline = ctx.pipeline("copy.wgsl", "copy", &Macros::new().u32("WG", WG))?;
    let p = params(ctx, "copy", &[n_vec4]);
    let (x, z) = fold_grid(n_vec4.div_ceil(WG));
    Ok(Dispatch::new(
        ctx,
        "copy",
        pipeline,
        &[bind(src), bind(dst), bind(&p)],
        Grid::Fixed([x, 1, z]),
    ))
}
