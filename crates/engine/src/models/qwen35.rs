//! Qwen3.5 (GGUF `qwen35`, Hugging Face `qwen3_5_text`): a hybrid decoder where most layers
//! mix tokens with Gated DeltaNet linear attention and every few layers use gated full
//! attention; each layer then has a SwiGLU MLP. The layout rules and the forward pass are
//! written out in `tests/fixtures/qwen/README.md`; in short, following llama.cpp's GGUFs:
//! - the schedule is `attention.recurrent_layers` (true = DeltaNet), falling back to
//!   `full_attention_interval` (layer i is full attention when (i + 1) % interval == 0);
//! - norm weights are stored as 1 + w by the converter, so they multiply as plain RMSNorm;
//! - DeltaNet value heads are tiled (slot s reads key head s mod n_k), which is the order the
//!   kernels work in, so nothing is permuted at run time;
//! - full attention: `attn_q` holds each head's query and its sigmoid output gate, QK-norm,
//!   NEOX RoPE over the first `rope.dimension_count` dims of each head;
//! - multi-token-prediction layers (`nextn_predict_layers`) follow the main layers; they are
//!   checked always and uploaded on request, for speculative decoding.
//!
//! A sequence's state is the K/V cache of each attention layer plus, per DeltaNet layer, the
//! conv's last inputs and the delta rule's state matrices: fixed-size state that cannot be
//! rewound to an earlier position (see `Model::truncate`).

use lilypad_gguf::GgufFile;

use super::Forward;
use super::blocks::{Attention, AttentionShape, Loader, Mlp, record_layer, record_layer_backward};
use super::llama::rope_frequencies;
use crate::activations::{
    ActivationMode, ActivationShape, ActivationStore, LayerActivations, LayerKind, MtpActivations,
};
use crate::backward::{BackwardBuffers, StepPosition, linear_backward};
use crate::error::{EngineError, Result};
use crate::graph::{Graph, Write};
use crate::linear::Linear;
use crate::model::MemoryPlan;
use crate::ops::{
    self,
    conv1d::MAX_TAPS,
    delta_net::{DeltaNetInputs, DeltaNetShape, MAX_HEAD_DIM},
    rope::RopeMode,
};
use crate::state::StateBuffer;
use crate::tensor::{DType, Tensor};
use crate::weights::GpuWeight;

pub const ARCH: &str = "qwen35";

#[derive(Clone, Debug, PartialEq)]
pub struct Qwen35Config {
    /// Main layers (the MTP layers come after them).
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_ff: u32,
    /// Full-attention layers: query heads, KV heads, head dim, rotated dims per head.
    pub n_head: u32,
    pub n_kv_head: u32,
    pub head_dim: u32,
    pub n_rot: u32,
    pub vocab: u32,
    pub rope_base: f32,
    pub rms_eps: f32,
    pub context_train: u32,
    pub tied_embeddings: bool,
    /// Per main layer: true for Gated DeltaNet, false for full attention.
    pub recurrent: Vec<bool>,
    pub delta: DeltaNetShape,
    pub conv_kernel: u32,
    /// Multi-token-prediction layers after the main ones.
    pub n_mtp: u32,
}

