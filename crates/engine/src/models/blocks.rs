//! Pieces every architecture is built from: checked weight loading with progress, and the
//! pre-norm attention and SwiGLU MLP blocks, recorded with the typed ops of
//! [`crate::graph::Graph`] over a layer's [`LayerActivations`].

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use lilypad_gguf::{ByteSource, GgmlType, GgufFile};

use crate::activations::LayerActivations;
use crate::backward::{BackwardBuffers, linear_backward, rms_norm_backward};
use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::graph::{Graph, Write};
use crate::linear::Linear;
use crate::model::LoadProgress;
use crate::ops::{self, rope::RopeMode};
use crate::state::StateBuffer;
use crate::tensor::{DType, Tensor};
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
    /// The KV caches' element type.
    pub kv_cache: DType,
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
            kv_cache: crate::model::DEFAULT_KV_CACHE,
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

    pub fn with_kv_cache(mut self, dtype: DType) -> Self {
        self.kv_cache = dtype;
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

    /// A small parameter tensor (a norm weight, DeltaNet's conv and decay parameters),
    /// widened to f32, [rows, cols] as in the file.
    pub fn norm(&self, name: &'static str) -> Result<Tensor> {
        self.small(name, name)
    }

    /// [`Loader::norm`] for a tensor whose name is made at run time (`blk.N.…`), labelled
    /// with what it is.
    pub fn small(&self, name: &str, label: &'static str) -> Result<Tensor> {
        let t = self
            .file
            .tensor(name)
            .ok_or_else(|| EngineError::MissingTensor(name.into()))?;
        let mut v = vec![0f32; t.n_elements() as usize];
        lilypad_gguf::dequantize(t.ty, &self.file.tensor_bytes(self.src, t)?, &mut v)?;
        self.report(name, t.n_bytes());
        let shape = [t.rows() as u32, t.cols() as u32];
        let buffer = self
            .ctx
            .storage_buffer_init(name, bytemuck::cast_slice(&v))?;
        Tensor::from_buffer(buffer, label, shape, DType::F32)
    }

    /// A zeroed f32 buffer of `n` values.
    pub fn f32s(&self, label: &str, n: u64) -> Result<wgpu::Buffer> {
        self.ctx
            .storage_buffer(label, n * 4, wgpu::BufferUsages::empty())
    }
}

/// Shape and conventions of a self-attention block.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionShape {
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
pub struct Attention {
    pub norm: Tensor,
    pub wq: Linear,
    pub wk: Linear,
    pub wv: Linear,
    pub wo: Linear,
    /// Per-head norm weights of q and k.
    pub qk_norm: Option<(Tensor, Tensor)>,
    /// [slots · context, n_kv · head_dim] each.
    pub k_cache: Tensor,
    pub v_cache: Tensor,
}

impl Attention {
    pub(crate) fn load(l: &Loader, blk: u32, s: &AttentionShape, context: u32) -> Result<Self> {
        let n = |name: &str| format!("blk.{blk}.{name}.weight");
        // One block of `context` rows per sequence slot.
        let rows = l.sequences * context;
        let cache = |label| Tensor::zeros_of(l.ctx, label, [rows, s.kv_dim()], l.kv_cache);
        Ok(Self {
            norm: l.small(&n("attn_norm"), "attn_norm")?,
            wq: l.linear(&n("attn_q"))?,
            wk: l.linear(&n("attn_k"))?,
            wv: l.linear(&n("attn_v"))?,
            wo: l.linear(&n("attn_output"))?,
            qk_norm: if s.qk_norm {
                Some((
                    l.small(&n("attn_q_norm"), "attn_q_norm")?,
                    l.small(&n("attn_k_norm"), "attn_k_norm")?,
                ))
            } else {
                None
            },
            k_cache: cache("k cache")?,
            v_cache: cache("v cache")?,
        })
    }

    pub fn linears_mut(&mut self) -> [&mut Linear; 4] {
        [&mut self.wq, &mut self.wk, &mut self.wv, &mut self.wo]
    }

    /// The K and V caches: one row of kv_dim values per position, `context` rows per slot.
    pub(crate) fn state(&self, s: &AttentionShape, context: u32) -> Vec<StateBuffer> {
        let row = s.kv_dim() as u64 * self.k_cache.dtype.size();
        [&self.k_cache, &self.v_cache]
            .map(|b| StateBuffer {
                buffer: b.buffer.clone(),
                row_bytes: Some(row),
                slot_bytes: row * context as u64,
            })
            .to_vec()
    }

