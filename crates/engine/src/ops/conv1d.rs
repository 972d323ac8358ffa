use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros, fold_grid};
use crate::ops::{bind, params};

const WG: u32 = 256;

/// Largest kernel size (taps live in registers).
pub const MAX_TAPS: u32 = 8;

/// y[t, c] = silu(Σ_j w[c, j] · x[t − (taps − 1) + j, c]) for the step's tokens, where inputs
/// before the step come from `state` [taps − 1, channels] (zero for a new sequence), which is
/// then updated in place to the step's last taps − 1 inputs. x, y: [T, channels]; w: f32
/// [channels, taps] (GGUF `ssm_conv1d.weight`).
#[allow(clippy::too_many_arguments)]
pub fn conv1d(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    w: &wgpu::Buffer,
    state: &wgpu::Buffer,
    y: &wgpu::Buffer,
    channels: u32,
    taps: u32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let state_bytes = (taps.saturating_sub(1) as u64 * channels as u64 * 4).max(4);
    if channels == 0 || !(2..=MAX_TAPS).contains(&taps) || state.size() < state_bytes {
        return Err(EngineError::Shape {
            op: "conv1d",
            detail: format!(
                "{channels} channels, kernel {taps} (2..={MAX_TAPS}), state of {} bytes (needs {state_bytes})",
                state.size()
            ),
        });
    }
    let macros = Macros::new().u32("WG", WG).u32("N_TAPS", taps);
    let pipeline = ctx.pipeline("conv1d.wgsl", "conv1d", &macros)?;
    let p = params(ctx, "conv1d", &[channels]);
    let (gx, gz) = fold_grid(channels.div_ceil(WG));
    Ok(Dispatch::new(
        ctx,
        "conv1d",
        pipeline,
        &[bind(x), bind(w), bind(state), bind(y), bind(&p), bind(step)],
        Grid::Fixed([gx, 1, gz]),
    ))
}

/// The input gradient of [`conv1d`] for a step of one sequence: from the step's inputs x
/// [T, channels], the weights, the state the step started from (rows `state_row0` ..
/// `state_row0 + taps − 1` of `state_in`, which may be the step before's inputs), dy [T, channels] and the gradient of the state the step left behind
/// `d_state_out` (zeros for a sequence's last step), writes dx [T, channels] and
/// `d_state_in`, the gradient the step before receives as its `d_state_out`.
#[allow(clippy::too_many_arguments)]
pub fn conv1d_backward(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    w: &wgpu::Buffer,
    state_in: &wgpu::Buffer,
    state_row0: u32,
    dy: &wgpu::Buffer,
    d_state_out: &wgpu::Buffer,
    dx: &wgpu::Buffer,
    d_state_in: &wgpu::Buffer,
    channels: u32,
    taps: u32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let state_bytes = (taps.saturating_sub(1) as u64 * channels as u64 * 4).max(4);
    let small = [d_state_out, d_state_in]
        .iter()
        .any(|b| b.size() < state_bytes)
        || state_in.size() < state_bytes + state_row0 as u64 * channels as u64 * 4;
    if channels == 0 || !(2..=MAX_TAPS).contains(&taps) || small {
        return Err(EngineError::Shape {
            op: "conv1d_backward",
            detail: format!(
                "{channels} channels, kernel {taps} (2..={MAX_TAPS}), state buffers of at least {state_bytes} bytes"
            ),
        });
    }
    let macros = Macros::new().u32("WG", WG).u32("N_TAPS", taps);
    let pipeline = ctx.pipeline("conv1d_backward.wgsl", "conv1d_backward", &macros)?;
    let p = params(ctx, "conv1d_backward", &[channels, state_row0]);
    let (gx, gz) = fold_grid(channels.div_ceil(WG));
    Ok(Dispatch::new(
        ctx,
        "conv1d_backward",
        pipeline,
        &[
            bind(x),
            bind(w),
            bind(state_in),
            bind(dy),
            bind(d_state_out),
            bind(dx),
            bind(d_state_in),
            bind(&p),
            bind(step),
        ],
        Grid::Fixed([gx, 1, gz]),
    ))
}
