use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::matvec::MatvecLayout;
use crate::ops::{self, LOOP_BUDGET, bind, params};

/// State columns per workgroup.
const COLS: u32 = 16;
/// Lanes per workgroup of the per-lane layout: one SIMD vector of llvmpipe.
const LANES: u32 = 8;
/// Threads sharing one column (each holds ceil(d_k / SPLIT) rows of it).
const SPLIT: u32 = 8;
/// Tokens per chunk of the chunked form.
pub const CHUNK: u32 = 32;
/// Largest key head dim (the recurrent form keeps d_k / SPLIT state rows per thread).
pub const MAX_HEAD_DIM: u32 = 256;

/// How the recurrent form's threads share a head's state (see `shaders/delta_net.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaNetLayout {
    /// A subgroup of [`LANES`] lanes per four state columns, sums added across it by
    /// shuffles, no barriers: CPU adapters with subgroups of at least [`LANES`] (natively),
    /// where it also runs prefill.
    PerLane,
    /// SPLIT threads per column, sums reduced in workgroup memory: GPUs, and CPU adapters
    /// without such subgroups.
    Split,
}

impl DeltaNetLayout {
    /// The per-lane layout on CPU adapters (those that get matvec's row-per-thread layout)
    /// where it can run `shape`, else split.
    pub fn for_shape(ctx: &GpuContext, shape: &DeltaNetShape) -> Self {
        if matches!(ctx.matvec_layout, MatvecLayout::RowPerThread { .. })
            && per_lane_allowed(ctx, shape)
        {
            Self::PerLane
        } else {
            Self::Split
        }
    }
}

/// Whether [`DeltaNetLayout::PerLane`] can run `shape` here: subgroups of at least [`LANES`]
/// invocations (native only, as for matvec: browsers need `enable subgroups;`, which naga
/// rejects), and value heads a whole number of vec4s wide.
pub fn per_lane_allowed(ctx: &GpuContext, shape: &DeltaNetShape) -> bool {
    ctx.shader_subgroups() && ctx.subgroup_min_size >= LANES && shape.d_v.is_multiple_of(4)
}

/// A typed error where [`DeltaNetLayout::PerLane`] cannot run `shape` (for `op`).
fn check_per_lane(ctx: &GpuContext, shape: &DeltaNetShape, op: &'static str) -> Result<()> {
    if per_lane_allowed(ctx, shape) {
        return Ok(());
    }
    Err(EngineError::Shape {
        op,
        detail: format!(
            "the per-lane layout needs subgroups of at least {LANES} invocations (this adapter's: {}) and value heads a multiple of 4 wide ({})",
            ctx.subgroup_min_size, shape.d_v
        ),
    })
}

/// Head layout of a Gated DeltaNet layer (GGUF: `ssm.group_count` = n_k, `ssm.time_step_rank`
/// = n_v, `ssm.state_size` = d_k, `ssm.inner_size` / n_v = d_v).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeltaNetShape {
    pub n_k: u32,
    pub n_v: u32,
    pub d_k: u32,
    pub d_v: u32,
    /// The L2-norm eps for q and k (the model's RMS eps; 1e-6 for Qwen3.5).
    pub eps: f32,
}

impl DeltaNetShape {
    /// Channels of the conv output the kernels read: q, k (n_k · d_k each), v (n_v · d_v).
    pub fn qkv_len(&self) -> u64 {
        2 * self.n_k as u64 * self.d_k as u64 + self.n_v as u64 * self.d_v as u64
    }

    /// f32 values of one sequence's state: n_v heads of [d_k, d_v].
    pub fn state_len(&self) -> u64 {
        self.n_v as u64 * self.d_k as u64 * self.d_v as u64
    }

    /// Scratch words per (chunk, head) of the chunked form.
    fn chunk_words(&self) -> u64 {
        let c = CHUNK as u64;
        c * (self.d_k as u64 + self.d_v as u64) + c * c + 2 * c + 1
    }

    /// Bytes of scratch the chunked form needs for steps of up to `max_tokens` tokens.
    /// f32 values of the incoming states of a step's chunks (what
    /// [`delta_net_chunked_saving`] keeps): [chunks, n_v, d_k, d_v].
    pub fn chunk_states_len(&self, max_tokens: u32) -> u64 {
        max_tokens.div_ceil(CHUNK) as u64 * self.state_len()
    }