    /// The backward of the attention block from its normed input (Llama, Qwen3, and Qwen3.5's
    /// gated attention): `b.g` holds ∂L/∂x after the block; ∂L/∂(its normed input) goes to
    /// `b.d_norm` (its norm is [`record_layer_backward`]'s). The step's
    /// queries add their share to `kv` (∂L/∂K, ∂L/∂V of every position they saw), and the
    /// step's own rows of it, complete once later steps have run, go back through RoPE,
    /// QK-norm and the projections.
    #[allow(clippy::too_many_arguments)]
    pub fn record_backward(
        &self,
        g: &mut Graph,
        s: &AttentionShape,
        l: &LayerActivations,
        freqs: &Tensor,
        b: &BackwardBuffers,
        (dk_cache, dv_cache): &(Tensor, Tensor),
        context: u32,
    ) -> Result<()> {
        let a = l.attention().ok_or_else(|| {
            EngineError::Config("an attention layer needs attention activations".into())
        })?;
        let lse = a.lse.as_ref().ok_or_else(|| {
            EngineError::Config("attention's backward needs its softmax statistics".into())
        })?;
        let (n_head, n_kv, hd) = (s.n_head, s.n_kv, s.head_dim);
        linear_backward(g, &self.wo, &a.att, &b.g, &b.d_att, false, b)?;
        // Gated (Qwen3.5): through the output gate first, from the gated output kept; that
        // also gives attention's Σ dO·O, and turns d_att into the ungated output's gradient.
        let gated = match (s.gated, &a.qg, &b.dqg) {
            (false, _, _) => None,
            (true, Some(qg), Some(dqg)) => {
                let heads = ops::attn_gate::GatedHeads {
                    n_head,
                    head_dim: hd,
                    max_tokens: g.max_tokens,
                };
                g.push(heads.sigmoid_gate_backward(
                    g.ctx,
                    &qg.buffer,
                    &a.att.buffer,
                    &b.d_att.buffer,
                    &dqg.buffer,
                    &b.delta.buffer,
                    g.step,
                )?);
                Some((heads, dqg))
            }
            (true, _, _) => {
                return Err(EngineError::Config(
                    "gated attention's backward needs the kept q/gate and its gradient buffer"
                        .into(),
                ));
            }
        };
        let grads = ops::attention::AttentionGrads {
            q: &a.q.buffer,
            k: &self.k_cache.buffer,
            v: &self.v_cache.buffer,
            kv: self.k_cache.dtype,
            o: gated.is_none().then_some(&a.att.buffer),
            lse: &lse.buffer,
            d_o: &b.d_att.buffer,
            delta: &b.delta.buffer,
            dq: &b.dq.buffer,
            dk: &dk_cache.buffer,
            dv: &dv_cache.buffer,
        };
        let scale = 1.0 / (hd as f32).sqrt();
        for d in ops::attention::attention_backward(
            g.ctx,
            ops::attention::AttentionLayout::for_context(g.ctx),
            &grads,
            n_head,
            n_kv,
            hd,
            scale,
            context,
            g.max_tokens,
            g.step,
        )? {
            g.push(d);
        }
        let kv_dim = s.kv_dim();
        g.push(ops::copy::step_rows(
            g.ctx,
            &dk_cache.buffer,
            &b.dk.buffer,
            kv_dim,
            g.step,
        )?);
        g.push(ops::copy::step_rows(
            g.ctx,
            &dv_cache.buffer,
            &b.dv.buffer,
            kv_dim,
            g.step,
        )?);
        let rope = |g: &mut Graph, t: &Tensor, heads| -> Result<()> {
            let d = ops::rope::rope_backward(
                g.ctx,
                &t.buffer,
                &freqs.buffer,
                heads,
                hd,
                s.n_rot,
                s.rope,
                g.step,
            )?;
            g.push(d);
            Ok(())
        };
        rope(g, &b.dq, n_head)?;
        rope(g, &b.dk, n_kv)?;
        let (dq, dk) = match (&self.qk_norm, &a.qk_raw, &a.qk_rstd) {
            (None, _, _) => (&b.dq, &b.dk),
            (Some((q_norm, k_norm)), Some((q_raw, k_raw)), Some((q_rstd, k_rstd))) => {
                rms_norm_backward(
                    g,
                    q_raw,
                    q_norm,
                    Some(q_rstd),
                    &b.dq,
                    &b.dq_raw,
                    n_head,
                    false,
                )?;
                rms_norm_backward(
                    g,
                    k_raw,
                    k_norm,
                    Some(k_rstd),
                    &b.dk,
                    &b.dk_raw,
                    n_kv,
                    false,
                )?;
                (&b.dq_raw, &b.dk_raw)
            }
            _ => {
                return Err(EngineError::Config(
                    "QK-norm's backward needs the raw q/k and their rstd".into(),
                ));
            }
        };
        let xn = &l.mixer_in;
        let dq = match gated {
            Some((heads, dqg)) => {
                g.push(heads.split_query_backward(g.ctx, &dq.buffer, &dqg.buffer, g.step)?);
                dqg
            }
            None => dq,
        };
        linear_backward(g, &self.wq, xn, dq, &b.d_norm, false, b)?;
        linear_backward(g, &self.wk, xn, dk, &b.d_norm, true, b)?;
        linear_backward(g, &self.wv, xn, &b.dv, &b.d_norm, true, b)
    }

