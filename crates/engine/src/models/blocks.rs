//! Pieces every architecture is built from: checked weight loading with progress, the
//! graph recorder, the per-step scratch activations, and the pre-norm attention and SwiGLU
//! MLP blocks.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use lilypad_gguf::{ByteSource, GgmlType, GgufFile};

use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::kernels::Dispatch;
use crate::linear::Linear;
use crate::model::LoadProgress;
use crate::ops::{self, rope::RopeMode};
use crate::state::StateBuffer;
use crate::weights::{self, GpuWeight};

/// Checks that every tensor in `shapes` (name, [rows, cols]) is present with that shape and
/// a type the kernels decode, before anything is allocated. Returns their total bytes.
pub(crate) fn check_tensors(file: &GgufFile, shapes: &[(String, [u64; 2])]) -> Result<u64> {
    let mut total = 0;
    for (name, expected) in shapes {
        let t = file
            .tensor(name)
            .ok_or_else(|| EngineError::MissingTensor(name.clone()))?;
        if [t.rows(), t.cols()] != *expected || t.dims.len() > 2 {
            return Err(EngineError::TensorShape {
                name: name.clone(),
                expected: expected.to_vec(),
                got: t.dims.clone(),
            });
        }
        // Norms are widened to f32 on upload; matrices stay in their file format.
        let ok = if expected[0] == 1 {
            matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
        } else {
            weights::supported(t.ty)
        };
        if !ok {
            return Err(EngineError::UnsupportedType {
                tensor: name.clone(),
                ty: t.ty.name(),
                context: "this engine",
            });
        }
        total += t.n_bytes();
    }
    Ok(total)
}

/// Uploads tensors from a GGUF, advancing one byte counter for matrices and norms alike
/// so progress reaches the total.
pub(crate) struct Loader<'a> {
    pub ctx: &'a Arc<GpuContext>,
    file: &'a GgufFile,
    src: &'a dyn ByteSource,
    max_chunk_bytes: Option<u64>,
    /// Sequence slots: per-sequence state buffers hold this many sequences.
    pub sequences: u32,
    done: Cell<u64>,
    total: u64,
    progress: RefCell<&'a mut dyn FnMut(LoadProgress)>,
}

impl<'a> Loader<'a> {
    pub fn new(
        ctx: &'a Arc<GpuContext>,
        file: &'a GgufFile,
        src: &'a dyn ByteSource,
        max_chunk_bytes: Option<u64>,
        total: u64,
        progress: &'a mut dyn FnMut(LoadProgress),
    ) -> Self {
        Self {
            ctx,
            file,
            src,
            max_chunk_bytes,
            sequences: 1,
            done: Cell::new(0),
            total,
            progress: RefCell::new(progress),
        }
    }

    fn report(&self, name: &str, bytes: u64) {
        self.done.set(self.done.get() + bytes);
        (*self.progress.borrow_mut())(LoadProgress {
            tensor: name.to_string(),
            done_bytes: self.done.get(),
            total_bytes: self.total,
        });
    }

    /// Per-sequence state for `n` sequence slots.
    pub fn with_sequences(mut self, n: u32) -> Self {
        self.sequences = n.max(1);
        self
    }

    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_some()
    }

    /// A weight matrix in its file format.
    pub fn matrix(&self, name: &str) -> Result<GpuWeight> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| EngineError::MissingTensor(name.into()))?;
        let bytes = self.file.tensor_bytes(self.src, t)?;
        let w = GpuWeight::upload(
            self.ctx,
            name,
            t.ty,
            t.rows(),
            t.cols(),
            &bytes,
            self.max_chunk_bytes,
        )?;
        self.report(name, t.n_bytes());
        Ok(w)
    }

    /// A linear projection's weight, without an adapter.
    pub fn linear(&self, name: &str) -> Result<Linear> {
        self.matrix(name).map(Linear::new)
    }

    /// A norm weight, widened to f32.
    pub fn norm(&self, name: &str) -> Result<wgpu::Buffer> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| EngineError::MissingTensor(name.into()))?;
        let mut v = vec![0f32; t.n_elements() as usize];
        lilypad_gguf::dequantize(t.ty, &self.file.tensor_bytes(self.src, t)?, &mut v)?;
        self.report(name, t.n_bytes());
        self.ctx.storage_buffer_init(name, bytemuck::cast_slice(&v))
    }

    /// A zeroed f32 buffer of `n` values.
    pub fn f32s(&self, label: &str, n: u64) -> Result<wgpu::Buffer> {
        self.ctx
            .storage_buffer(label, n * 4, wgpu::BufferUsages::empty())
    }
}

