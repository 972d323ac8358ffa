use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::{Dispatch, Grid, Macros};
use crate::ops::matvec::MatvecLayout;
use crate::ops::{LOOP_BUDGET, bind, params};
use crate::tensor::DType;

const WG: u32 = 64;
/// Tokens per workgroup of the per-thread layout (`shaders/attention.wgsl`).
const LANES: u32 = 8;
/// Widest head the per-thread layout's lane-per-token entry takes for steps of many tokens:
/// a thread keeps whole K/V rows and its output in registers, and past this its loops over
/// a row stay rolled and the rows live in memory. A 64-token step of 128-wide heads (16 of
/// them over 8 KV heads, lavapipe) took 276 ms after no positions and 27 s after 4,032
/// lane-per-token, 40.7 ms and 2.8 s in the workgroup layout, 6.9 ms and 519 ms through
/// `attention_decode`; 64-wide heads are faster lane-per-token (34.7 against 56.4 ms after
/// 4,032 positions, SmolLM2's 9 over 3).
const PER_THREAD_MAX_DIM: u32 = 64;
/// Widest head its `attention_decode` entry takes (subgroups): a lane holds one K row and an
/// eighth of the output. Heads wider than [`PER_THREAD_MAX_DIM`] take it for steps of any
/// size (FrogNano's 256-wide heads: 3x faster than the workgroup layout on lavapipe, in
/// decode and in 64-token steps; 128-wide heads 5.4x).
const DECODE_MAX_DIM: u32 = 256;
/// Steps of at most this many tokens (decode, a few sequences at once) use the per-thread
/// layout's decode entries (`attention_decode`, or `attention_split` without subgroups),
/// which spread each query's positions over a workgroup's lanes; from 8 tokens on the
/// lane-per-token layout keeps every lane busy (measured equal at 8).
const SPLIT_MAX_TOKENS: u32 = 7;

/// Query and output vec4s a lane of a per-thread workgroup may hold for the heads it serves
/// (they share each K/V row it loads, and each adds a query and an output row of head_dim / 4
/// vec4s to every lane): four heads of 64 dims, two of 128.
const MAX_GROUP_VEC4S: u32 = 64;

/// Query heads per workgroup of the per-thread layout, for `group` query heads per KV head
/// and `hd4` vec4s per head: the largest divisor of `group` within [`MAX_GROUP_VEC4S`].
fn heads_per_group(group: u32, hd4: u32) -> u32 {
    let most = (MAX_GROUP_VEC4S / hd4.max(1)).max(1);
    (1..=most.min(group))
        .rev()
        .find(|d| group.is_multiple_of(*d))
        .unwrap_or(1)
}

/// How threads share the work (see `shaders/attention.wgsl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionLayout {
    /// A thread per query, no barriers: CPU adapters. `subgroups` as for matvec.
    PerThread { subgroups: bool },
    /// A workgroup per query with shared-memory reductions: GPUs.
    PerWorkgroup,
}

impl AttentionLayout {
    /// CPU adapters (those that get matvec's row-per-thread layout) get a thread per query.
    pub fn for_context(ctx: &GpuContext) -> Self {
        match ctx.matvec_layout {
            MatvecLayout::RowPerThread { .. } => Self::PerThread { subgroups: true },
            MatvecLayout::RowPerWorkgroup => Self::PerWorkgroup,
        }
    }
}

/// Causal GQA: out[t, h] = softmax(q[t, h] · K[..=pos0+t, h / group] · scale) · V.
/// q, out: [T, n_head, head_dim]; k, v: one layer's cache [ctx, n_kv, head_dim] of `kv`
/// elements (f32, or f16 in packed pairs). The per-thread layout needs head_dim % 4 == 0 (vec4 rows) and at most
/// `PER_THREAD_MAX_DIM`; other head dims fall back to the workgroup layout.
pub fn attention(
    ctx: &GpuContext,
    layout: AttentionLayout,
    q: &wgpu::Buffer,
    k: &wgpu::Buffer,
    v: &wgpu::Buffer,
    kv: DType,
    out: &wgpu::Buffer,
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    scale: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    attention_saving(
        ctx, layout, q, k, v, kv, out, None, n_head, n_kv, head_dim, scale, step,
    )
}