    /// x += wo · attention(xn), xn the normed input `record_layer` left in `l.mixer_in`.
    pub fn record(
        &self,
        g: &mut Graph,
        s: &AttentionShape,
        l: &LayerActivations,
        freqs: &Tensor,
    ) -> Result<()> {
        let a = l.attention().ok_or_else(|| {
            EngineError::Config("an attention layer needs attention activations".into())
        })?;
        let xn = &l.mixer_in;
        let (q_rstd, k_rstd) = match &a.qk_rstd {
            Some((q, k)) => (Some(q), Some(k)),
            None => (None, None),
        };
        let gate = match (s.gated, &a.qg) {
            (false, _) => None,
            (true, Some(qg)) if s.qk_norm => Some(qg),
            (true, _) => {
                return Err(EngineError::Config(
                    "gated attention needs QK-norm and the q/gate buffer".into(),
                ));
            }
        };
        match (&self.qk_norm, &a.qk_raw) {
            (Some((q_norm, k_norm)), Some((q_raw, k_raw))) => {
                match gate {
                    Some(qg) => {
                        g.matvec(&self.wq, xn, qg, Write::Set)?;
                        g.split_query(qg, q_raw, s.head_dim)?;
                    }
                    None => g.matvec(&self.wq, xn, q_raw, Write::Set)?,
                }
                g.rms_norm(q_raw, q_norm, None, &a.q, q_rstd, s.eps)?;
                g.matvec(&self.wk, xn, k_raw, Write::Set)?;
                g.rms_norm(k_raw, k_norm, None, &a.k, k_rstd, s.eps)?;
            }
            (None, _) => {
                g.matvec(&self.wq, xn, &a.q, Write::Set)?;
                g.matvec(&self.wk, xn, &a.k, Write::Set)?;
            }
            (Some(_), None) => {
                return Err(EngineError::Config(
                    "QK-norm attention needs the q/k buffers".into(),
                ));
            }
        }
        g.matvec(&self.wv, xn, &a.v, Write::Set)?;
        g.rope(&a.q, freqs, s.head_dim, s.n_rot, s.rope)?;
        g.rope_store(
            (&a.k, &a.v),
            freqs,
            (&self.k_cache, &self.v_cache),
            s.head_dim,
            s.n_rot,
            s.rope,
        )?;
        g.attention(
            &a.q,
            &self.k_cache,
            &self.v_cache,
            &a.att,
            a.lse.as_ref(),
            s.head_dim,
        )?;
        if let Some(qg) = gate {
            g.sigmoid_gate(&a.att, qg, s.head_dim)?;
        }
        g.matvec(&self.wo, &a.att, &l.x, Write::Add)
    }
}

/// Pre-norm SwiGLU feed-forward: x += down · (silu(gate · xn) ⊙ (up · xn)).
pub struct Mlp {
    pub norm: Tensor,
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
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

    pub(crate) fn load(l: &Loader, blk: u32, norm: &'static str) -> Result<Self> {
        let n = |s: &str| format!("blk.{blk}.{s}.weight");
        Ok(Self {
            norm: l.small(&n(norm), norm)?,
            gate: l.linear(&n("ffn_gate"))?,
            up: l.linear(&n("ffn_up"))?,
            down: l.linear(&n("ffn_down"))?,
        })
    }

