use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};
use crate::weights::{GpuWeight, type_macro};
use lilypad_gguf::GgmlType;

/// Threads per workgroup in the workgroup-per-row layout.
const WG: u32 = 64;
/// Row-per-thread layout: one SIMD vector of llvmpipe (256-bit) per workgroup.
const CPU_WG: u32 = 8;
/// Workgroups a decode matvec should at least have: lavapipe runs each on one core, so a
/// matrix of a few workgroups leaves cores idle or unevenly loaded.
const CPU_MIN_GROUPS: u64 = 8;
/// Row-per-thread prefill: tokens per thread (the shader's unrolled tile).
const CPU_TILE: u32 = 8;

/// How threads share a matrix row (see `shaders/matvec.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatvecLayout {
    /// Several rows per thread, no barriers: fastest on CPU adapters (lavapipe, SwiftShader).
    /// `subgroups`: threads share activation loads through subgroup broadcasts where the
    /// device has subgroups (native only; without, each thread loads its own). `rows`: rows
    /// per thread (4, 8 or 16), or `None` to choose per matrix ([`cpu_rows_per_thread`]).
    RowPerThread { subgroups: bool, rows: Option<u32> },
    /// A workgroup per row with a shared-memory reduction: coalesced loads for GPUs.
    RowPerWorkgroup,
}

impl MatvecLayout {
    /// CPU adapters get rows per thread; `LILYPAD_MATVEC=thread|workgroup` overrides.
    pub fn for_adapter(device_type: wgpu::DeviceType) -> Self {
        let thread = Self::RowPerThread {
            subgroups: true,
            rows: None,
        };
        match std::env::var("LILYPAD_MATVEC").as_deref() {
            Ok("thread") => thread,
            Ok("workgroup") => Self::RowPerWorkgroup,
            _ if device_type == wgpu::DeviceType::Cpu => thread,
            _ => Self::RowPerWorkgroup,
        }
    }
}

/// Rows per thread of the row-per-thread layout for a matrix of `ty` weights and `rows` rows
/// at `tile` tokens per thread. More rows per thread share each activation load among more
/// rows (16 measured fastest), but decode needs [`CPU_MIN_GROUPS`] workgroups to keep the
/// cores busy; prefill has a workgroup per tile of tokens as well. The 8-token tile of the
/// 32-weight block types takes 8 (7–18 % less time per token than 16 on lavapipe: a thread's
/// 8 × 16 sums no longer fit), the k-quants and floats keep 16.
pub fn cpu_rows_per_thread(ty: GgmlType, rows: u64, tile: u32) -> u32 {
    if tile >= 8 && matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0) {
        return 8;
    }
    [16, 8]
        .into_iter()
        .find(|&r| tile > 1 || rows >= (CPU_WG * r) as u64 * CPU_MIN_GROUPS)
        .unwrap_or(4)
}

/// Tokens per workgroup in prefill: each decoded weight is reused this many times.
pub const PREFILL_TILE: u32 = 8;

/// y[t, j] (+)= Σ_c W[j, c] · x[t, c] for the step's tokens.
/// Shapes: x [T, W.cols], y [T, y_stride] with W.rows ≤ y_stride. `tile` is 1 for decode
/// or [`PREFILL_TILE`] (the row-per-thread layout runs any tile above 1 as 8 tokens per
/// thread, steps of up to 4 tokens as 4 and of 2 as 2); one dispatch per weight chunk.
pub fn matvec(
    ctx: &GpuContext,
    w: &GpuWeight,
    x: &wgpu::Buffer,
    y: &wgpu::Buffer,
    y_stride: u32,
    step: &wgpu::Buffer,
    tile: u32,
    accumulate: bool,
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
) -> Result<Vec<Dispatch>> {
    if w.rows > y_stride as u64 {
        return Err(EngineError::Shape {
            op: "matvec",
            detail: format!("{}: {} rows > y stride {y_stride}", w.name, w.rows),
        });
    }
    if tile == 0 {
        return Err(EngineError::Shape {
            op: "matvec",
            detail: format!("{}: tile 0", w.name),
        });
    }
    let mut macros = Macros::new().flag(type_macro(w.ty));
    if accumulate {
        macros = macros.flag("ACCUMULATE");
    }
    match layout {
        MatvecLayout::RowPerWorkgroup => {
            let macros = macros.u32("WG", WG).u32("TILE", tile);
            dispatches(ctx, w, &macros, [x, y, step], y_stride, 1, tile, false)
        }
        MatvecLayout::RowPerThread { subgroups, rows } if tile > 1 => {
            // Steps of a few tokens (batched decode) get a 4-token tile, and steps of two (a
            // speculative check of one draft token) a 2-token one: the 8-token tile would do
            // the work of 8 tokens for them.
            let tiled = |tile| {
                let (m, rows_per_group) =
                    row_per_thread(ctx, w, macros.clone(), subgroups, rows, tile)?;
                dispatches(
                    ctx,
                    w,
                    &m,
                    [x, y, step],
                    y_stride,
                    rows_per_group,
                    tile,
                    true,
                )
            };
            let wide = tiled(CPU_TILE)?;
            let small = tiled(SMALL_TILE)?;
            let pair = tiled(2)?;
            Ok(wide
                .into_iter()
                .zip(small.into_iter().zip(pair))
                .map(|(wide, (small, pair))| {
                    wide.with_few_tokens(SMALL_TILE, small.with_few_tokens(2, pair))
                })
                .collect())
        }
        MatvecLayout::RowPerThread { subgroups, rows } => {
            let (m, rows_per_group) = row_per_thread(ctx, w, macros, subgroups, rows, 1)?;
            dispatches(ctx, w, &m, [x, y, step], y_stride, rows_per_group, 1, true)
        }
    }
}