/// [`attention`] that also writes each (token, head)'s softmax statistics, the log of the
/// sum of its exponentiated scaled scores, to `lse` [T, n_head]: with them a backward pass
/// recomputes the probabilities without a second softmax pass.
pub fn attention_saving(
    ctx: &GpuContext,
    layout: AttentionLayout,
    q: &wgpu::Buffer,
    k: &wgpu::Buffer,
    v: &wgpu::Buffer,
    kv: DType,
    out: &wgpu::Buffer,
    lse: Option<&wgpu::Buffer>,
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    scale: f32,
    step: &wgpu::Buffer,
) -> Result<Dispatch> {
    if head_dim > 256 || n_kv == 0 || !n_head.is_multiple_of(n_kv) || !head_dim.is_multiple_of(2) {
        return Err(EngineError::Shape {
            op: "attention",
            detail: format!("{n_head} query heads, {n_kv} KV heads, head dim {head_dim} (max 256)"),
        });
    }
    let finish = |m: Macros| {
        let m = match lse {
            Some(_) => m.flag("SAVE_LSE"),
            None => m,
        };
        kv_macro(m, kv)
    };
    // Positions a token may see (the cache's rows bound them) and tokens a step may hold.
    let cache_rows = (k.size() / (n_kv as u64 * head_dim as u64 * kv.size())) as u32;
    let max_tokens = (q.size() / (n_head as u64 * head_dim as u64 * 4)) as u32;
    let workgroup = finish(
        Macros::new()
            .u32("WG", WG)
            .u32("MAX_D", head_dim.div_ceil(WG)),
    );
    // One walk over every position, or (where loops are cut short and a walk could pass the
    // budget) segments of positions and a pass that merges them.
    let dispatch = |walk: Walk, macros: &Macros, x: u32, per_y: u32| -> Result<Dispatch> {
        let entry = walk.entry();
        let seg_len = if ctx.loops_limited() {
            walk.segment_len(head_dim)
        } else {
            u32::MAX
        };
        let uniform = |seg_len: u32, stats_at: u32| {
            params(
                ctx,
                "attention",
                &[
                    n_head,
                    n_kv,
                    head_dim,
                    scale.to_bits(),
                    seg_len,
                    max_tokens,
                    stats_at,
                    0,
                ],
            )
        };
        if seg_len >= cache_rows {
            let p = uniform(0, 0);
            let mut bindings = vec![bind(q), bind(k), bind(v), bind(out), bind(&p), bind(step)];
            bindings.extend(lse.map(bind));
            let pipeline = ctx.pipeline("attention.wgsl", entry, macros)?;
            return Ok(Dispatch::new(
                ctx,
                "attention",
                pipeline,
                &bindings,
                Grid::PerTokens { x, per_y },
            ));
        }
        let n_seg = cache_rows.div_ceil(seg_len);
        let outputs = n_seg as u64 * max_tokens as u64 * n_head as u64;
        let stats_at = outputs * head_dim as u64;
        let part = ctx.shared_scratch("attention segments", (stats_at + 2 * outputs) * 4)?;
        let stats_at = u32::try_from(stats_at).map_err(|_| EngineError::Shape {
            op: "attention",
            detail: format!("{n_seg} segments of {max_tokens} tokens × {n_head} heads"),
        })?;
        let p = uniform(seg_len, stats_at);
        let bindings = [
            (0, bind(q)),
            (1, bind(k)),
            (2, bind(v)),
            (4, bind(&p)),
            (5, bind(step)),
            (7, bind(&part)),
        ];
        let walk = Dispatch::with_bindings(
            ctx,
            "attention",
            ctx.pipeline("attention.wgsl", entry, &macros.clone().flag("SEGMENTS"))?,
            &bindings,
            Grid::PerTokensSegments { x, per_y, z: n_seg },
        );
        let mut bindings = vec![
            (3, bind(out)),
            (4, bind(&p)),
            (5, bind(step)),
            (7, bind(&part)),
        ];
        bindings.extend(lse.map(|l| (6, bind(l))));
        let merge = Dispatch::with_bindings(
            ctx,
            "attention",
            ctx.pipeline(
                "attention.wgsl",
                "attention_merge",
                &workgroup.clone().flag("SEGMENTS"),
            )?,
            &bindings,
            Grid::PerTokens {
                x: n_head,
                per_y: 1,
            },
        );
        Ok(walk.then(merge))
    };
    let AttentionLayout::PerThread { subgroups } = layout else {
        return dispatch(Walk::Workgroup, &workgroup, n_head, 1);
    };
    let subgroups = subgroups && ctx.shader_subgroups();
    // A workgroup serves GROUP query heads of one KV head.
    let group = heads_per_group(n_head / n_kv, head_dim / 4);
    let mut per_thread = Macros::new()
        .flag("PER_THREAD")
        .u32("HD4", head_dim / 4)
        .u32("GROUP", group);
    if subgroups {
        per_thread = per_thread.flag("SUBGROUPS");
    }
    let per_thread = finish(per_thread);
    // Decode steps: with subgroups of at least a workgroup, a workgroup per (KV head's query
    // heads, token) whose lanes score positions; without, one per (head, token) whose lanes
    // split the positions.
    let decode = subgroups && ctx.subgroup_min_size >= LANES;
    if !head_dim.is_multiple_of(4) || head_dim > DECODE_MAX_DIM {
        return dispatch(Walk::Workgroup, &workgroup, n_head, 1);
    }
    if head_dim > PER_THREAD_MAX_DIM {
        // Wider heads: a workgroup per (heads, token) for every step where subgroups allow
        // (each token's workgroup loads the rows again, which still beats the workgroup
        // layout's barriers 3x on lavapipe), else the workgroup layout.
        if !decode {
            return dispatch(Walk::Workgroup, &workgroup, n_head, 1);
        }
        return dispatch(Walk::Decode { group }, &per_thread, n_head / group, 1);
    }
    let many = dispatch(Walk::Lanes { group }, &per_thread, n_head / group, LANES)?;
    let few = if decode {
        dispatch(Walk::Decode { group }, &per_thread, n_head / group, 1)?
    } else {
        dispatch(Walk::Split, &per_thread, n_head, 1)?
    };
    Ok(many.with_few_tokens(SPLIT_MAX_TOKENS, few))
}