    pub fn chunk_scratch_bytes(&self, max_tokens: u32) -> u64 {
        max_tokens.div_ceil(CHUNK) as u64 * self.n_v as u64 * self.chunk_words() * 4
    }

    fn check(&self, op: &'static str, state: &wgpu::Buffer) -> Result<()> {
        let ok = self.n_k > 0
            && self.n_v.is_multiple_of(self.n_k)
            && (1..=MAX_HEAD_DIM).contains(&self.d_k)
            && self.d_v > 0
            && self.qkv_len() <= u32::MAX as u64 / 4
            && state.size() >= self.state_len() * 4;
        if ok {
            return Ok(());
        }
        Err(EngineError::Shape {
            op,
            detail: format!(
                "{self:?} (n_v a multiple of n_k, d_k ≤ {MAX_HEAD_DIM}), state of {} bytes (needs {})",
                state.size(),
                self.state_len() * 4
            ),
        })
    }

    fn macros(&self) -> Macros {
        Macros::new()
            .u32("COLS", COLS)
            .u32("SPLIT", SPLIT)
            .u32("MAX_R", self.d_k.div_ceil(SPLIT))
            .u32("CHUNK", CHUNK)
    }

    fn params(&self, ctx: &GpuContext) -> wgpu::Buffer {
        self.params_for_tokens(ctx, 0, u32::MAX)
    }

    /// [`Self::params`] for the per-lane walk over the step's tokens `from .. to`.
    fn params_for_tokens(&self, ctx: &GpuContext, from: u32, to: u32) -> wgpu::Buffer {
        let q_scale = 1.0 / (self.d_k as f32).sqrt();
        params(
            ctx,
            "delta_net",
            &[
                self.n_k,
                self.n_v,
                self.d_k,
                self.d_v,
                self.eps.to_bits(),
                q_scale.to_bits(),
                self.chunk_words() as u32,
                from,
                to,
            ],
        )
    }

    /// Tokens one dispatch of the per-lane form walks where loops are cut short: per token,
    /// the two sums over d_k in blocks of LANES, and at most a sequence switch (the state
    /// stored and loaded) and a checkpoint stored, each a loop over d_k; within the budget.
    fn per_lane_tokens(&self, ctx: &GpuContext) -> u32 {
        if !ctx.loops_limited() {
            return ops::MAX_STEP_TOKENS as u32;
        }
        let per_token = 2 * self.d_k.div_ceil(LANES) * (1 + LANES) + 4 * self.d_k;
        (LOOP_BUDGET / per_token).max(1)
    }

    /// One workgroup per (value head, block of COLS state columns).
    fn column_grid(&self) -> Grid {
        Grid::Fixed([self.n_v, self.d_v.div_ceil(COLS), 1])
    }
}

/// A DeltaNet layer's per-token inputs and parameters, all f32.
pub struct DeltaNetInputs<'a> {
    /// The conv output [T, qkv_len]: q heads, k heads, then v heads (GGUF value-head order).
    pub qkv: &'a wgpu::Buffer,
    /// `ssm_alpha` · x [T, n_v].
    pub alpha: &'a wgpu::Buffer,
    /// `ssm_beta` · x [T, n_v], before the sigmoid.
    pub beta: &'a wgpu::Buffer,
    /// `ssm_a` [n_v] (= −exp(A_log)).
    pub a: &'a wgpu::Buffer,
    /// `ssm_dt.bias` [n_v].
    pub dt_bias: &'a wgpu::Buffer,
}

impl DeltaNetInputs<'_> {
    fn bindings(&self) -> Vec<(u32, wgpu::BindingResource<'_>)> {
        vec![
            (0, bind(self.qkv)),
            (1, bind(self.alpha)),
            (2, bind(self.beta)),
            (3, bind(self.a)),
            (4, bind(self.dt_bias)),
        ]
    }
}