/// Tokens per thread of the row-per-thread layout's tile for steps of a few tokens: per
/// token it costs what the 8-token tile does for Q4_0/Q4_1 (measured on lavapipe), so a step
/// of 2–4 tokens pays half of what it would in the 8-token tile. Prefill keeps 8 (the
/// k-quants' decoding is shared by more tokens there).
const SMALL_TILE: u32 = 4;

/// The row-per-thread layout's macros for `tile` tokens per thread (1, 2, 4 or 8), and the
/// rows a workgroup covers.
fn row_per_thread(
    ctx: &GpuContext,
    w: &GpuWeight,
    mut macros: Macros,
    subgroups: bool,
    rows: Option<u32>,
    tile: u32,
) -> Result<(Macros, u32)> {
    macros = macros
        .flag("ROW_PER_THREAD")
        .u32("WG", CPU_WG)
        .u32("TILE", tile);
    match tile {
        8 => macros = macros.flag("TILE8"),
        4 => macros = macros.flag("FEW_TOKENS").flag("TILE4"),
        2 => macros = macros.flag("FEW_TOKENS"),
        _ => {}
    }
    // How many weights one step of the column loop decodes (the shader's families).
    match w.ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => {
            macros = macros.flag("BLOCK32");
        }
        GgmlType::Q4K | GgmlType::Q5K => {
            macros = macros.flag("KQUANT").flag("SCALES4");
        }
        GgmlType::Q6K => {
            macros = macros.flag("KQUANT");
        }
        _ => {}
    }
    if subgroups && ctx.shader_subgroups() {
        macros = macros.flag("SUBGROUPS");
    }
    let rpt = rows.unwrap_or_else(|| cpu_rows_per_thread(w.ty, w.rows, tile));
    if ![4, 8, 16].contains(&rpt) {
        return Err(EngineError::Shape {
            op: "matvec",
            detail: format!("{}: {rpt} rows per thread", w.name),
        });
    }
    // The shader unrolls groups of four rows: ROWS8 adds a second, ROWS16 two more.
    macros = macros.u32("RPT", rpt);
    if rpt >= 8 {
        macros = macros.flag("ROWS8");
    }
    if rpt >= 16 {
        macros = macros.flag("ROWS16");
    }
    Ok((macros, CPU_WG * rpt))
}

/// One dispatch per chunk of `w` with the pipeline of `macros`.
#[allow(clippy::too_many_arguments)]
fn dispatches(
    ctx: &GpuContext,
    w: &GpuWeight,
    macros: &Macros,
    [x, y, step]: [&wgpu::Buffer; 3],
    y_stride: u32,
    rows_per_group: u32,
    tile: u32,
    row_per_thread: bool,
) -> Result<Vec<Dispatch>> {
    let pipeline = ctx.pipeline("matvec.wgsl", "matvec", macros)?;
    // Q4_K/Q5_K's scale words bound again as vec4s in the row-per-thread layout.
    let scales4 = row_per_thread && matches!(w.ty, GgmlType::Q4K | GgmlType::Q5K);
    w.chunks
        .iter()
        .filter(|c| c.rows > 0)
        .map(|c| {
            let p = params(
                ctx,
                "matvec",
                &[c.rows, w.cols as u32, c.row_start, y_stride],
            );
            let mut bindings = vec![
                (0, bind(&c.q)),
                (1, bind(&c.s)),
                (2, bind(x)),
                (3, bind(y)),
                (4, bind(&p)),
                (5, bind(step)),
            ];
            if scales4 {
                bindings.push((7, bind(&c.s)));
            }
            Ok(Dispatch::with_bindings(
                ctx,
                "matvec",
                pipeline.clone(),
                &bindings,
                Grid::PerTokens {
                    x: c.rows.div_ceil(rows_per_group),
                    per_y: tile,
                },
            ))
        })
        .collect()
}