/// How an entry point of `shaders/attention.wgsl` walks a token's positions.
#[derive(Clone, Copy, Debug)]
enum Walk {
    /// `attention`, per-thread layout: a lane per token, one position per step, `group` heads.
    Lanes { group: u32 },
    /// `attention_decode`: LANES positions per step for `group` heads.
    Decode { group: u32 },
    /// `attention_split`: LANES × CHUNK positions per step, a lane taking CHUNK of them.
    Split,
    /// `attention`, workgroup layout: WG positions per step.
    Workgroup,
}

/// Loop iterations llvmpipe's budget counts for a loop of `n` constant iterations: NIR
/// writes loops of up to 16 out in full before the limiter is placed (Mesa 22.3: a 64-wide
/// head's 16-iteration loops cost nothing, a 128-wide head's 32-iteration ones do).
fn counted(n: u32) -> u32 {
    if n <= 16 { 0 } else { n }
}

impl Walk {
    fn entry(self) -> &'static str {
        match self {
            Walk::Lanes { .. } | Walk::Workgroup => "attention",
            Walk::Decode { .. } => "attention_decode",
            Walk::Split => "attention_split",
        }
    }

    /// Positions one workgroup may walk with its loops' iterations in all (steps over
    /// positions and the loops inside them, and those before and after) within
    /// [`LOOP_BUDGET`]: a multiple of 64.
    fn segment_len(self, head_dim: u32) -> u32 {
        let hd4 = counted(head_dim / 4);
        let slots = counted((head_dim / 4).div_ceil(LANES));
        // (iterations per step, positions per step, iterations outside the walk)
        let (per_step, positions, fixed) = match self {
            Walk::Lanes { group } => (
                1 + 2 * (slots + hd4) + 2 * group * hd4,
                1,
                LANES + 2 * group * hd4,
            ),
            // Scores, then up to LANES positions' V rows (a loop whose length varies).
            Walk::Decode { group } => (
                1 + hd4 + group * (hd4 + slots) + LANES * (1 + slots + group * slots),
                LANES,
                2 * group * (hd4 + slots),
            ),
            // CHUNK scores and CHUNK V rows (the CHUNK loops themselves are written out).
            Walk::Split => (
                1 + (2 * CHUNK + 1) * hd4,
                LANES * CHUNK,
                LANES * (1 + hd4) + 2 * hd4,
            ),
            // A head_dim loop per score, a reduction, the chunk's sum and its V products.
            Walk::Workgroup => (
                1 + head_dim + WG.ilog2() + WG + head_dim.div_ceil(WG) * (1 + WG),
                WG,
                2 * head_dim,
            ),
        };
        let steps = (LOOP_BUDGET - fixed) / per_step;
        (steps * positions / 64 * 64).max(64)
    }
}