/// The gated delta rule token by token over the step's tokens (`shaders/delta_net.wgsl`):
/// out [T, n_v, d_v], with `state` [n_v, d_k, d_v] (zero for a new sequence) carried in and
/// updated in place. Any step length; the form for decode, in the adapter's layout.
pub fn delta_net(
    ctx: &GpuContext,
    shape: &DeltaNetShape,
    inputs: &DeltaNetInputs<'_>,
    state: &wgpu::Buffer,
    out: &wgpu::Buffer,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    let layout = DeltaNetLayout::for_shape(ctx, shape);
    delta_net_with(ctx, layout, shape, inputs, state, out, step)
}

/// [`delta_net`] in a given layout (tests run both).
pub fn delta_net_with(
    ctx: &GpuContext,
    layout: DeltaNetLayout,
    shape: &DeltaNetShape,
    inputs: &DeltaNetInputs<'_>,
    state: &wgpu::Buffer,
    out: &wgpu::Buffer,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    recurrent(ctx, layout, shape, inputs, state, out, None, step)
}

/// [`delta_net`] in the per-lane layout over a prefill step of one sequence that also writes
/// each [`CHUNK`] tokens' incoming state to `states`, as [`delta_net_chunked_saving`] does
/// (what a backward pass restarts each chunk from): the training graph's form on CPU adapters.
#[allow(clippy::too_many_arguments)]
pub fn delta_net_keeping(
    ctx: &GpuContext,
    shape: &DeltaNetShape,
    inputs: &DeltaNetInputs<'_>,
    state: &wgpu::Buffer,
    out: &wgpu::Buffer,
    states: &wgpu::Buffer,
    max_tokens: u32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    check_states(shape, states, max_tokens)?;
    let layout = DeltaNetLayout::PerLane;
    recurrent(ctx, layout, shape, inputs, state, out, Some(states), step)
}

fn check_states(shape: &DeltaNetShape, states: &wgpu::Buffer, max_tokens: u32) -> Result<()> {
    if states.size() >= shape.chunk_states_len(max_tokens) * 4 {
        return Ok(());
    }
    Err(EngineError::Shape {
        op: "delta_net",
        detail: format!(
            "chunk states of {} bytes for {max_tokens} tokens (needs {})",
            states.size(),
            shape.chunk_states_len(max_tokens) * 4
        ),
    })
}

#[allow(clippy::too_many_arguments)]
fn recurrent(
    ctx: &GpuContext,
    layout: DeltaNetLayout,
    shape: &DeltaNetShape,
    inputs: &DeltaNetInputs<'_>,
    state: &wgpu::Buffer,
    out: &wgpu::Buffer,
    states: Option<&wgpu::Buffer>,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    shape.check("delta_net", state)?;
    let (macros, grid) = match layout {
        DeltaNetLayout::Split => (shape.macros(), shape.column_grid()),
        DeltaNetLayout::PerLane => {
            check_per_lane(ctx, shape, "delta_net")?;
            let m = Macros::new()
                .flag("PER_THREAD")
                .u32("COLS", LANES)
                .u32("SPLIT", 1)
                .u32("MAX_R", shape.d_k)
                .u32("CHUNK", CHUNK);
            (m, Grid::Fixed([shape.n_v, shape.lane_blocks(), 1]))
        }
    };
    let macros = match states {
        Some(_) => macros.flag("SAVE_STATES"),
        None => macros,
    };
    let pipeline = ctx.pipeline("delta_net.wgsl", "delta_net", &macros)?;
    let walk = |from: u32, to: u32| {
        let p = shape.params_for_tokens(ctx, from, to);
        let mut bindings = inputs.bindings();
        bindings.extend([
            (5, bind(state)),
            (6, bind(out)),
            (8, bind(&p)),
            (9, bind(step)),
        ]);
        bindings.extend(states.map(|s| (10, bind(s))));
        Dispatch::with_bindings(ctx, "delta_net", pipeline.clone(), &bindings, grid)
    };
    if layout == DeltaNetLayout::Split {
        return Ok(walk(0, u32::MAX));
    }
    // The per-lane form walks a step's tokens in ranges of at most `range`, one dispatch
    // each (carrying the state on through `state`); a step skips the ranges past its tokens.
    let range = shape.per_lane_tokens(ctx);
    let starts: Vec<u32> = (0..ops::MAX_STEP_TOKENS as u32)
        .step_by(range as usize)
        .collect();
    let mut chain = None;
    for &from in starts.iter().rev() {
        let d = walk(from, from + range).skipped_up_to(from);
        chain = Some(match chain {
            Some(next) => d.then(next),
            None => d,
        });
    }
    Ok(chain.expect("a step holds at least one token"))
}