/// Where a matrix product writes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Write {
    Set,
    /// Adds to y (the residual stream).
    Add,
    /// y is a cache and token t writes row pos0 + t.
    Cache,
}

/// What the runtime hands an architecture to record a graph with: the step's token ids and
/// uniform, the tile, and the LoRA scratch when adapters are set.
pub(crate) struct GraphIo<'a> {
    pub ctx: &'a GpuContext,
    pub ids: &'a wgpu::Buffer,
    pub step: &'a wgpu::Buffer,
    pub tile: u32,
    pub lora: Option<&'a wgpu::Buffer>,
    /// The step may hold tokens of several sequences (batched decode).
    pub multi_sequence: bool,
}

/// Records one forward graph: the dispatches of a step of up to `max_batch` tokens, `tile`
/// tokens per workgroup in the matrix products (1 for decode, `PREFILL_TILE` for prefill).
pub(crate) struct Graph<'a> {
    pub ctx: &'a GpuContext,
    pub step: &'a wgpu::Buffer,
    pub tile: u32,
    pub max_batch: u32,
    /// [max_batch, rank] for LoRA's A·x, when any linear has an adapter.
    pub lora: Option<&'a wgpu::Buffer>,
    pub multi_sequence: bool,
    pub dispatches: Vec<Dispatch>,
}

impl<'a> Graph<'a> {
    /// A graph whose first dispatch looks up the step's token embeddings (`ids`) into `x`.
    pub fn embed(
        io: &GraphIo<'a>,
        max_batch: u32,
        embd: &GpuWeight,
        x: &wgpu::Buffer,
    ) -> Result<Self> {
        Ok(Self {
            ctx: io.ctx,
            step: io.step,
            tile: io.tile,
            max_batch,
            lora: io.lora,
            multi_sequence: io.multi_sequence,
            dispatches: ops::get_rows::get_rows(io.ctx, embd, io.ids, x, max_batch, io.step)?,
        })
    }

    pub fn push(&mut self, d: Dispatch) {
        self.dispatches.push(d);
    }

    /// y[t, ..stride] (+)= W · x[t] + scale · B·(A·x[t]) (see [`ops::matvec::matvec`]): the
    /// adapter's second product adds into whatever the weight's wrote.
    pub fn matvec(
        &mut self,
        linear: &Linear,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        y_stride: u32,
        write: Write,
    ) -> Result<()> {
        self.dispatches.extend(ops::matvec::matvec(
            self.ctx,
            &linear.weight,
            x,
            y,
            y_stride,
            self.step,
            self.tile,
            write == Write::Add,
            write == Write::Cache,
        )?);
        if let Some(lora) = &linear.lora {
            let u = self.lora.ok_or_else(|| {
                EngineError::Config(format!(
                    "{} has a LoRA adapter but the graph has no LoRA scratch",
                    linear.name()
                ))
            })?;
            self.dispatches.extend(ops::matvec::matvec(
                self.ctx, &lora.a, x, u, lora.rank, self.step, self.tile, false, false,
            )?);
            self.dispatches.extend(ops::matvec::matvec(
                self.ctx,
                &lora.b,
                u,
                y,
                y_stride,
                self.step,
                self.tile,
                true,
                write == Write::Cache,
            )?);
        }
        Ok(())
    }

