use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};
use crate::weights::{GpuWeight, type_macro};

const WG: u32 = 64;

/// How threads share a matrix row (see `shaders/matvec.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatvecLayout {
    /// A thread per row, no barriers: fastest on CPU adapters (lavapipe, SwiftShader).
    RowPerThread,
    /// A workgroup per row with a shared-memory reduction: coalesced loads for GPUs.
    RowPerWorkgroup,
}

impl MatvecLayout {
    /// CPU adapters get rows per thread; `LILYPAD_MATVEC=thread|workgroup` overrides.
    pub fn for_adapter(device_type: wgpu::DeviceType) -> Self {
        match std::env::var("LILYPAD_MATVEC").as_deref() {
            Ok("thread") => Self::RowPerThread,
            Ok("workgroup") => Self::RowPerWorkgroup,
            _ if device_type == wgpu::DeviceType::Cpu => Self::RowPerThread,
            _ => Self::RowPerWorkgroup,
        }
    }
}

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
    matvec_with(
        ctx,
        ctx.matvec_layout,
        w,
        x,
        y,
        y_stride,
        step,
        tile,
        accumulate,
        in_cache,
    )
}

/// [`matvec`] with an explicit layout (tests run both).
pub fn matvec_with(
    ctx: &GpuContext,
    layout: MatvecLayout,
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
        return Err(EngineError::Shape {
            op: "matvec",
            detail: format!("{}: {} rows > y stride {y_stride}", w.name, w.rows),
        });
    }
    let mut macros = Macros::new()
        .u32("WG", WG)
        .u32("TILE", tile)
        .flag(type_macro(w.ty));
    if accumulate {
        macros = macros.flag("ACCUMULATE");
    }
    if layout == MatvecLayout::RowPerThread {
        macros = macros.flag("ROW_PER_THREAD");
    }
    let pipeline = ctx.pipeline("matvec.wgsl", "matvec", &macros)?;
    w.chunks
        .iter()
        .map(|c| {
            let p = params(
                ctx,
                "matvec",
                &[
                    c.rows,
                    w.cols as u32,
                    c.row_start,
                    y_stride,
                    in_cache as u32,
                ],
            );
            Ok(Dispatch::new(
                ctx,
                "matvec",
                pipeline.clone(),
                &[
                    bind(&c.q),
                    bind(&c.s),
                    bind(x),
                    bind(y),
                    bind(&p),
                    bind(step),
                ],
                Grid::PerTokens {
                    x: if layout == MatvecLayout::RowPerThread {
                        c.rows.div_ceil(WG)
                    } else {
                        c.rows
                    },
                    per_y: tile,
                },
            ))
        })
        .collect()
}