impl Qwen35Config {
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let md = &file.metadata;
        let arch = md.architecture()?;
        if arch != ARCH {
            return Err(EngineError::UnsupportedArchitecture(arch.to_string()));
        }
        let key = |k: &str| format!("{ARCH}.{k}");
        let bad = |detail: String| EngineError::Config(detail);
        let n_blocks = md.u32(&key("block_count"))?;
        let n_mtp = md.u32(&key("nextn_predict_layers")).unwrap_or(0);
        if n_mtp >= n_blocks {
            return Err(bad(format!(
                "{n_blocks} blocks of which {n_mtp} multi-token-prediction layers: no main layers"
            )));
        }
        let n_layer = n_blocks - n_mtp;
        let recurrent = match md.bool_array(&key("attention.recurrent_layers")) {
            Ok(flags) if flags.len() >= n_layer as usize => flags[..n_layer as usize].to_vec(),
            Ok(flags) => {
                return Err(bad(format!(
                    "attention.recurrent_layers has {} entries for {n_layer} layers",
                    flags.len()
                )));
            }
            Err(_) => {
                let interval = md.u32(&key("full_attention_interval")).unwrap_or(4).max(1);
                (0..n_layer).map(|i| (i + 1) % interval != 0).collect()
            }
        };
        let n_embd = md.u32(&key("embedding_length"))?;
        let n_head = md.u32(&key("attention.head_count"))?;
        let n_kv_head = md.u32(&key("attention.head_count_kv")).unwrap_or(n_head);
        let head_dim = md.u32(&key("attention.key_length"))?;
        if let Ok(v) = md.u32(&key("attention.value_length"))
            && v != head_dim
        {
            return Err(bad(format!(
                "value head dim {v} differs from key head dim {head_dim}"
            )));
        }
        let rms_eps = md
            .f32(&key("attention.layer_norm_rms_epsilon"))
            .unwrap_or(1e-6);
        let n_v = md.u32(&key("ssm.time_step_rank"))?;
        let inner = md.u32(&key("ssm.inner_size"))?;
        let delta = DeltaNetShape {
            n_k: md.u32(&key("ssm.group_count"))?,
            n_v,
            d_k: md.u32(&key("ssm.state_size"))?,
            d_v: inner.checked_div(n_v).unwrap_or(0),
            eps: rms_eps,
        };
        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| EngineError::MissingTensor("token_embd.weight".into()))?;
        let vocab = *embd.dims.get(1).unwrap_or(&0);
        let cfg = Self {
            n_layer,
            n_embd,
            n_ff: md.u32(&key("feed_forward_length"))?,
            n_head,
            n_kv_head,
            head_dim,
            n_rot: md.u32(&key("rope.dimension_count")).unwrap_or(head_dim),
            vocab: u32::try_from(vocab).map_err(|_| bad(format!("vocabulary of {vocab}")))?,
            rope_base: md.f32(&key("rope.freq_base")).unwrap_or(10_000_000.0),
            rms_eps,
            context_train: md.u32(&key("context_length")).unwrap_or(4096),
            tied_embeddings: file.tensor("output.weight").is_none(),
            recurrent,
            delta,
            conv_kernel: md.u32(&key("ssm.conv_kernel"))?,
            n_mtp,
        };
        cfg.validate(inner)?;
        Ok(cfg)
    }

    fn validate(&self, inner: u32) -> Result<()> {
        let d = &self.delta;
        let heads_ok =
            self.n_head > 0 && self.n_kv_head > 0 && self.n_head.is_multiple_of(self.n_kv_head);
        let attention_ok = self.head_dim <= 256
            && self.head_dim.is_multiple_of(8)
            && self.head_dim > 0
            && self.n_rot <= self.head_dim
            && self.n_rot.is_multiple_of(2);
        let delta_ok = d.n_k > 0
            && d.n_v > 0
            && d.n_v.is_multiple_of(d.n_k)
            && d.d_v * d.n_v == inner
            && d.d_v > 0
            && (1..=MAX_HEAD_DIM).contains(&d.d_k);
        let conv_ok = (2..=MAX_TAPS).contains(&self.conv_kernel);
        if self.n_layer <= 1024 && heads_ok && attention_ok && delta_ok && conv_ok {
            return Ok(());
        }
        Err(EngineError::Config(format!(
            "{} layers; attention: {} heads, {} KV heads, head dim {} (8..=256, multiple of 8), \
             rope dims {}; DeltaNet: {} key heads, {} value heads (a multiple), key dim {} \
             (≤ {MAX_HEAD_DIM}), inner size {inner}; conv kernel {} (2..={MAX_TAPS})",
            self.n_layer,
            self.n_head,
            self.n_kv_head,
            self.head_dim,
            self.n_rot,
            d.n_k,
            d.n_v,
            d.d_k,
            self.conv_kernel
        )))
    }

    pub fn activation_shape(&self) -> ActivationShape {
        ActivationShape {
            n_embd: self.n_embd,
            n_ff: self.n_ff,
            attention: self.attention(),
            delta: Some(self.delta),
            conv_taps: self.conv_kernel,
            layers: self
                .recurrent
                .iter()
                .map(|&r| match r {
                    true => LayerKind::DeltaNet,
                    false => LayerKind::Attention,
                })
                .collect(),
        }
    }

    pub fn attention(&self) -> AttentionShape {
        AttentionShape {
            n_embd: self.n_embd,
            n_head: self.n_head,
            n_kv: self.n_kv_head,
            head_dim: self.head_dim,
            n_rot: self.n_rot,
            rope: RopeMode::Neox,
            qk_norm: true,
            gated: true,
            eps: self.rms_eps,
        }
    }

    /// Full-attention layers among the main layers.
    pub fn n_attention_layers(&self) -> u32 {
        self.recurrent.iter().filter(|r| !**r).count() as u32
    }

    /// (name, [rows, cols]) of every tensor the forward pass reads.
    pub fn tensor_shapes(&self) -> Vec<(String, [u64; 2])> {
        let e = self.n_embd as u64;
        let mut v = vec![
            ("token_embd.weight".to_string(), [self.vocab as u64, e]),
            ("output_norm.weight".into(), [1, e]),
        ];
        if !self.tied_embeddings {
            v.push(("output.weight".into(), [self.vocab as u64, e]));
        }
        let attention = self.attention();
        for (i, &recurrent) in (0..).zip(&self.recurrent) {
            if recurrent {
                v.extend(DeltaNet::tensor_shapes(i, e, &self.delta, self.conv_kernel));
            } else {
                v.extend(attention.tensor_shapes(i));
            }
            v.extend(Mlp::tensor_shapes(
                i,
                "post_attention_norm",
                self.n_embd,
                self.n_ff,
            ));
        }
        v
    }

    /// (name, [rows, cols]) of the required tensors of the multi-token-prediction layers.
    pub fn mtp_tensor_shapes(&self) -> Vec<(String, [u64; 2])> {
        let e = self.n_embd as u64;
        let attention = self.attention();
        (self.n_layer..self.n_layer + self.n_mtp)
            .flat_map(|i| {
                let n = |s: &str| format!("blk.{i}.nextn.{s}.weight");
                let mut v = vec![
                    (n("eh_proj"), [e, 2 * e]),
                    (n("enorm"), [1, e]),
                    (n("hnorm"), [1, e]),
                ];
                v.extend(attention.tensor_shapes(i));
                v.extend(Mlp::tensor_shapes(
                    i,
                    "post_attention_norm",
                    self.n_embd,
                    self.n_ff,
                ));
                v
            })
            .collect()
    }

    /// The plan at `context` positions and `max_batch`-token steps (`mtp`: with the
    /// multi-token-prediction layers uploaded).
    pub fn memory_plan(
        &self,
        file: &GgufFile,
        context: u32,
        max_batch: u32,
        kv: DType,
        mtp: bool,
    ) -> MemoryPlan {
        let mut shapes = self.tensor_shapes();
        if mtp {
            shapes.extend(self.mtp_tensor_shapes());
        }
        let mut plan = MemoryPlan {
            weights: super::weight_bytes(file, &shapes),
            ..Default::default()
        };
        let attention = self.attention();
        let kv_layer = context as u64 * attention.kv_dim() as u64 * kv.size();
        let n_attention =
            self.n_attention_layers() as u64 + if mtp { self.n_mtp as u64 } else { 0 };
        plan.kv_cache = 2 * n_attention * kv_layer;
        let n_delta = self.n_layer as u64 - self.n_attention_layers() as u64;
        let state = self.delta.state_len() * 4;
        plan.recurrent_slot = n_delta * (state + self.conv_state_len() * 4);
        plan.kv_layer = kv_layer;
        plan.recurrent_buffer = state.max(self.conv_state_len() * 4);
        let b = max_batch as u64;
        plan.activations = self
            .activation_shape()
            .store_bytes(max_batch, ActivationMode::Shared)
            + 4 * b * self.vocab as u64
            + 4 * (self.n_embd as u64 + 2 * self.vocab as u64);
        if mtp {
            // What the layer reads before its decoder layer, when it drafts.
            plan.activations += MtpActivations::bytes(max_batch, self.n_embd);
        }
        plan.largest_unsplittable = kv_layer
            .max(b * self.vocab as u64 * 4)
            .max(state)
            .max(self.delta.chunk_scratch_bytes(max_batch));
        plan.with_sequences(1)
    }

    /// f32 values of one DeltaNet layer's conv state: the last kernel − 1 inputs.
    fn conv_state_len(&self) -> u64 {
        (self.conv_kernel as u64 - 1) * self.delta.qkv_len()
    }
}

