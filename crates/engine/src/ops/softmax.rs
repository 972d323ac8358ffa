use crate::error::Result;
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};

const WG: u32 = 256;

/// y[r] = softmax(x[r]) (or log-softmax) for `n_rows` rows of `n` values.
pub fn softmax(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    y: &wgpu::Buffer,
    n: u32,
    n_rows: u32,
    log: bool,
) -> Result<Dispatch> {
    let mut macros = Macros::new().u32("WG", WG);
    if log {
        macros = macros.flag("LOG");
    }
    let pipeline = ctx.pipeline("softmax.wgsl", "softmax", &macros)?;
    let p = params(ctx, "softmax", &[n, n_rows]);
    Ok(Dispatch::new(
        ctx,
        "softmax",
        pipeline,
        &[bind(x), bind(y), bind(&p)],
        Grid::Fixed([n_rows, 1, 1]),
    ))
}