/// The same rule in chunks of [`CHUNK`] tokens, for prefill: a pass over all chunks in
/// parallel, then a scan over chunks per head. Same result as [`delta_net`] up to rounding.
/// `scratch` holds [`DeltaNetShape::chunk_scratch_bytes`] for `max_tokens`, the longest step.
#[allow(clippy::too_many_arguments)]
pub fn delta_net_chunked(
    ctx: &GpuContext,
    shape: &DeltaNetShape,
    inputs: &DeltaNetInputs<'_>,
    state: &wgpu::Buffer,
    out: &wgpu::Buffer,
    scratch: &wgpu::Buffer,
    max_tokens: u32,
    step: &wgpu::Buffer,
) -> Result<[Dispatch; 2]> {
    delta_net_chunked_saving(
        ctx, shape, inputs, state, out, scratch, None, max_tokens, step,
    )
}

/// [`delta_net_chunked`] that also writes each chunk's incoming state to `states`
/// ([`DeltaNetShape::chunk_states_len`] values: [chunk, n_v, d_k, d_v]), for a backward pass.
#[allow(clippy::too_many_arguments)]
pub fn delta_net_chunked_saving(
    ctx: &GpuContext,
    shape: &DeltaNetShape,
    inputs: &DeltaNetInputs<'_>,
    state: &wgpu::Buffer,
    out: &wgpu::Buffer,
    scratch: &wgpu::Buffer,
    states: Option<&wgpu::Buffer>,
    max_tokens: u32,
    step: &wgpu::Buffer,
) -> Result<[Dispatch; 2]> {
    shape.check("delta_net_chunked", state)?;
    if let Some(states) = states {
        check_states(shape, states, max_tokens)?;
    }
    let need = shape.chunk_scratch_bytes(max_tokens);
    // The scan keeps a [d_k, COLS] block of S and the chunk's Δ in workgroup memory.
    let shared = (shape.d_k.div_ceil(SPLIT) * SPLIT + CHUNK) * COLS * 4;
    if scratch.size() < need || shared > ctx.limits.max_compute_workgroup_storage_size {
        return Err(EngineError::Shape {
            op: "delta_net_chunked",
            detail: format!(
                "scratch of {} bytes for {max_tokens} tokens (needs {need}); d_k {} needs {shared} bytes of workgroup memory (the adapter allows {})",
                scratch.size(),
                shape.d_k,
                ctx.limits.max_compute_workgroup_storage_size
            ),
        });
    }
    let macros = shape.macros();
    let p = shape.params(ctx);
    let mut prep = inputs.bindings();
    prep.extend([(7, bind(scratch)), (8, bind(&p)), (9, bind(step))]);
    let mut scan = vec![
        (0, bind(inputs.qkv)),
        (5, bind(state)),
        (6, bind(out)),
        (7, bind(scratch)),
        (8, bind(&p)),
        (9, bind(step)),
    ];
    let mut scan_macros = macros.clone();
    if let Some(states) = states {
        scan.push((10, bind(states)));
        scan_macros = scan_macros.flag("SAVE_STATES");
    }
    Ok([
        Dispatch::with_bindings(
            ctx,
            "delta_chunk_prep",
            ctx.pipeline("delta_net.wgsl", "delta_chunk_prep", &macros)?,
            &prep,
            Grid::PerTokens {
                x: shape.n_v,
                per_y: CHUNK,
            },
        ),
        Dispatch::with_bindings(
            ctx,
            "delta_chunk_scan",
            ctx.pipeline("delta_net.wgsl", "delta_chunk_scan", &scan_macros)?,
            &scan,
            shape.column_grid(),
        ),
    ])
}