/// A pre-norm Gated DeltaNet block: x += ssm_out · gated_norm(delta_rule(conv(qkv · xn))).
pub struct DeltaNet {
    pub norm: Tensor,
    pub qkv: Linear,
    pub z: Linear,
    pub beta: Linear,
    pub alpha: Linear,
    /// f32 [channels, kernel].
    pub conv: Tensor,
    /// −exp(A_log) and the decay's bias, per value head.
    pub a: Tensor,
    pub dt_bias: Tensor,
    pub out_norm: Tensor,
    pub out: Linear,
    /// [slots + 1, kernel − 1, channels]: the conv's last inputs.
    conv_state: wgpu::Buffer,
    /// [slots + 1, n_v, d_k, d_v]: the delta rule's state.
    state: wgpu::Buffer,
    conv_slot_bytes: u64,
    state_slot_bytes: u64,
}

impl DeltaNet {
    fn tensor_shapes(blk: u32, e: u64, d: &DeltaNetShape, kernel: u32) -> Vec<(String, [u64; 2])> {
        let n = |s: &str| format!("blk.{blk}.{s}");
        let (qkv, value, n_v) = (d.qkv_len(), d.n_v as u64 * d.d_v as u64, d.n_v as u64);
        vec![
            (n("attn_norm.weight"), [1, e]),
            (n("attn_qkv.weight"), [qkv, e]),
            (n("attn_gate.weight"), [value, e]),
            (n("ssm_beta.weight"), [n_v, e]),
            (n("ssm_alpha.weight"), [n_v, e]),
            (n("ssm_conv1d.weight"), [qkv, kernel as u64]),
            (n("ssm_a"), [1, n_v]),
            (n("ssm_dt.bias"), [1, n_v]),
            (n("ssm_norm.weight"), [1, d.d_v as u64]),
            (n("ssm_out.weight"), [e, value]),
        ]
    }