/// Tokens per thread of [`matvec_backward`]: each decoded weight unit serves this many.
const BACKWARD_TILE: u32 = 8;
/// Rows one [`matvec_backward`] dispatch walks: CPU adapters end a loop after 65535 iterations
/// per invocation (llvmpipe), and a thread walks its rows four at a time with up to
/// `BACKWARD_TILE` + 1 loop steps each (a margin kept for other compilers' unrolling).
pub const BACKWARD_ROWS: u32 = 4096;

/// dx[t, c] (+)= Σ_j W[j, c] · dy[t, j] for the step's tokens: the input gradient of
/// [`matvec`] for a frozen weight, decoded from its blocks as the forward decodes them.
/// Shapes: dy [T, dy_stride] with W.rows ≤ dy_stride, dx [T, W.cols]. One dispatch per
/// [`BACKWARD_ROWS`] rows of each weight chunk; every dispatch after the first adds to dx.
pub fn matvec_backward(
    ctx: &GpuContext,
    w: &GpuWeight,
    dy: &wgpu::Buffer,
    dx: &wgpu::Buffer,
    dy_stride: u32,
    step: &wgpu::Buffer,
    accumulate: bool,
) -> Result<Vec<Dispatch>> {
    if w.rows > dy_stride as u64 || !w.cols.is_multiple_of(8) {
        return Err(EngineError::Shape {
            op: "matvec_backward",
            detail: format!(
                "{}: {} rows with dy stride {dy_stride}, {} columns (a multiple of 8 needed)",
                w.name, w.rows, w.cols
            ),
        });
    }
    // CPU adapters with subgroups: one 8-lane subgroup per workgroup shares the gradients'
    // loads (see the shader).
    let subgroups = matches!(
        ctx.matvec_layout,
        MatvecLayout::RowPerThread {
            subgroups: true,
            ..
        }
    ) && ctx.shader_subgroups()
        && BACKWARD_TILE == CPU_WG;
    let wg = if subgroups { CPU_WG } else { WG };
    let mut base = Macros::new()
        .flag(type_macro(w.ty))
        .u32("WG", wg)
        .u32("TILE", BACKWARD_TILE);
    if subgroups {
        base = base.flag("SUBGROUPS");
    }
    let scales4 = matches!(w.ty, GgmlType::Q4K | GgmlType::Q5K);
    if scales4 {
        base = base.flag("SCALES4");
    }
    let set = ctx.pipeline("matvec_backward.wgsl", "matvec_backward", &base)?;
    let add = ctx.pipeline(
        "matvec_backward.wgsl",
        "matvec_backward",
        &base.flag("ACCUMULATE"),
    )?;
    let mut out = Vec::new();
    for c in w.chunks.iter().filter(|c| c.rows > 0) {
        for row_begin in (0..c.rows).step_by(BACKWARD_ROWS as usize) {
            let row_end = (row_begin + BACKWARD_ROWS).min(c.rows);
            let p = params(
                ctx,
                "matvec_backward",
                &[row_begin, row_end, w.cols as u32, c.row_start, dy_stride],
            );
            let pipeline = if accumulate || !out.is_empty() {
                &add
            } else {
                &set
            };
            let mut bindings = vec![
                (0, bind(&c.q)),
                (1, bind(&c.s)),
                (2, bind(dy)),
                (3, bind(dx)),
                (4, bind(&p)),
                (5, bind(step)),
            ];
            if scales4 {
                bindings.push((6, bind(&c.s)));
            }
            out.push(Dispatch::with_bindings(
                ctx,
                "matvec_backward",
                pipeline.clone(),
                &bindings,
                Grid::PerTokens {
                    x: (w.cols as u32 / 8).div_ceil(wg),
                    per_y: BACKWARD_TILE,
                },
            ));
        }
    }
    Ok(out)
}
