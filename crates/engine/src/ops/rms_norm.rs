use crate::error::Result;
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::matvec::MatvecLayout;
use crate::ops::{bind, params};

const WG: u32 = 64;
/// Threads per row where a row is one subgroup ([`one_subgroup`]).
const LANES: u32 = 8;

/// Whether the forward norm runs a row as one 8-lane subgroup that sums with `subgroupAdd`
/// instead of a 64-thread workgroup summing through workgroup memory: on CPU adapters with
/// subgroups of at least 8 lanes (native lavapipe), where each of the tree's barriers is a
/// coroutine switch (a 64-token norm of 576 values: about 250 µs against 175). Browsers have
/// no subgroups here and GPUs keep the wide workgroup.
fn one_subgroup(ctx: &GpuContext) -> bool {
    matches!(ctx.matvec_layout, MatvecLayout::RowPerThread { .. })
        && ctx.shader_subgroups()
        && ctx.subgroup_min_size >= LANES
}

/// y[t, g, ..n] = rmsnorm(x[t, g, ..n]) · w for `groups` rows per token (1, or the head
/// count for per-head norms). w is f32 [n].
pub fn rms_norm(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    w: &wgpu::Buffer,
    y: &wgpu::Buffer,
    n: u32,
    groups: u32,
    eps: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    norm(ctx, [x, w, y], None, (n, groups, eps), step)
}

/// y[t, g, ..n] = rmsnorm(x[t, g, ..n]) · w · silu(z[t, g, ..n]): Qwen3.5's gated DeltaNet
/// output norm, one row per value head (`groups` heads of n = d_v, w shared by all heads).
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_gated(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    z: &wgpu::Buffer,
    w: &wgpu::Buffer,
    y: &wgpu::Buffer,
    n: u32,
    groups: u32,
    eps: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    norm(ctx, [x, w, y], Some(z), (n, groups, eps), step)
}

/// Any of the forms above (`z`: gated), also writing each row's
/// reciprocal RMS, 1 / sqrt(mean(x²) + eps), to `rstd` [T, groups] when given: what a
/// backward pass needs from the forward one.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_saving(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    w: &wgpu::Buffer,
    z: Option<&wgpu::Buffer>,
    y: &wgpu::Buffer,
    rstd: Option<&wgpu::Buffer>,
    n: u32,
    groups: u32,
    eps: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    norm_saving(ctx, [x, w, y], z, rstd, (n, groups, eps), step)
}

fn norm(
    ctx: &GpuContext,
    xwy: [&wgpu::Buffer; 3],
    z: Option<&wgpu::Buffer>,
    shape: (u32, u32, f32),
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    norm_saving(ctx, xwy, z, None, shape, step)
}

fn norm_saving(
    ctx: &GpuContext,
    [x, w, y]: [&wgpu::Buffer; 3],
    z: Option<&wgpu::Buffer>,
    rstd: Option<&wgpu::Buffer>,
    (n, groups, eps): (u32, u32, f32),
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let mut macros = if one_subgroup(ctx) {
        Macros::new().u32("WG", LANES).flag("SUBGROUPS")
    } else {
        Macros::new().u32("WG", WG)
    };
    if z.is_some() {
        macros = macros.flag("GATED");
    }
    if rstd.is_some() {
        macros = macros.flag("SAVE_RSTD");
    }
    let pipeline = ctx.pipeline("rms_norm.wgsl", "rms_norm", &macros)?;
    let p = params(ctx, "rms_norm", &[n, groups, eps.to_bits()]);
    let mut bindings: Vec<(u32, wgpu::BindingResource)> = vec![
        (0, bind(x)),
        (1, bind(w)),
        (2, bind(y)),
        (3, bind(&p)),
        (4, bind(step)),
    ];
    bindings.extend(z.map(|z| (5, bind(z))));
    bindings.extend(rstd.map(|r| (6, bind(r))));
    Ok(Dispatch::with_bindings(
        ctx,
        if z.is_some() {
            "rms_norm_gated"
        } else {
            "rms_norm"
        },
        pipeline,
        &bindings,
        Grid::PerTokens {
            x: groups,
            per_y: 1,
        },
    ))
}

/// The gated form of [`rms_norm_backward`]: the forward's z, and where its gradient goes.
pub struct GateGrad<'a> {
    pub z: &'a wgpu::Buffer,
    pub dz: &'a wgpu::Buffer,
}

/// The input gradient of [`rms_norm_saving`] (plain, or gated with `gate`) from the
/// forward's input x, weights w and saved `rstd` [T, groups]: dx (+)= ∂L/∂x for the step's
/// tokens given dy [T, groups, n]; with a gate, dz = ∂L/∂z as well. `accumulate` adds dx
/// to what is there (a residual stream's gradient).
pub fn rms_norm_backward(
    ctx: &GpuContext,
    x: &wgpu::Buffer,
    w: &wgpu::Buffer,
    rstd: &wgpu::Buffer,
    dy: &wgpu::Buffer,
    dx: &wgpu::Buffer,
    gate: Option<GateGrad>,
    n: u32,
    groups: u32,
    accumulate: bool,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let mut macros = Macros::new().u32("WG", WG);
    if gate.is_some() {
        macros = macros.flag("GATED");
    }
    if accumulate {
        macros = macros.flag("ACCUMULATE");
    }
    let pipeline = ctx.pipeline("rms_norm_backward.wgsl", "rms_norm_backward", &macros)?;
    let p = params(ctx, "rms_norm_backward", &[n, groups]);
    let mut bindings: Vec<(u32, wgpu::BindingResource)> = vec![
        (0, bind(x)),
        (1, bind(w)),
        (2, bind(rstd)),
        (3, bind(dy)),
        (4, bind(dx)),
        (5, bind(&p)),
        (6, bind(step)),
    ];
    if let Some(g) = &gate {
        bindings.extend([(7, bind(g.z)), (8, bind(g.dz))]);
    }
    Ok(Dispatch::with_bindings(
        ctx,
        "rms_norm_backward",
        pipeline,
        &bindings,
        Grid::PerTokens {
            x: groups,
            per_y: 1,
        },
    ))
}