    fn load(l: &Loader, blk: u32, cfg: &Qwen35Config) -> Result<Self> {
        let n = |s: &str| format!("blk.{blk}.{s}");
        Ok(Self {
            norm: l.small(&n("attn_norm.weight"), "attn_norm")?,
            qkv: l.linear(&n("attn_qkv.weight"))?,
            z: l.linear(&n("attn_gate.weight"))?,
            beta: l.linear(&n("ssm_beta.weight"))?,
            alpha: l.linear(&n("ssm_alpha.weight"))?,
            // Small per-channel parameters: widened to f32 like norm weights.
            conv: l.small(&n("ssm_conv1d.weight"), "ssm_conv1d")?,
            a: l.small(&n("ssm_a"), "ssm_a")?,
            dt_bias: l.small(&n("ssm_dt.bias"), "ssm_dt.bias")?,
            out_norm: l.small(&n("ssm_norm.weight"), "ssm_norm")?,
            out: l.linear(&n("ssm_out.weight"))?,
            // A slot per sequence, then the checkpoint slot (`Model::checkpoint_slot`).
            conv_state: l.f32s(
                "conv state",
                (l.sequences as u64 + 1) * cfg.conv_state_len(),
            )?,
            state: l.f32s(
                "delta state",
                (l.sequences as u64 + 1) * cfg.delta.state_len(),
            )?,
            conv_slot_bytes: cfg.conv_state_len() * 4,
            state_slot_bytes: cfg.delta.state_len() * 4,
        })
    }

