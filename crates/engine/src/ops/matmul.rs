use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};

/// Rows and columns of c per workgroup (`shaders/matmul.wgsl`).
const TILE: u32 = 16;

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
/// gradients. `tokens` names the size that is the step's token count.
pub fn matmul(
    ctx: &GpuContext,
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
        match tokens {
            TokenDim::Rows => Grid::PerTokens {
                x: n.div_ceil(TILE),
                per_y: TILE,
            },
            _ => Grid::Fixed([n.div_ceil(TILE), m.div_ceil(TILE), 1]),
        },
    ))
}