    /// Rows of n values, `groups` per token: y = rmsnorm(x) · w.
    pub fn rms_norm(
        &mut self,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        y: &wgpu::Buffer,
        n: u32,
        groups: u32,
        eps: f32,
    ) -> Result<()> {
        let d = ops::rms_norm::rms_norm(self.ctx, x, w, y, n, groups, eps, self.step)?;
        self.push(d);
        Ok(())
    }
}

/// Activations of one step, shared by every layer.
pub(crate) struct Scratch {
    /// The residual stream [T, n_embd].
    pub x: wgpu::Buffer,
    /// A normalised copy of x, the input of each block (and, last, of the LM head).
    pub xn: wgpu::Buffer,
    pub q: wgpu::Buffer,
    pub att: wgpu::Buffer,
    /// Projected q and k before their per-head norm (QK-norm models only).
    pub qk_raw: Option<(wgpu::Buffer, wgpu::Buffer)>,
    /// attn_q's output for gated attention: per head, the query then its output gate.
    pub qg: Option<wgpu::Buffer>,
    pub ffn_gate: wgpu::Buffer,
    pub ffn_up: wgpu::Buffer,
    pub ffn_act: wgpu::Buffer,
}

impl Scratch {
    pub fn new(l: &Loader, max_batch: u32, a: &AttentionShape, n_ff: u32) -> Result<Self> {
        let b = max_batch as u64;
        let (q, kv) = (a.q_dim() as u64, a.kv_dim() as u64);
        Ok(Self {
            x: l.f32s("x", b * a.n_embd as u64)?,
            xn: l.f32s("x normed", b * a.n_embd as u64)?,
            q: l.f32s("q", b * q)?,
            att: l.f32s("attention out", b * q)?,
            qk_raw: if a.qk_norm {
                Some((l.f32s("q raw", b * q)?, l.f32s("k raw", b * kv)?))
            } else {
                None
            },
            qg: if a.gated {
                Some(l.f32s("q and gate", 2 * b * q)?)
            } else {
                None
            },
            ffn_gate: l.f32s("gate", b * n_ff as u64)?,
            ffn_up: l.f32s("up", b * n_ff as u64)?,
            ffn_act: l.f32s("swiglu", b * n_ff as u64)?,
        })
    }

    /// f32 values per token these buffers hold.
    pub fn floats_per_token(a: &AttentionShape, n_ff: u32) -> u64 {
        let qk_raw = if a.qk_norm { a.q_dim() + a.kv_dim() } else { 0 };
        let qg = if a.gated { 2 * a.q_dim() } else { 0 };
        (2 * a.n_embd + 2 * a.q_dim() + qk_raw + qg + 3 * n_ff) as u64
    }
}

/// Shape and conventions of a self-attention block.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AttentionShape {
    pub n_embd: u32,
    pub n_head: u32,
    pub n_kv: u32,
    pub head_dim: u32,
    /// Dims rotated by RoPE at the start of each head.
    pub n_rot: u32,
    pub rope: RopeMode,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3, Qwen3.5).
    pub qk_norm: bool,
    /// A sigmoid output gate per channel, computed by attn_q next to each head's query
    /// (Qwen3.5; needs `qk_norm`).
    pub gated: bool,
    pub eps: f32,
}

impl AttentionShape {
    pub fn q_dim(&self) -> u32 {
        self.n_head * self.head_dim
    }

    pub fn kv_dim(&self) -> u32 {
        self.n_kv * self.head_dim
    }

    /// (name, [rows, cols]) of the block's tensors in layer `blk`.
    pub fn tensor_shapes(&self, blk: u32) -> Vec<(String, [u64; 2])> {
        let (e, q, kv, d) = (
            self.n_embd as u64,
            self.q_dim() as u64,
            self.kv_dim() as u64,
            self.head_dim as u64,
        );
        let n = |s: &str| format!("blk.{blk}.{s}.weight");
        let mut v = vec![
            (n("attn_norm"), [1, e]),
            (n("attn_q"), [if self.gated { 2 * q } else { q }, e]),
            (n("attn_k"), [kv, e]),
            (n("attn_v"), [kv, e]),
            (n("attn_output"), [e, q]),
        ];
        if self.qk_norm {
            v.extend([(n("attn_q_norm"), [1, d]), (n("attn_k_norm"), [1, d])]);
        }
        v
    }
}