    fn linears_mut(&mut self) -> [&mut Linear; 5] {
        [
            &mut self.qkv,
            &mut self.z,
            &mut self.beta,
            &mut self.alpha,
            &mut self.out,
        ]
    }

    /// Both buffers are fixed-size state, copied whole by snapshots and zeroed for a new
    /// sequence.
    fn state(&self) -> Vec<StateBuffer> {
        [
            (&self.conv_state, self.conv_slot_bytes),
            (&self.state, self.state_slot_bytes),
        ]
        .map(|(b, slot_bytes)| StateBuffer {
            buffer: b.clone(),
            row_bytes: None,
            slot_bytes,
        })
        .to_vec()
    }

    /// The backward of the DeltaNet block from its normed input: `b.g` holds ∂L/∂x after the
    /// block; ∂L/∂(its normed input) goes to `b.d_norm` (its norm is `record_layer_backward`'s). Recurrent state crosses steps backwards through
    /// `carried`: the delta rule's state gradient and the conv state's (the step before's
    /// last inputs, whose conv input gradient it becomes).
    pub fn record_backward(
        &self,
        g: &mut Graph,
        cfg: &Qwen35Config,
        l: &LayerActivations,
        b: &BackwardBuffers,
        pos: &StepPosition,
        layer: usize,
    ) -> Result<()> {
        let d = l.delta_net().ok_or_else(|| {
            EngineError::Config("a DeltaNet layer needs DeltaNet activations".into())
        })?;
        let missing = || {
            EngineError::Config(
                "the DeltaNet backward needs kept activations (input, norm statistics, chunk states)"
                    .into(),
            )
        };
        let (Some(o_rstd), Some(states)) = (&d.o_rstd, &d.states) else {
            return Err(missing());
        };
        let bd = b.delta_net.as_ref().ok_or_else(missing)?;
        let (d_state, conv_d) = bd
            .carried
            .get(layer)
            .and_then(Option::as_ref)
            .ok_or_else(missing)?;
        let shape = cfg.delta;
        linear_backward(g, &self.out, &d.o_normed, &b.g, &bd.d_normed, false, b)?;
        g.push(ops::rms_norm::rms_norm_backward(
            g.ctx,
            &d.o.buffer,
            &self.out_norm.buffer,
            &o_rstd.buffer,
            &bd.d_normed.buffer,
            &bd.d_o.buffer,
            Some(ops::rms_norm::GateGrad {
                z: &d.z.buffer,
                dz: &bd.dz.buffer,
            }),
            shape.d_v,
            shape.n_v,
            false,
            g.step,
        )?);
        let inputs = DeltaNetInputs {
            qkv: &d.qkv.buffer,
            alpha: &d.alpha.buffer,
            beta: &d.beta.buffer,
            a: &self.a.buffer,
            dt_bias: &self.dt_bias.buffer,
        };
        let grads = ops::delta_net::DeltaNetGrads {
            // The first chunk's incoming state is the step's.
            state_in: &states.buffer,
            d_out: &bd.d_o.buffer,
            d_state: &d_state.buffer,
            dqkv: &bd.dqkv.buffer,
            d_alpha: &bd.d_alpha.buffer,
            d_beta: &bd.d_beta.buffer,
            scratch: &bd.scratch,
        };
        for k in
            ops::delta_net::delta_net_backward(g.ctx, &inputs, &grads, shape, g.max_tokens, g.step)?
        {
            g.push(k);
        }
        // The conv started from the step before's last taps − 1 inputs (zeros at the start).
        let taps = cfg.conv_kernel;
        let (state_in, row0) = match (pos.recurrent_in, pos.previous.and_then(|p| p.delta_net())) {
            // Checkpointed: the conv state saved as the step began (the layer's first state
            // buffer, one slot).
            (Some([conv, ..]), _) => (conv, 0),
            (_, Some(prev)) => (&prev.qkv_raw.buffer, g.max_tokens - (taps - 1)),
            _ => (&bd.conv_zeros.buffer, 0),
        };
        let (d_out_state, d_in_state) = match pos.index % 2 {
            0 => (&conv_d[0], &conv_d[1]),
            _ => (&conv_d[1], &conv_d[0]),
        };
        g.push(ops::conv1d::conv1d_backward(
            g.ctx,
            &d.qkv_raw.buffer,
            &self.conv.buffer,
            state_in,
            row0,
            &bd.dqkv.buffer,
            &d_out_state.buffer,
            &bd.dqkv_raw.buffer,
            &d_in_state.buffer,
            shape.qkv_len() as u32,
            taps,
            g.step,
        )?);
        let xn = &l.mixer_in;
        linear_backward(g, &self.z, xn, &bd.dz, &b.d_norm, false, b)?;
        linear_backward(g, &self.qkv, xn, &bd.dqkv_raw, &b.d_norm, true, b)?;
        linear_backward(g, &self.alpha, xn, &bd.d_alpha, &b.d_norm, true, b)?;
        linear_backward(g, &self.beta, xn, &bd.d_beta, &b.d_norm, true, b)
    }