    pub fn linears_mut(&mut self) -> [&mut Linear; 3] {
        [&mut self.gate, &mut self.up, &mut self.down]
    }

    /// The backward of the MLP from its normed input: `b.g` holds ∂L/∂x after the block;
    /// ∂L/∂(its normed input) goes to `b.d_norm` (its norm is [`record_layer_backward`]'s).
    pub fn record_backward(
        &self,
        g: &mut Graph,
        l: &LayerActivations,
        b: &BackwardBuffers,
    ) -> Result<()> {
        linear_backward(g, &self.down, &l.act, &b.g, &b.d_act, false, b)?;
        g.push(ops::elementwise::silu_mul_backward(
            g.ctx,
            &l.gate.buffer,
            &l.up.buffer,
            &b.d_act.buffer,
            &b.d_gate.buffer,
            &b.d_up.buffer,
            l.gate.cols(),
            g.step,
        )?);
        linear_backward(g, &self.gate, &l.mlp_in, &b.d_gate, &b.d_norm, false, b)?;
        linear_backward(g, &self.up, &l.mlp_in, &b.d_up, &b.d_norm, true, b)
    }

    /// x += down · (silu(gate · xn) ⊙ (up · xn)), xn the normed input in `l.mlp_in`.
    pub fn record(&self, g: &mut Graph, l: &LayerActivations) -> Result<()> {
        g.matvec(&self.gate, &l.mlp_in, &l.gate, Write::Set)?;
        g.matvec(&self.up, &l.mlp_in, &l.up, Write::Set)?;
        g.silu_mul(&l.gate, &l.up, &l.act)?;
        g.matvec(&self.down, &l.act, &l.x, Write::Add)
    }
}

/// One pre-norm layer: x normed by `mixer_norm` into `l.mixer_in`, `mixer` (attention or
/// DeltaNet), x normed by the MLP's norm into `l.mlp_in`, the MLP; keeping the layer's input
/// and the residual between them where the activations ask for it. Both norms keep their
/// reciprocal RMS when the activations have room for it.
pub fn record_layer(
    g: &mut Graph,
    l: &LayerActivations,
    mixer_norm: &Tensor,
    mixer: impl FnOnce(&mut Graph) -> Result<()>,
    mlp: &Mlp,
    eps: f32,
) -> Result<()> {
    if let Some(x_in) = &l.x_in {
        g.copy(&l.x, x_in)?;
    }
    g.rms_norm(
        &l.x,
        mixer_norm,
        None,
        &l.mixer_in,
        l.mixer_rstd.as_ref(),
        eps,
    )?;
    mixer(g)?;
    if let Some(x_mid) = &l.x_mid {
        g.copy(&l.x, x_mid)?;
    }
    g.rms_norm(&l.x, &mlp.norm, None, &l.mlp_in, l.mlp_rstd.as_ref(), eps)?;
    mlp.record(g, l)
}

/// The backward of [`record_layer`], in reverse: `b.g` holds ∂L/∂x after the layer and is left
/// holding ∂L/∂x before it. The MLP's backward, its norm's (added to the skip path's gradient),
/// `mixer`'s (which leaves ∂L/∂(its normed input) in `b.d_norm`), the mixer norm's.
pub fn record_layer_backward(
    g: &mut Graph,
    l: &LayerActivations,
    mixer_norm: &Tensor,
    mixer: impl FnOnce(&mut Graph) -> Result<()>,
    mlp: &Mlp,
    b: &BackwardBuffers,
) -> Result<()> {
    let (Some(x_in), Some(x_mid)) = (&l.x_in, &l.x_mid) else {
        return Err(EngineError::Config(
            "a layer's backward needs its input and the residual after its mixer".into(),
        ));
    };
    mlp.record_backward(g, l, b)?;
    rms_norm_backward(
        g,
        x_mid,
        &mlp.norm,
        l.mlp_rstd.as_ref(),
        &b.d_norm,
        &b.g,
        1,
        true,
    )?;
    mixer(g)?;
    rms_norm_backward(
        g,
        x_in,
        mixer_norm,
        l.mixer_rstd.as_ref(),
        &b.d_norm,
        &b.g,
        1,
        true,
    )
}
