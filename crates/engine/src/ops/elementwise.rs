use crate::error::Result;
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};

const WG: u32 = 256;

fn grid(row: u32) -> Grid {
    // A row of workgroups per token of the step.
    Grid::PerTokens {
        x: row.div_ceil(WG),
        per_y: 1,
    }
}

/// a[t, ..row] += b[t, ..row] for the step's tokens.
pub fn add(
    ctx: &GpuContext,
    a: &wgpu::Buffer,
    b: &wgpu::Buffer,
    row: u32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let pipeline = ctx.pipeline("elementwise.wgsl", "add", &Macros::new().u32("WG", WG))?;
    let p = params(ctx, "add", &[row]);
    Ok(Dispatch::with_bindings(
        ctx,
        "add",
        pipeline,
        &entries(a, b, None, &p, step),
        grid(row),
    ))
}

/// out = silu(a) * b for the step's tokens.
pub fn silu_mul(
    ctx: &GpuContext,
    a: &wgpu::Buffer,
    b: &wgpu::Buffer,
    out: &wgpu::Buffer,
    row: u32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let pipeline = ctx.pipeline("elementwise.wgsl", "silu_mul", &Macros::new().u32("WG", WG))?;
    let p = params(ctx, "silu_mul", &[row]);
    Ok(Dispatch::with_bindings(
        ctx,
        "silu_mul",
        pipeline,
        &entries(a, b, Some(out), &p, step),
        grid(row),
    ))
}

fn entries<'a>(
    a: &'a wgpu::Buffer,
    b: &'a wgpu::Buffer,
    out: Option<&'a wgpu::Buffer>,
    p: &'a wgpu::Buffer,
    step: &'a wgpu::Buffer,
) -> Vec<(u32, wgpu::BindingResource<'a>)> {
    let mut e = vec![(0, bind(a)), (1, bind(b))];
    if let Some(o) = out {
        e.push((2, bind(o)));
    }
    e.push((3, bind(p)));
    e.push((4, bind(step)));
    e
}

/// The gradient of [`silu_mul`] (out = silu(a) · b): da = d_out · b · silu'(a) and
/// db = d_out · silu(a), for the step's tokens.
pub fn silu_mul_backward(
    ctx: &GpuContext,
    a: &wgpu::Buffer,
    b: &wgpu::Buffer,
    d_out: &wgpu::Buffer,
    da: &wgpu::Buffer,
    db: &wgpu::Buffer,
    row: u32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let pipeline = ctx.pipeline(
        "elementwise_backward.wgsl",
        "silu_mul_backward",
        &Macros::new().u32("WG", WG),
    )?;
    let p = params(ctx, "silu_mul_backward", &[row]);
    Ok(Dispatch::new(
        ctx,
        "silu_mul_backward",
        pipeline,
        &[
            bind(a),
            bind(b),
            bind(d_out),
            bind(da),
            bind(db),
            bind(&p),
            bind(step),
        ],
        grid(row),
    ))
}