    /// x += ssm_out · gated_norm(delta_rule(conv(qkv · xn))), xn the normed input
    /// `record_layer` left in `l.mixer_in`.
    pub fn record(&self, g: &mut Graph, cfg: &Qwen35Config, l: &LayerActivations) -> Result<()> {
        let d = l.delta_net().ok_or_else(|| {
            EngineError::Config("a DeltaNet layer needs DeltaNet activations".into())
        })?;
        let xn = &l.mixer_in;
        g.matvec(&self.qkv, xn, &d.qkv_raw, Write::Set)?;
        g.matvec(&self.z, xn, &d.z, Write::Set)?;
        g.matvec(&self.beta, xn, &d.beta, Write::Set)?;
        g.matvec(&self.alpha, xn, &d.alpha, Write::Set)?;
        g.conv1d(&d.qkv_raw, &self.conv, &self.conv_state, &d.qkv)?;
        let inputs = DeltaNetInputs {
            qkv: &d.qkv.buffer,
            alpha: &d.alpha.buffer,
            beta: &d.beta.buffer,
            a: &self.a.buffer,
            dt_bias: &self.dt_bias.buffer,
        };
        g.delta_net(
            &cfg.delta,
            &inputs,
            &self.state,
            &d.o,
            &d.chunks,
            d.states.as_ref(),
        )?;
        g.rms_norm(
            &d.o,
            &self.out_norm,
            Some(&d.z),
            &d.o_normed,
            d.o_rstd.as_ref(),
            cfg.rms_eps,
        )?;
        g.matvec(&self.out, &d.o_normed, &l.x, Write::Add)
    }
}

/// How a layer mixes tokens.
// One per layer, made once at load: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
enum Mixer {
    Attention(Attention),
    DeltaNet(DeltaNet),
}