/// Pre-norm causal self-attention with its KV cache: x += wo · attention(xn).
pub(crate) struct Attention {
    norm: wgpu::Buffer,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    /// Per-head norm weights of q and k.
    qk_norm: Option<(wgpu::Buffer, wgpu::Buffer)>,
    /// [context, n_kv, head_dim] each.
    k_cache: wgpu::Buffer,
    v_cache: wgpu::Buffer,
}

impl Attention {
    pub fn load(l: &Loader, blk: u32, s: &AttentionShape, context: u32) -> Result<Self> {
        let n = |name: &str| format!("blk.{blk}.{name}.weight");
        // One block of `context` rows per sequence slot.
        let cache = l.sequences as u64 * context as u64 * s.kv_dim() as u64;
        Ok(Self {
            norm: l.norm(&n("attn_norm"))?,
            wq: l.linear(&n("attn_q"))?,
            wk: l.linear(&n("attn_k"))?,
            wv: l.linear(&n("attn_v"))?,
            wo: l.linear(&n("attn_output"))?,
            qk_norm: if s.qk_norm {
                Some((l.norm(&n("attn_q_norm"))?, l.norm(&n("attn_k_norm"))?))
            } else {
                None
            },
            k_cache: l.f32s("k cache", cache)?,
            v_cache: l.f32s("v cache", cache)?,
        })
    }

    pub fn linears_mut(&mut self) -> [&mut Linear; 4] {
        [&mut self.wq, &mut self.wk, &mut self.wv, &mut self.wo]
    }

    /// The K and V caches: one row of kv_dim values per position, `context` rows per slot.
    pub fn state(&self, s: &AttentionShape, context: u32) -> Vec<StateBuffer> {
        let row = s.kv_dim() as u64 * 4;
        [&self.k_cache, &self.v_cache]
            .map(|b| StateBuffer {
                buffer: b.clone(),
                row_bytes: Some(row),
                slot_bytes: row * context as u64,
            })
            .to_vec()
    }

    pub fn record(
        &self,
        g: &mut Graph,
        s: &AttentionShape,
        a: &Scratch,
        freqs: &wgpu::Buffer,
    ) -> Result<()> {
        let (e, q, kv) = (s.n_embd, s.q_dim(), s.kv_dim());
        g.rms_norm(&a.x, &self.norm, &a.xn, e, 1, s.eps)?;
        let gate = self.gate(g, s, a)?;
        match (&self.qk_norm, &a.qk_raw) {
            (Some((q_norm, k_norm)), Some((q_raw, k_raw))) => {
                match &gate {
                    Some((heads, qg)) => {
                        g.matvec(&self.wq, &a.xn, qg, 2 * q, Write::Set)?;
                        g.push(heads.split_query(g.ctx, qg, q_raw, g.step)?);
                    }
                    None => g.matvec(&self.wq, &a.xn, q_raw, q, Write::Set)?,
                }
                g.rms_norm(q_raw, q_norm, &a.q, s.head_dim, s.n_head, s.eps)?;
                g.matvec(&self.wk, &a.xn, k_raw, kv, Write::Set)?;
                g.push(ops::rms_norm::rms_norm_to_cache(
                    g.ctx,
                    k_raw,
                    k_norm,
                    &self.k_cache,
                    s.head_dim,
                    s.n_kv,
                    s.eps,
                    g.step,
                )?);
            }
            (None, _) => {
                g.matvec(&self.wq, &a.xn, &a.q, q, Write::Set)?;
                g.matvec(&self.wk, &a.xn, &self.k_cache, kv, Write::Cache)?;
            }
            (Some(_), None) => {
                return Err(EngineError::Config(
                    "QK-norm attention needs the q/k scratch buffers".into(),
                ));
            }
        }
        g.matvec(&self.wv, &a.xn, &self.v_cache, kv, Write::Cache)?;
        for (x, heads, in_cache) in [(&a.q, s.n_head, false), (&self.k_cache, s.n_kv, true)] {
            g.push(ops::rope::rope(
                g.ctx, x, freqs, heads, s.head_dim, s.n_rot, s.rope, in_cache, g.step,
            )?);
        }
        g.push(ops::attention::attention(
            g.ctx,
            ops::attention::AttentionLayout::for_context(g.ctx),
            &a.q,
            &self.k_cache,
            &self.v_cache,
            &a.att,
            s.n_head,
            s.n_kv,
            s.head_dim,
            1.0 / (s.head_dim as f32).sqrt(),
            g.step,
        )?);
        if let Some((heads, qg)) = &gate {
            g.push(heads.sigmoid_gate(g.ctx, &a.att, qg, g.step)?);
        }
        g.matvec(&self.wo, &a.att, &a.x, e, Write::Add)
    }

