//! Llama-family decoders: llama, SmolLM, Mistral-style GGUFs and dense Qwen3. Config from
//! GGUF metadata, weights uploaded once, and a recorded graph of kernel dispatches per step:
//! token embedding → n × (attention block, SwiGLU MLP block) → output norm.
//!
//! Conventions follow llama.cpp (`llama_model_rope_type` and its graph builders):
//! - llama/mistral/smollm: the converter permuted the Q/K rows, so RoPE rotates adjacent
//!   pairs.
//! - qwen3: Q/K rows keep Hugging Face's layout, so RoPE rotates halves (NEOX); each head of
//!   q and k goes through its own RMSNorm before RoPE; the head dim comes from
//!   `attention.key_length` and need not be n_embd / n_head.
//!
//! Norms are plain RMSNorm; the LM head is `output.weight`, or the token embedding when tied.

use lilypad_gguf::GgufFile;

use super::Forward;
use super::blocks::{Attention, AttentionShape, Loader, Mlp, record_layer, record_layer_backward};
use crate::activations::{ActivationMode, ActivationShape, LayerActivations, LayerKind};
use crate::backward::{BackwardBuffers, StepPosition};
use crate::error::{EngineError, Result};
use crate::graph::Graph;
use crate::linear::Linear;
use crate::model::MemoryPlan;
use crate::ops::{self, rope::RopeMode};
use crate::state::StateBuffer;
use crate::tensor::{DType, Tensor};
use crate::weights::GpuWeight;

#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub arch: String,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_ff: u32,
    pub n_head: u32,
    pub n_kv_head: u32,
    pub head_dim: u32,
    pub n_rot: u32,
    pub vocab: u32,
    pub rope_base: f32,
    pub rms_eps: f32,
    pub context_train: u32,
    pub tied_embeddings: bool,
    /// How rotary pairs are laid out in a head.
    pub rope_mode: RopeMode,
    /// Per-head RMSNorm of q and k before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
}

/// Architectures this file runs.
pub const LLAMA_LIKE: &[&str] = &["llama", "mistral", "smollm", "qwen3"];

