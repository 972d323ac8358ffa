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

/// dst[t, ..row] = src[cache row of token t, ..row] for the step's tokens (`row` f32s, a
/// multiple of 4): the rows a step wrote into a cache, gathered into a [T, row] tensor.
pub fn step_rows(
    ctx: &GpuContext,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    row: u32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    if row == 0 || !row.is_multiple_of(4) {
        return Err(crate::error::EngineError::Shape {
            op: "step_rows",
            detail: format!("rows of {row} values (a multiple of 4 needed)"),
        });
    }
    let pipeline = ctx.pipeline("copy.wgsl", "step_rows", &Macros::new().u32("WG", WG))?;
    let p = params(ctx, "step_rows", &[row / 4]);
    Ok(Dispatch::new(
        ctx,
        "step_rows",
        pipeline,
        &[bind(src), bind(dst), bind(&p), bind(step)],
        Grid::PerTokens {
            x: (row / 4).div_ceil(WG),
            per_y: 1,
        },
    ))
}

/// dst[t] = [a[t], b[t]] for the step's tokens: rows of `a_row` and `b_row` f32s (each a
/// multiple of 4) side by side in rows of both.
pub fn concat_rows(
    ctx: &GpuContext,
    a: &wgpu::Buffer,
    b: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    a_row: u32,
    b_row: u32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    if a_row == 0 || b_row == 0 || !a_row.is_multiple_of(4) || !b_row.is_multiple_of(4) {
        return Err(crate::error::EngineError::Shape {
            op: "concat_rows",
            detail: format!("rows of {a_row} and {b_row} values (multiples of 4 needed)"),
        });
    }
    let pipeline = ctx.pipeline("copy.wgsl", "concat_rows", &Macros::new().u32("WG", WG))?;
    let p = params(ctx, "concat_rows", &[a_row / 4, b_row / 4]);
    Ok(Dispatch::with_bindings(
        ctx,
        "concat_rows",
        pipeline,
        &[
            (0, bind(a)),
            (1, bind(dst)),
            (2, bind(&p)),
            (3, bind(step)),
            (4, bind(b)),
        ],
        Grid::PerTokens {
            x: ((a_row + b_row) / 4).div_ceil(WG),
            per_y: 1,
        },
    ))
}
