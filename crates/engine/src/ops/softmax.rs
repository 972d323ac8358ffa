use crate::error::EngineError;
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

/// y[t] = log softmax(x[t])[targets[t]] for the step's tokens t (rows of `n` values, at most
/// `max_rows` of them): the log-probabilities of given tokens, one float per row.
pub fn gather_log_probs(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    targets: &wgpu::Buffer,
    y: &wgpu::Buffer,
    n: u32,
    max_rows: u32,
) -> Result<Dispatch> {
    if n == 0 || max_rows == 0 {
        return Err(EngineError::Shape {
            op: "gather_log_probs",
            detail: format!("{max_rows} rows of {n}"),
        });
    }
    let macros = Macros::new().u32("WG", WG).flag("LOG").flag("GATHER");
    let pipeline = ctx.pipeline("softmax.wgsl", "softmax", &macros)?;
    let p = params(ctx, "log probs", &[n, max_rows]);
    Ok(Dispatch::new(
        ctx,
        "log_probs",
        pipeline,
        &[bind(x), bind(y), bind(&p), bind(targets)],
        Grid::PerTokens { x: 1, per_y: 1 },
    ))
}

/// The gradient of Σ_t coef[t] · log softmax(x[t])[targets[t]] with respect to the logits x,
/// dx[t, i] = coef[t] · ([i = targets[t]] − softmax(x[t])_i), for the step's tokens t (rows
/// of `n` values, at most `max_rows`): the policy-gradient loss's way back into the LM head,
/// with its per-token weights (advantage, clipping, normalisation) in `coef`.
pub fn log_prob_backward(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    targets: &wgpu::Buffer,
    coef: &wgpu::Buffer,
    dx: &wgpu::Buffer,
    n: u32,
    max_rows: u32,
) -> Result<Dispatch> {
    if n == 0 || max_rows == 0 {
        return Err(EngineError::Shape {
            op: "log_prob_backward",
            detail: format!("{max_rows} rows of {n}"),
        });
    }
    let macros = Macros::new()
        .u32("WG", WG)
        .flag("LOG")
        .flag("GATHER")
        .flag("GRAD");
    let pipeline = ctx.pipeline("softmax.wgsl", "softmax", &macros)?;
    let p = params(ctx, "log prob grad", &[n, max_rows]);
    Ok(Dispatch::new(
        ctx,
        "log_prob_backward",
        pipeline,
        &[bind(x), bind(dx), bind(&p), bind(targets), bind(coef)],
        Grid::PerTokens { x: 1, per_y: 1 },
    ))
}