/// Threads of [`delta_net_backward`]'s workgroup: one per state column, so d_v ≤ this.
const BACKWARD_WG: u32 = 128;
/// Widest key head [`delta_net_backward`] takes (a thread keeps a column of S and of dS).
pub const BACKWARD_MAX_DK: u32 = 256;

/// What [`delta_net_backward`] reads besides the forward's inputs, and what it writes.
pub struct DeltaNetGrads<'a> {
    /// The state the step started from [n_v, d_k, d_v].
    pub state_in: &'a wgpu::Buffer,
    /// ∂L/∂out [T, n_v, d_v].
    pub d_out: &'a wgpu::Buffer,
    /// [n_v, d_k, d_v]: on entry ∂L/∂(the state the step left), zeros after a sequence's last
    /// step; on exit ∂L/∂state_in, what the step before takes as its own.
    pub d_state: &'a wgpu::Buffer,
    /// Written: ∂L/∂qkv [T, qkv_len], ∂L/∂alpha and ∂L/∂beta [T, n_v] (beta before its
    /// sigmoid).
    pub dqkv: &'a wgpu::Buffer,
    pub d_alpha: &'a wgpu::Buffer,
    pub d_beta: &'a wgpu::Buffer,
    /// Scratch of [`DeltaNetShape::backward_scratch_len`] floats.
    pub scratch: &'a wgpu::Buffer,
}

impl DeltaNetShape {
    /// f32 values of [`delta_net_backward`]'s scratch for steps of up to `max_tokens`: the
    /// state at each chunk's start, the states before each token of one chunk, the
    /// per-value-head gradients of q̂ and k̂, and of β and γ.
    pub fn backward_scratch_len(&self, max_tokens: u32) -> u64 {
        self.backward_scratch_offsets(max_tokens)[3]
    }

    /// Offsets in floats of the scratch's parts (chunk states at 0, token states, dqk,
    /// dgate) and its end.
    fn backward_scratch_offsets(&self, max_tokens: u32) -> [u64; 4] {
        let tokens = max_tokens.div_ceil(CHUNK) as u64 * self.state_len();
        let dqk = tokens + CHUNK as u64 * self.state_len();
        // Sums per column block: room for the per-lane layout's.
        let per_head = max_tokens as u64 * self.n_v as u64 * self.lane_blocks() as u64;
        let gates = dqk + per_head * 2 * self.d_k as u64;
        [tokens, dqk, gates, gates + per_head * 2]
    }

    /// Column blocks per value head of the per-lane layout, forward and backward (a subgroup
    /// of [`LANES`] lanes, four columns each).
    fn lane_blocks(&self) -> u32 {
        self.d_v.div_ceil(4 * LANES)
    }
}

/// The most tokens a step of [`delta_net_backward`] may hold on `ctx`: CPU adapters end a
/// shader's loops after 65535 iterations in all, and one invocation walks the step's tokens
/// (the replays, and per token the loops over d_k and the sums over columns); no limit
/// elsewhere.
pub fn backward_max_tokens(ctx: &GpuContext, s: &DeltaNetShape) -> u32 {
    if !ctx.loops_limited() {
        return u32::MAX;
    }
    let per_token = 11 * s.d_k as u64
        + (s.d_k as u64).div_ceil(8) * (8 + BACKWARD_WG as u64)
        + 2 * BACKWARD_WG as u64;
    (LOOP_BUDGET as u64 / per_token).clamp(1, u32::MAX as u64) as u32
}

/// The gradients of the gated delta rule ([`delta_net`]) for a step of one sequence of at
/// most `max_tokens` tokens, from the forward's inputs and the state it started from; the
/// states between tokens are recomputed (see `shaders/delta_net_backward.wgsl`). Three
/// dispatches, in order.
pub fn delta_net_backward(
    ctx: &GpuContext,
    inputs: &DeltaNetInputs,
    grads: &DeltaNetGrads,
    shape: DeltaNetShape,
    max_tokens: u32,
    step: &wgpu::Buffer,
) -> Result<Vec<Dispatch>> {
    let layout = DeltaNetLayout::for_shape(ctx, &shape);
    delta_net_backward_with(ctx, layout, inputs, grads, shape, max_tokens, step)
}