/// A multi-token-prediction layer: predicts the token after next from the main model's last
/// hidden state (after the output norm) and the next token's embedding, as llama.cpp's
/// `qwen35` draft graph and vLLM's `Qwen3NextMultiTokenPredictor` do: both inputs normed,
/// side by side (embedding first) through `eh_proj`, one gated-attention decoder layer with
/// its own KV cache, its own output norm, the model's LM head. Speculative decoding drafts
/// with it; the main forward pass never reads it.
struct Mtp {
    eh_proj: Linear,
    enorm: Tensor,
    hnorm: Tensor,
    /// Its own output norm, when the file has one (otherwise the model's).
    shared_head_norm: Option<Tensor>,
    attention: Attention,
    mlp: Mlp,
}

impl Mtp {
    fn load(l: &Loader, blk: u32, cfg: &Qwen35Config, context: u32) -> Result<Self> {
        let n = |s: &str| format!("blk.{blk}.nextn.{s}.weight");
        let shared = n("shared_head_norm");
        Ok(Self {
            eh_proj: Linear::new(l.matrix(&n("eh_proj"))?),
            enorm: l.small(&n("enorm"), "nextn.enorm")?,
            hnorm: l.small(&n("hnorm"), "nextn.hnorm")?,
            shared_head_norm: match l.has(&shared) {
                true => Some(l.small(&shared, "nextn.shared_head_norm")?),
                false => None,
            },
            attention: Attention::load(l, blk, &cfg.attention(), context)?,
            mlp: Mlp::load(l, blk, "post_attention_norm")?,
        })
    }
}

/// A Qwen3.5 model on the GPU.
pub(crate) struct Qwen35 {
    cfg: Qwen35Config,
    attention: AttentionShape,
    embd: GpuWeight,
    output: Option<GpuWeight>,
    output_norm: Tensor,
    layers: Vec<(Mixer, Mlp)>,
    /// Loaded only when asked for (`ModelOptions::mtp`).
    mtp: Vec<Mtp>,
    freqs: Tensor,
    /// KV-cache rows per sequence slot.
    context: u32,
}

impl Qwen35 {
    pub(crate) fn load(l: &Loader, cfg: &Qwen35Config, context: u32, mtp: bool) -> Result<Self> {
        let attention = cfg.attention();
        let embd = l.matrix("token_embd.weight")?;
        let output = if cfg.tied_embeddings {
            None
        } else {
            Some(l.matrix("output.weight")?)
        };
        let output_norm = l.norm("output_norm.weight")?;
        let layers = (0..)
            .zip(&cfg.recurrent)
            .map(|(i, &recurrent)| {
                let mixer = if recurrent {
                    Mixer::DeltaNet(DeltaNet::load(l, i, cfg)?)
                } else {
                    Mixer::Attention(Attention::load(l, i, &attention, context)?)
                };
                Ok((mixer, Mlp::load(l, i, "post_attention_norm")?))
            })
            .collect::<Result<_>>()?;
        let mtp = if mtp {
            (cfg.n_layer..cfg.n_layer + cfg.n_mtp)
                .map(|i| Mtp::load(l, i, cfg, context))
                .collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let freqs = rope_frequencies(l, cfg.rope_base, cfg.n_rot)?;
        Ok(Self {
            cfg: cfg.clone(),
            attention,
            embd,
            output,
            output_norm,
            layers,
            mtp,
            freqs,
            context,
        })
    }
}

impl Forward for Qwen35 {
    fn embedding(&self) -> &GpuWeight {
        &self.embd
    }

    fn record_layer(&self, g: &mut Graph, i: usize, l: &LayerActivations) -> Result<()> {
        let (mixer, mlp) = &self.layers[i];
        let norm = match mixer {
            Mixer::Attention(attention) => &attention.norm,
            Mixer::DeltaNet(delta) => &delta.norm,
        };
        let record = |g: &mut Graph| match mixer {
            Mixer::Attention(attention) => attention.record(g, &self.attention, l, &self.freqs),
            Mixer::DeltaNet(delta) => delta.record(g, &self.cfg, l),
        };
        record_layer(g, l, norm, record, mlp, self.cfg.rms_eps)
    }