impl LlamaConfig {
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let md = &file.metadata;
        let arch = md.architecture()?.to_string();
        if !LLAMA_LIKE.contains(&arch.as_str()) {
            return Err(EngineError::UnsupportedArchitecture(arch));
        }
        let qwen3 = arch == "qwen3";
        let key = |k: &str| format!("{arch}.{k}");
        let n_embd = md.u32(&key("embedding_length"))?;
        let n_head = md.u32(&key("attention.head_count"))?;
        let n_kv_head = md.u32(&key("attention.head_count_kv")).unwrap_or(n_head);
        let head_dim = md.u32(&key("attention.key_length")).ok();
        let bad_heads = n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0;
        if bad_heads || (head_dim.is_none() && n_embd % n_head != 0) {
            return Err(EngineError::Config(format!(
                "{n_head} heads, {n_kv_head} KV heads, embedding {n_embd}"
            )));
        }
        let head_dim = head_dim.unwrap_or(n_embd / n_head);
        // One head dim serves keys and values in the cache and the attention kernel.
        if let Ok(v) = md.u32(&key("attention.value_length"))
            && v != head_dim
        {
            return Err(EngineError::Config(format!(
                "value head dim {v} differs from key head dim {head_dim}"
            )));
        }
        let embd = file
            .tensor("token_embd.weight")
            .ok_or_else(|| EngineError::MissingTensor("token_embd.weight".into()))?;
        let vocab = *embd.dims.get(1).unwrap_or(&0);
        let cfg = Self {
            n_layer: md.u32(&key("block_count"))?,
            n_embd,
            n_ff: md.u32(&key("feed_forward_length"))?,
            n_head,
            n_kv_head,
            head_dim,
            n_rot: md.u32(&key("rope.dimension_count")).unwrap_or(head_dim),
            vocab: u32::try_from(vocab)
                .map_err(|_| EngineError::Config(format!("vocabulary of {vocab}")))?,
            rope_base: md.f32(&key("rope.freq_base")).unwrap_or(10_000.0),
            rms_eps: md
                .f32(&key("attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-5),
            context_train: md.u32(&key("context_length")).unwrap_or(2048),
            tied_embeddings: file.tensor("output.weight").is_none(),
            rope_mode: if qwen3 {
                RopeMode::Neox
            } else {
                RopeMode::Interleaved
            },
            qk_norm: qwen3,
            arch,
        };
        if cfg.n_layer == 0
            || cfg.n_layer > 1024
            || cfg.head_dim > 256
            || !cfg.head_dim.is_multiple_of(8)
            || cfg.n_rot > cfg.head_dim
            || !cfg.n_rot.is_multiple_of(2)
        {
            return Err(EngineError::Config(format!(
                "{} layers, head dim {} (the kernels take 8..=256, multiple of 8), rope dims {}",
                cfg.n_layer, cfg.head_dim, cfg.n_rot
            )));
        }
        Ok(cfg)
    }

    pub fn q_dim(&self) -> u32 {
        self.n_head * self.head_dim
    }

    pub fn kv_dim(&self) -> u32 {
        self.n_kv_head * self.head_dim
    }

    pub fn activation_shape(&self) -> ActivationShape {
        ActivationShape {
            n_embd: self.n_embd,
            n_ff: self.n_ff,
            attention: self.attention(),
            delta: None,
            conv_taps: 0,
            layers: vec![LayerKind::Attention; self.n_layer as usize],
        }
    }

    pub fn attention(&self) -> AttentionShape {
        AttentionShape {
            n_embd: self.n_embd,
            n_head: self.n_head,
            n_kv: self.n_kv_head,
            head_dim: self.head_dim,
            n_rot: self.n_rot,
            rope: self.rope_mode,
            qk_norm: self.qk_norm,
            gated: false,
            eps: self.rms_eps,
        }
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
        for i in 0..self.n_layer {
            v.extend(attention.tensor_shapes(i));
            v.extend(Mlp::tensor_shapes(i, "ffn_norm", self.n_embd, self.n_ff));
        }
        v
    }
}

impl LlamaConfig {
    /// The plan at `context` positions and `max_batch`-token steps.
    pub fn memory_plan(
        &self,
        file: &GgufFile,
        context: u32,
        max_batch: u32,
        kv: DType,
    ) -> MemoryPlan {
        let mut plan = MemoryPlan {
            weights: super::weight_bytes(file, &self.tensor_shapes()),
            ..Default::default()
        };
        let kv_layer = context as u64 * self.kv_dim() as u64 * kv.size();
        plan.kv_cache = 2 * self.n_layer as u64 * kv_layer;
        plan.kv_layer = kv_layer;
        let b = max_batch as u64;
        plan.activations = self
            .activation_shape()
            .store_bytes(max_batch, ActivationMode::Shared)
            + 4 * b * self.vocab as u64
            + 4 * (self.n_embd as u64 + 2 * self.vocab as u64);
        plan.largest_unsplittable = kv_layer.max(b * self.vocab as u64 * 4);
        plan
    }
}

/// A Llama-family model on the GPU.
pub(crate) struct Llama {
    attention: AttentionShape,
    embd: GpuWeight,
    output: Option<GpuWeight>,
    output_norm: Tensor,
    layers: Vec<(Attention, Mlp)>,
    freqs: Tensor,
    eps: f32,
    /// KV-cache rows per sequence slot.
    context: u32,
}

impl Llama {
    pub(crate) fn load(l: &Loader, cfg: &LlamaConfig, context: u32) -> Result<Self> {
        let attention = cfg.attention();
        let embd = l.matrix("token_embd.weight")?;
        let output = if cfg.tied_embeddings {
            None
        } else {
            Some(l.matrix("output.weight")?)
        };
        let output_norm = l.norm("output_norm.weight")?;
        let layers = (0..cfg.n_layer)
            .map(|i| {
                Ok((
                    Attention::load(l, i, &attention, context)?,
                    Mlp::load(l, i, "ffn_norm")?,
                ))
            })
            .collect::<Result<_>>()?;
        let freqs = rope_frequencies(l, cfg.rope_base, cfg.n_rot)?;
        Ok(Self {
            attention,
            embd,
            output,
            output_norm,
            layers,
            freqs,
            eps: cfg.rms_eps,
            context,
        })
    }
}

/// RoPE's per-pair frequencies [1, n_rot / 2].
pub(crate) fn rope_frequencies(l: &Loader, base: f32, n_rot: u32) -> Result<Tensor> {
    let freqs = ops::rope::frequencies(base as f64, n_rot);
    let buffer = l
        .ctx
        .storage_buffer_init("rope freqs", bytemuck::cast_slice(&freqs))?;
    Tensor::from_buffer(buffer, "rope freqs", [1, freqs.len() as u32], DType::F32)
}

impl Forward for Llama {
    fn embedding(&self) -> &GpuWeight {
        &self.embd
    }

    fn record_layer(&self, g: &mut Graph, i: usize, l: &LayerActivations) -> Result<()> {
        let (attention, mlp) = &self.layers[i];
        let mixer = |g: &mut Graph| attention.record(g, &self.attention, l, &self.freqs);
        record_layer(g, l, &attention.norm, mixer, mlp, self.eps)
    }

    fn record_layer_backward(
        &self,
        g: &mut Graph,
        i: usize,
        l: &LayerActivations,
        b: &BackwardBuffers,
        _pos: &StepPosition,
    ) -> Result<()> {
        let (attention, mlp) = &self.layers[i];
        let kv = b.kv_grads(i)?;
        let mixer = |g: &mut Graph| {
            attention.record_backward(g, &self.attention, l, &self.freqs, b, kv, self.context)
        };
        record_layer_backward(g, l, &attention.norm, mixer, mlp, b)
    }

    fn output_norm(&self) -> &Tensor {
        &self.output_norm
    }

    fn eps(&self) -> f32 {
        self.eps
    }

    fn lm_head(&self) -> &GpuWeight {
        self.output.as_ref().unwrap_or(&self.embd)
    }

    fn linears_mut(&mut self) -> Vec<&mut Linear> {
        self.layers
            .iter_mut()
            .flat_map(|(attention, mlp)| {
                let [q, k, v, o] = attention.linears_mut();
                let [gate, up, down] = mlp.linears_mut();
                [q, k, v, o, gate, up, down]
            })
            .collect()
    }

    fn state(&self) -> Vec<Vec<StateBuffer>> {
        self.layers
            .iter()
            .map(|(attention, _)| attention.state(&self.attention, self.context))
            .collect()
    }
}
