use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros, fold_grid};
use crate::ops::{bind, params};

const WG: u32 = 256;

/// One AdamW step's settings (see `shaders/adamw.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWStep {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// The step number, from 1 (bias corrections 1 − β^t).
    pub t: u32,
    /// Gradient clipping's factor (1 without clipping).
    pub grad_scale: f32,
}

/// AdamW on `n` values of `param` in place, with its moments `m` and `v`; `param_scale`: the
/// parameter is stored times that, its gradient is of the unscaled one.
pub fn adamw(
    ctx: &GpuContext,
    param: &wgpu::Buffer,
    grad: &wgpu::Buffer,
    m: &wgpu::Buffer,
    v: &wgpu::Buffer,
    n: u32,
    s: &AdamWStep,
    param_scale: f32,
) -> Result<Dispatch> {
    if s.t == 0 || n == 0 || [param, grad, m, v].iter().any(|b| b.size() < n as u64 * 4) {
        return Err(EngineError::Shape {
            op: "adamw",
            detail: format!("{n} values at step {}", s.t),
        });
    }
    let pipeline = ctx.pipeline("adamw.wgsl", "adamw", &Macros::new().u32("WG", WG))?;
    let bc1 = 1.0 - (s.beta1 as f64).powi(s.t as i32);
    let bc2 = 1.0 - (s.beta2 as f64).powi(s.t as i32);
    let p = params(
        ctx,
        "adamw",
        &[
            n,
            s.lr.to_bits(),
            s.beta1.to_bits(),
            s.beta2.to_bits(),
            s.eps.to_bits(),
            s.weight_decay.to_bits(),
            (bc1 as f32).to_bits(),
            (bc2 as f32).to_bits(),
            s.grad_scale.to_bits(),
            param_scale.to_bits(),
            0,
        ],
    );
    let (x, z) = fold_grid(n.div_ceil(WG));
    Ok(Dispatch::with_bindings(
        ctx,
        "adamw",
        pipeline,
        &[
            (0, bind(param)),
            (1, bind(grad)),
            (2, bind(m)),
            (3, bind(v)),
            (4, bind(&p)),
        ],
        Grid::Fixed([x, 1, z]),
    ))
}

/// out[index] = Σ grad[..n]²: one tensor's part of a global gradient norm.
pub fn sum_squares(
    ctx: &GpuContext,
    grad: &wgpu::Buffer,
    n: u32,
    out: &wgpu::Buffer,
    index: u32,
) -> Result<Dispatch> {
    if grad.size() < n as u64 * 4 || out.size() < (index as u64 + 1) * 4 {
        return Err(EngineError::Shape {
            op: "sum_squares",
            detail: format!("{n} values into slot {index}"),
        });
    }
    let pipeline = ctx.pipeline("adamw.wgsl", "sum_squares", &Macros::new().u32("WG", WG))?;
    let mut words = [0u32; 11];
    words[0] = n;
    words[10] = index;
    let p = params(ctx, "sum_squares", &words);
    Ok(Dispatch::with_bindings(
        ctx,
        "sum_squares",
        pipeline,
        &[(1, bind(grad)), (4, bind(&p)), (5, bind(out))],
        Grid::Fixed([1, 1, 1]),
    ))
}
