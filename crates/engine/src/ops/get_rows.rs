use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};
use crate::weights::{GpuWeight, type_macro};

const WG: u32 = 64;

/// out[t, ..] = W[ids[t], ..] (dequantized) for the step's tokens, one dispatch per weight
/// chunk. `max_tokens` bounds a step's ids; ids must be < W.rows (checked by the caller).
pub fn get_rows(
    ctx: &GpuContext,
    w: &GpuWeight,
    ids: &wgpu::Buffer,
    out: &wgpu::Buffer,
    max_tokens: u32,
    step: &wgpu::Buffer,
) -> Result<Vec<Dispatch>> {
    let pipeline = ctx.pipeline(
        "get_rows.wgsl",
        "get_rows",
        &Macros::new().u32("WG", WG).flag(type_macro(w.ty)),
    )?;
    let units = (w.cols / 8) as u32;
    if max_tokens > crate::kernels::MAX_GROUPS {
        return Err(EngineError::Shape {
            op: "get_rows",
            detail: format!("{max_tokens} ids in one step"),
        });
    }
    Ok(w.chunks
        .iter()
        .map(|c| {
            let p = params(ctx, "get_rows", &[c.rows, w.cols as u32, c.row_start]);
            Dispatch::new(
                ctx,
                "get_rows",
                pipeline.clone(),
                &[
                    bind(&c.q),
                    bind(&c.s),
                    bind(ids),
                    bind(out),
                    bind(&p),
                    bind(step),
                ],
                // A row of workgroups per token of the step.
                Grid::PerTokens {
                    x: units.div_ceil(WG),
                    per_y: 1,
                },
            )
        })
        .collect())
}