/// [`delta_net_backward`] with its main pass in a given layout (tests run both): per lane, a
/// subgroup per block of 32 state columns, its sums over columns kept per block.
pub fn delta_net_backward_with(
    ctx: &GpuContext,
    layout: DeltaNetLayout,
    inputs: &DeltaNetInputs,
    grads: &DeltaNetGrads,
    shape: DeltaNetShape,
    max_tokens: u32,
    step: &wgpu::Buffer,
) -> Result<Vec<Dispatch>> {
    let s = shape;
    if layout == DeltaNetLayout::PerLane {
        check_per_lane(ctx, &s, "delta_net_backward")?;
    }
    if s.n_k == 0
        || s.n_v == 0
        || !s.n_v.is_multiple_of(s.n_k)
        || s.d_k == 0
        || s.d_k > BACKWARD_MAX_DK
        || s.d_v == 0
        || s.d_v > BACKWARD_WG
    {
        return Err(EngineError::Shape {
            op: "delta_net_backward",
            detail: format!(
                "{s:?}: value heads a multiple of key heads, d_k ≤ {BACKWARD_MAX_DK}, d_v ≤ {BACKWARD_WG}"
            ),
        });
    }
    let most = backward_max_tokens(ctx, &s);
    if max_tokens > most {
        return Err(EngineError::Shape {
            op: "delta_net_backward",
            detail: format!(
                "steps of {max_tokens} tokens with d_k {}: a CPU adapter ends a shader's loops after 65535 iterations; use steps of at most {most} tokens",
                s.d_k,
            ),
        });
    }
    let [tokens, dqk, gates, end] = s.backward_scratch_offsets(max_tokens);
    if grads.scratch.size() < end * 4 || end > u32::MAX as u64 {
        return Err(EngineError::Shape {
            op: "delta_net_backward",
            detail: format!(
                "scratch of {} bytes, {} needed (at most 2³² floats)",
                grads.scratch.size(),
                end * 4
            ),
        });
    }
    let macros = Macros::new()
        .u32("WG", BACKWARD_WG)
        .u32("MAX_DK", s.d_k.next_multiple_of(4))
        .u32("CHUNK", CHUNK);
    let (main, main_grid, blocks) = match layout {
        DeltaNetLayout::PerLane => (
            macros.clone().flag("PER_THREAD").u32("COLS", LANES),
            Grid::Fixed([s.n_v, s.lane_blocks(), 1]),
            s.lane_blocks(),
        ),
        DeltaNetLayout::Split => (macros.clone(), Grid::Fixed([s.n_v, 1, 1]), 1),
    };
    let p = params(
        ctx,
        "delta_net_backward",
        &[
            s.n_k,
            s.n_v,
            s.d_k,
            s.d_v,
            s.eps.to_bits(),
            (1.0 / (s.d_k as f32).sqrt()).to_bits(),
            tokens as u32,
            dqk as u32,
            gates as u32,
            blocks,
        ],
    );
    let entry = |name: &'static str,
                 macros: &Macros,
                 extra: Vec<(u32, wgpu::BindingResource)>,
                 grid: Grid|
     -> Result<Dispatch> {
        let mut bindings = inputs.bindings();
        bindings.extend(extra);
        bindings.extend([(11, bind(grads.scratch)), (12, bind(&p)), (13, bind(step))]);
        let pipeline = ctx.pipeline("delta_net_backward.wgsl", name, macros)?;
        Ok(Dispatch::with_bindings(
            ctx, name, pipeline, &bindings, grid,
        ))
    };
    Ok(vec![
        entry(
            "delta_net_backward_replay",
            &macros,
            vec![(5, bind(grads.state_in))],
            Grid::Fixed([s.n_v, 1, 1]),
        )?,
        entry(
            "delta_net_backward",
            &main,
            vec![
                (6, bind(grads.d_out)),
                (7, bind(grads.d_state)),
                (8, bind(grads.dqkv)),
            ],
            main_grid,
        )?,
        entry(
            "delta_net_backward_qk",
            &macros,
            vec![
                (8, bind(grads.dqkv)),
                (9, bind(grads.d_alpha)),
                (10, bind(grads.d_beta)),
            ],
            Grid::PerTokens { x: s.n_k, per_y: 1 },
        )?,
    ])
}
