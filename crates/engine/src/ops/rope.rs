use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::{bind, params};
use crate::tensor::DType;

const WG: u32 = 64;

/// How rotary pairs are laid out in a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs (2i, 2i+1): llama GGUFs (the converter permuted Q/K rows for it).
    Interleaved,
    /// Halves (i, i + n_rot/2): NeoX / Qwen.
    Neox,
}

/// theta_i = base^(-2i / n_rot), in f64 then rounded, for i < n_rot / 2.
pub fn frequencies(base: f64, n_rot: u32) -> Vec<f32> {
    (0..n_rot / 2)
        .map(|i| base.powf(-2.0 * i as f64 / n_rot as f64) as f32)
        .collect()
}

/// Rotates the first `n_rot` dims of every head of x [T, n_heads, head_dim] in place.
pub fn rope(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    freqs: &wgpu::Buffer,
    n_heads: u32,
    head_dim: u32,
    n_rot: u32,
    mode: RopeMode,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    rotate(ctx, x, freqs, [n_heads, head_dim, n_rot], mode, false, step)
}

/// The gradient of [`rope`]: rotates dy [T, n_heads, head_dim] in place by the opposite
/// angles (the rotation is orthogonal, so its transpose is its inverse), turning the
/// gradient of the rotated values into that of the values before the rotation.
pub fn rope_backward(
    ctx: &GpuContext,
    dy: &wgpu::Buffer,
    freqs: &wgpu::Buffer,
    n_heads: u32,
    head_dim: u32,
    n_rot: u32,
    mode: RopeMode,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    rotate(ctx, dy, freqs, [n_heads, head_dim, n_rot], mode, true, step)
}

fn rotate(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    freqs: &wgpu::Buffer,
    [n_heads, head_dim, n_rot]: [u32; 3],
    mode: RopeMode,
    backward: bool,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    check_rotation(n_rot, head_dim)?;
    let mut macros = mode_macros(mode);
    if backward {
        macros = macros.flag("BACKWARD");
    }
    let pipeline = ctx.pipeline("rope.wgsl", "rope", &macros)?;
    let p = params(ctx, "rope", &[n_heads, head_dim, n_rot]);
    Ok(Dispatch::new(
        ctx,
        if backward { "rope_backward" } else { "rope" },
        pipeline,
        &[bind(x), bind(freqs), bind(&p), bind(step)],
        Grid::PerTokens {
            x: (n_heads * n_rot / 2).div_ceil(WG),
            per_y: 1,
        },
    ))
}

fn check_rotation(n_rot: u32, head_dim: u32) -> Result<()> {
    if n_rot > head_dim || !n_rot.is_multiple_of(2) || !head_dim.is_multiple_of(2) {
        return Err(EngineError::Shape {
            op: "rope",
            detail: format!("n_rot {n_rot} with head dim {head_dim}"),
        });
    }
    Ok(())
}

fn mode_macros(mode: RopeMode) -> Macros {
    let macros = Macros::new().u32("WG", WG);
    match mode {
        RopeMode::Neox => macros.flag("NEOX"),
        RopeMode::Interleaved => macros,
    }
}

/// A step's new K and V rows into a layer's caches: k_new rotated as [`rope`] would, v_new
/// as it is (both [T, n_heads · head_dim], f32), each token's row written to its cache row
/// (`Step.tok[t].y`) of `k_cache`/`v_cache` in the caches' element type (`cache`: f32, or
/// f16 packed in pairs).
pub fn rope_store(
    ctx: &GpuContext,
    [k_new, v_new]: [&wgpu::Buffer; 2],
    freqs: &wgpu::Buffer,
    [k_cache, v_cache]: [&wgpu::Buffer; 2],
    cache: DType,
    [n_heads, head_dim, n_rot]: [u32; 3],
    mode: RopeMode,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    check_rotation(n_rot, head_dim)?;
    let mut macros = mode_macros(mode).flag("STORE");
    if cache == DType::F16 {
        macros = macros.flag("KV_F16");
    }
    let pipeline = ctx.pipeline("rope.wgsl", "rope_store", &macros)?;
    let p = params(ctx, "rope_store", &[n_heads, head_dim, n_rot]);
    Ok(Dispatch::new(
        ctx,
        "rope_store",
        pipeline,
        &[
            bind(k_new),
            bind(freqs),
            bind(&p),
            bind(step),
            bind(v_new),
            bind(k_cache),
            bind(v_cache),
        ],
        Grid::PerTokens {
            x: (n_heads * head_dim / 2).div_ceil(WG),
            per_y: 1,
        },
    ))
}