    fn record_layer_backward(
        &self,
        g: &mut Graph,
        i: usize,
        l: &LayerActivations,
        b: &BackwardBuffers,
        pos: &StepPosition,
    ) -> Result<()> {
        let (mixer, mlp) = &self.layers[i];
        let norm = match mixer {
            Mixer::Attention(attention) => &attention.norm,
            Mixer::DeltaNet(delta) => &delta.norm,
        };
        let backward = |g: &mut Graph| match mixer {
            Mixer::Attention(attention) => {
                let kv = b.kv_grads(i)?;
                attention.record_backward(g, &self.attention, l, &self.freqs, b, kv, self.context)
            }
            Mixer::DeltaNet(delta) => delta.record_backward(g, &self.cfg, l, b, pos, i),
        };
        record_layer_backward(g, l, norm, backward, mlp, b)
    }

    fn output_norm(&self) -> &Tensor {
        &self.output_norm
    }

    fn eps(&self) -> f32 {
        self.cfg.rms_eps
    }

    fn lm_head(&self) -> &GpuWeight {
        self.output.as_ref().unwrap_or(&self.embd)
    }

    /// The main layers' linears (the multi-token-prediction layers take no adapter).
    fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v = Vec::new();
        for (mixer, mlp) in &mut self.layers {
            match mixer {
                Mixer::Attention(attention) => v.extend(attention.linears_mut()),
                Mixer::DeltaNet(delta) => v.extend(delta.linears_mut()),
            }
            v.extend(mlp.linears_mut());
        }
        v
    }

    fn has_mtp(&self) -> bool {
        !self.mtp.is_empty()
    }

    fn record_mtp(
        &self,
        g: &mut Graph,
        next: &wgpu::Buffer,
        store: &ActivationStore,
        a: &MtpActivations,
    ) -> Result<()> {
        let mtp = self.mtp.first().ok_or_else(super::no_mtp_layer)?;
        // The shared store's activations of an attention layer serve the MTP block's.
        let l = store
            .layers
            .iter()
            .zip(&self.layers)
            .find(|(_, (mixer, _))| matches!(mixer, Mixer::Attention(_)))
            .map(|(l, _)| l)
            .ok_or_else(|| EngineError::Config("no attention layer's activations".into()))?;
        let eps = self.cfg.rms_eps;
        g.embed(&self.embd, next, &a.embedded)?;
        g.rms_norm(&a.embedded, &mtp.enorm, None, &a.embedded_normed, None, eps)?;
        g.rms_norm(&store.hidden, &mtp.hnorm, None, &a.hidden_normed, None, eps)?;
        g.concat(&a.embedded_normed, &a.hidden_normed, &a.joined)?;
        g.matvec(&mtp.eh_proj, &a.joined, &l.x, Write::Set)?;
        let attention = |g: &mut Graph| mtp.attention.record(g, &self.attention, l, &self.freqs);
        record_layer(g, l, &mtp.attention.norm, attention, &mtp.mlp, eps)?;
        let norm = mtp.shared_head_norm.as_ref().unwrap_or(&self.output_norm);
        g.rms_norm(&l.x, norm, None, &store.hidden, None, eps)
    }

    /// The main layers' state, then (when loaded) the MTP layers' KV caches: snapshots,
    /// saved states and forks carry the draft's context too.
    fn state(&self) -> Vec<Vec<StateBuffer>> {
        let main = self.layers.iter().map(|(mixer, _)| match mixer {
            Mixer::Attention(attention) => attention.state(&self.attention, self.context),
            Mixer::DeltaNet(delta) => delta.state(),
        });
        let mtp = self
            .mtp
            .iter()
            .map(|m| m.attention.state(&self.attention, self.context));
        main.chain(mtp).collect()
    }
}
