use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};
use crate::weights::{GpuWeight, type_macro};

const WG: u32 = 64;

/// Tokens per workgroup in prefill: each decoded weight is reused this many times.
pub const PREFILL_TILE: u32 = 8;

/// y[t, j] (+)= Σ_c W[j, c] · x[t, c] for the step's tokens.
/// Shapes: x [T, W.cols], y [T, y_stride] with W.rows ≤ y_stride. `tile` is 1 for decode
/// or [`PREFILL_TILE`]; one dispatch per weight chunk. `in_cache`: y is a cache
/// [ctx, y_stride] and token t writes row pos0 + t.
pub fn matvec(
    ctx: &GpuContext,
    w: &GpuWeight,
    x: &wgpu::Buffer,
    y: &wgpu::Buffer,
    y_stride: u32,
    step: &wgpu::Buffer,
    tile: u32,
    accumulate: bool,
    in_cache: bool,
) -> Result<Vec<Dispatch>> {
    if w.rows > y_stride as u64 {
        return Err(EngineError::Shape { op: "matvec", detail: format!("{}: {} rows > y stride {y_stride}", w.name, w.rows) });
    }
    let mut macros = Macros::new().u32("WG", WG).u32("TILE", tile).flag(type_macro(w.ty));
    if accumulate {
        macros = macros.flag("ACCUMULATE");
    }
    let pipeline = ctx.pipeline("matvec.wgsl", "matvec", &macros)?;
    w.chunks
        .iter()
        .map(|c| {
            let p = params(ctx, "matvec", &[c.rows, w.cols as u32, c.row_start, y_stride, in_cache as u32]);
            Ok(Dispatch::new(
                ctx,
                "matvec",
                pipeline.clone(),
                &[bind(&c.q), bind(&c.s), bind(x), bind(y), bind(&p), bind(step)],
                Grid::PerTokens { x: c.rows, per_y: tile },
            ))
        })
        .collect()
}