/// Positions per rescale in `attention_split` (the shader's CHUNK).
const CHUNK: u32 = 8;

/// The buffers of [`attention_backward`]: the forward's inputs, output and saved
/// log-sum-exp, the output's gradient, and where the gradients go.
pub struct AttentionGrads<'a> {
    /// [T, n_head, head_dim], as the forward read it (after QK-norm and RoPE).
    pub q: &'a wgpu::Buffer,
    /// The layer's caches [ctx, n_kv, head_dim], holding this step's rows and earlier ones,
    /// and their element type.
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub kv: DType,
    /// The forward's output [T, n_head, head_dim] (before any output gate), for delta; `None`
    /// when delta holds Σ dO·O already (gated attention: `attn_gate::sigmoid_gate_backward`).
    pub o: Option<&'a wgpu::Buffer>,
    /// [T, n_head] from [`attention_saving`].
    pub lse: &'a wgpu::Buffer,
    /// ∂L/∂o [T, n_head, head_dim].
    pub d_o: &'a wgpu::Buffer,
    /// [T, n_head]: Σ dO·O per (token, head), written here unless given.
    pub delta: &'a wgpu::Buffer,
    /// Written: ∂L/∂q [T, n_head, head_dim].
    pub dq: &'a wgpu::Buffer,
    /// Added to: ∂L/∂K and ∂L/∂V in the caches' layout.
    pub dk: &'a wgpu::Buffer,
    pub dv: &'a wgpu::Buffer,
}

impl AttentionGrads<'_> {
    /// What both of [`attention_backward`]'s entry points read, with a block's uniform.
    fn reads<'b>(
        &'b self,
        p: &'b wgpu::Buffer,
        step: &'b wgpu::Buffer,
    ) -> Vec<(u32, wgpu::BindingResource<'b>)> {
        vec![
            (0, bind(self.q)),
            (1, bind(self.k)),
            (2, bind(self.v)),
            (4, bind(self.d_o)),
            (5, bind(self.lse)),
            (6, bind(self.delta)),
            (10, bind(p)),
            (11, bind(step)),
        ]
    }
}