    /// The gate's heads and the [query | gate] buffer, for gated attention.
    fn gate<'s>(
        &self,
        g: &Graph,
        s: &AttentionShape,
        a: &'s Scratch,
    ) -> Result<Option<(ops::attn_gate::GatedHeads, &'s wgpu::Buffer)>> {
        if !s.gated {
            return Ok(None);
        }
        match (&a.qg, s.qk_norm) {
            (Some(qg), true) => Ok(Some((
                ops::attn_gate::GatedHeads {
                    n_head: s.n_head,
                    head_dim: s.head_dim,
                    max_tokens: g.max_batch,
                },
                qg,
            ))),
            _ => Err(EngineError::Config(
                "gated attention needs QK-norm and the q/gate scratch buffer".into(),
            )),
        }
    }
}

/// Pre-norm SwiGLU feed-forward: x += down · (silu(gate · xn) ⊙ (up · xn)).
pub(crate) struct Mlp {
    norm: wgpu::Buffer,
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    /// (name, [rows, cols]) of the block's tensors; `norm` names its input norm
    /// (`ffn_norm`, or Qwen3.5's `post_attention_norm`).
    pub fn tensor_shapes(blk: u32, norm: &str, n_embd: u32, n_ff: u32) -> Vec<(String, [u64; 2])> {
        let (e, f) = (n_embd as u64, n_ff as u64);
        let n = |s: &str| format!("blk.{blk}.{s}.weight");
        vec![
            (n(norm), [1, e]),
            (n("ffn_gate"), [f, e]),
            (n("ffn_up"), [f, e]),
            (n("ffn_down"), [e, f]),
        ]
    }

    pub fn load(l: &Loader, blk: u32, norm: &str) -> Result<Self> {
        let n = |s: &str| format!("blk.{blk}.{s}.weight");
        Ok(Self {
            norm: l.norm(&n(norm))?,
            gate: l.linear(&n("ffn_gate"))?,
            up: l.linear(&n("ffn_up"))?,
            down: l.linear(&n("ffn_down"))?,
        })
    }

    pub fn linears_mut(&mut self) -> [&mut Linear; 3] {
        [&mut self.gate, &mut self.up, &mut self.down]
    }

    pub fn record(&self, g: &mut Graph, n_embd: u32, eps: f32, a: &Scratch) -> Result<()> {
        let f = self.gate.weight.rows as u32;
        g.rms_norm(&a.x, &self.norm, &a.xn, n_embd, 1, eps)?;
        g.matvec(&self.gate, &a.xn, &a.ffn_gate, f, Write::Set)?;
        g.matvec(&self.up, &a.xn, &a.ffn_up, f, Write::Set)?;
        g.push(ops::elementwise::silu_mul(
            g.ctx,
            &a.ffn_gate,
            &a.ffn_up,
            &a.ffn_act,
            f,
            g.step,
        )?);
        g.matvec(&self.down, &a.ffn_act, &a.x, n_embd, Write::Add)
    }
}
