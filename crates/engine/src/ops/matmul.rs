use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{LOOP_BUDGET, bind, params};

/// Rows and columns of c per workgroup of the tiled layout (`shaders/matmul.wgsl`).
const TILE: u32 = 16;
/// Lanes per workgroup of the per-thread layout, each computing a 4 × 4 block of c.
const LANES: u32 = 8;

/// How threads share the work of [`matmul`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulLayout {
    /// 16 × 16 tiles through workgroup memory: GPUs.
    Tiled,
    /// A 4 × 4 block of c per thread, no barriers: CPU adapters.
    PerThread,
}

impl MatmulLayout {
    /// CPU adapters (those that get matvec's row-per-thread layout) get blocks per thread.
    pub fn for_context(ctx: &GpuContext) -> Self {
        match ctx.matvec_layout {
            crate::ops::matvec::MatvecLayout::RowPerThread { .. } => Self::PerThread,
            crate::ops::matvec::MatvecLayout::RowPerWorkgroup => Self::Tiled,
        }
    }
}

/// An f32 row-major matrix operand of [`matmul`]: its buffer, floats per stored row, and
/// whether the product reads it transposed.
#[derive(Clone, Copy)]
pub struct Operand<'a> {
    pub buf: &'a wgpu::Buffer,
    pub stride: u32,
    pub transposed: bool,
}

impl<'a> Operand<'a> {
    pub fn new(buf: &'a wgpu::Buffer, stride: u32) -> Self {
        Self {
            buf,
            stride,
            transposed: false,
        }
    }

    pub fn t(buf: &'a wgpu::Buffer, stride: u32) -> Self {
        Self {
            buf,
            stride,
            transposed: true,
        }
    }
}

/// Which size of a [`matmul`] is the step's token count, read on the GPU at each submit so a
/// recorded graph serves every step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenDim {
    /// All sizes as given.
    None,
    /// m, the rows of c (at most the m given).
    Rows,
    /// k, the summed dimension (at most the k given).
    Inner,
}

/// c[i, j] (+)= alpha · Σ_l A[i, l] · B[l, j] for c [m, n] (row stride `ldc`), A [m, k] and
/// B [k, n] as the operands present them: the dense f32 products of a LoRA adapter's
/// gradients. `tokens` names the size that is the step's token count. The per-thread layout
/// takes k of at most [`LOOP_BUDGET`]; a longer k gets the tiled one.
pub fn matmul(
    ctx: &GpuContext,
    layout: MatmulLayout,
    a: Operand,
    b: Operand,
    c: &wgpu::Buffer,
    [m, n, k]: [u32; 3],
    ldc: u32,
    alpha: f32,
    accumulate: bool,
    tokens: TokenDim,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    // The stored widths each operand needs: A's rows hold k values (m transposed), B's n (k).
    let (a_width, b_width) = (
        if a.transposed { m } else { k },
        if b.transposed { k } else { n },
    );
    if a.stride < a_width || b.stride < b_width || ldc < n {
        return Err(EngineError::Shape {
            op: "matmul",
            detail: format!(
                "[{m} × {k}] · [{k} × {n}] with strides {} (A{}), {} (B{}), {ldc} (c)",
                a.stride,
                if a.transposed { "ᵀ" } else { "" },
                b.stride,
                if b.transposed { "ᵀ" } else { "" },
            ),
        });
    }
    let mut macros = Macros::new();
    for (on, flag) in [
        (a.transposed, "TRANS_A"),
        (b.transposed, "TRANS_B"),
        (accumulate, "ACCUMULATE"),
    ] {
        if on {
            macros = macros.flag(flag);
        }
    }
    let per_thread = layout == MatmulLayout::PerThread && k <= LOOP_BUDGET;
    // Column blocks per workgroup row: all 8 lanes side by side, or, for a c of 1, 2 or 4
    // column blocks, that many with row blocks under them.
    let col_blocks = n.div_ceil(4);
    let cb = if col_blocks < LANES && LANES.is_multiple_of(col_blocks) {
        col_blocks
    } else {
        LANES
    };
    if per_thread {
        macros = macros.flag("PER_THREAD").u32("CB", cb);
    }
    let pipeline = ctx.pipeline("matmul.wgsl", "matmul", &macros)?;
    let token_dim = match tokens {
        TokenDim::None => 0,
        TokenDim::Rows => 1,
        TokenDim::Inner => 3,
    };
    let p = params(
        ctx,
        "matmul",
        &[m, n, k, a.stride, b.stride, ldc, alpha.to_bits(), token_dim],
    );
    Ok(Dispatch::with_bindings(
        ctx,
        "matmul",
        pipeline,
        &[
            (0, bind(a.buf)),
            (1, bind(b.buf)),
            (2, bind(c)),
            (3, bind(&p)),
            (4, bind(step)),
        ],
        match (per_thread, tokens) {
            (true, TokenDim::Rows) => Grid::PerTokens {
                x: col_blocks.div_ceil(cb),
                per_y: 4 * LANES / cb,
            },
            (true, _) => Grid::Fixed([col_blocks.div_ceil(cb), m.div_ceil(4 * LANES / cb), 1]),
            (false, TokenDim::Rows) => Grid::PerTokens {
                x: n.div_ceil(TILE),
                per_y: TILE,
            },
            (false, _) => Grid::Fixed([n.div_ceil(TILE), m.div_ceil(TILE), 1]),
        },
    ))
}