/// The gradients of [`attention_saving`] for a step of one sequence of at most `max_tokens`
/// tokens: dq for the step's queries, and the step's share of dK and dV for every cache row
/// it saw (rows of earlier steps too), added to `dk`/`dv`. `ctx_rows`: rows per sequence in
/// the caches (bounds the positions covered). Dispatches in order: blocks of positions for
/// dq, then blocks of query tokens for dk and dv. The layout is chosen as for the forward.
pub fn attention_backward(
    ctx: &GpuContext,
    layout: AttentionLayout,
    b: &AttentionGrads,
    n_head: u32,
    n_kv: u32,
    head_dim: u32,
    scale: f32,
    ctx_rows: u32,
    max_tokens: u32,
    step: &wgpu::Buffer,
) -> Result<Vec<Dispatch>> {
    if head_dim == 0 || head_dim > 256 || n_kv == 0 || !n_head.is_multiple_of(n_kv) {
        return Err(EngineError::Shape {
            op: "attention_backward",
            detail: format!("{n_head} query heads, {n_kv} KV heads, head dim {head_dim} (max 256)"),
        });
    }
    let group = n_head / n_kv;
    // Per layout: the macros, dq's and dk/dv's grids, and the loop steps per position (dq) and
    // per query token (dk, dv), against CPU adapters' 65535 per invocation.
    let (mut macros, dq_grid, dkv_grid, per_position, per_token) = match layout {
        AttentionLayout::PerThread { subgroups }
            if head_dim.is_multiple_of(4) && head_dim <= PER_THREAD_MAX_DIM =>
        {
            let hd4 = head_dim / 4;
            let mut m = Macros::new().flag("PER_THREAD").u32("HD4", hd4);
            if subgroups && ctx.shader_subgroups() {
                m = m.flag("SUBGROUPS");
            }
            // A row loaded: a share and the spread.
            let load = hd4 + hd4.div_ceil(LANES);
            (
                m,
                Grid::PerTokens {
                    x: n_head,
                    per_y: LANES,
                },
                Grid::Fixed([ctx_rows.div_ceil(LANES), n_kv, 1]),
                // dq: three rows loaded, two dot products and one accumulation, in three
                // chunk loops.
                3 * load + 3 * hd4 + 4,
                // dk, dv: two rows loaded, two dot products, two accumulations.
                group * (2 * load + 4 * hd4 + 2) + 1,
            )
        }
        _ => {
            // A workgroup holds the heads of `tpg` tokens (or, with WG heads or more, a column
            // of workgroups spans one token's heads).
            let tpg = (WG / n_head).max(1);
            (
                Macros::new()
                    .u32("WG", WG)
                    .u32("HD", head_dim)
                    .u32("TPG", tpg),
                Grid::PerTokens {
                    x: if tpg > 1 { 1 } else { n_head.div_ceil(WG) },
                    per_y: tpg,
                },
                Grid::Fixed([ctx_rows.div_ceil(WG), n_kv, 1]),
                3 * head_dim + 2,
                group * (2 * head_dim + 2),
            )
        }
    };
    if b.o.is_none() {
        macros = macros.flag("DELTA_GIVEN");
    }
    let macros = kv_macro(macros, b.kv);
    let dq = ctx.pipeline("attention_backward.wgsl", "attention_backward_dq", &macros)?;
    let dkv = ctx.pipeline("attention_backward.wgsl", "attention_backward_dkv", &macros)?;
    let positions = (LOOP_BUDGET / per_position).max(1);
    let tokens = (LOOP_BUDGET / per_token).max(1);
    let params_for = |begin: u32, end: u32| {
        params(
            ctx,
            "attention_backward",
            &[n_head, n_kv, head_dim, scale.to_bits(), begin, end],
        )
    };
    let mut out = Vec::new();
    for begin in (0..ctx_rows.max(1)).step_by(positions as usize) {
        let p = params_for(begin, begin + positions);
        let mut bindings = b.reads(&p, step);
        bindings.push((7, bind(b.dq)));
        bindings.extend(b.o.map(|o| (3, bind(o))));
        out.push(Dispatch::with_bindings(
            ctx,
            "attention_backward_dq",
            dq.clone(),
            &bindings,
            dq_grid,
        ));
    }
    for begin in (0..max_tokens.max(1)).step_by(tokens as usize) {
        let p = params_for(begin, begin + tokens);
        let mut bindings = b.reads(&p, step);
        bindings.extend([(8, bind(b.dk)), (9, bind(b.dv))]);
        out.push(Dispatch::with_bindings(
            ctx,
            "attention_backward_dkv",
            dkv.clone(),
            &bindings,
            dkv_grid,
        ));
    }
    Ok(out)
}

fn kv_macro(macros: Macros, kv: DType) -> Macros {
    match kv {
        DType::F16 => macros.flag("KV_F16"),
        DType::F32 => macros,
    }
}
