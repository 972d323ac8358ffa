//! One file per model architecture: each reads its config from GGUF metadata, uploads its
//! weights and records its forward graph from the shared blocks in `blocks.rs`. The
//! architecture-independent runtime (steps, logits, sampling, sequence state) is
//! `crate::model::Model`; [`ModelConfig`] is the one place that dispatches on the
//! architecture.

pub mod blocks;
pub mod llama;
pub mod qwen35;

pub use llama::{LLAMA_LIKE, LlamaConfig};
pub use qwen35::Qwen35Config;

use lilypad_gguf::GgufFile;

use crate::activations::{ActivationShape, ActivationStore, LayerActivations, MtpActivations};
use crate::backward::{BackwardBuffers, StepPosition};
use crate::error::{EngineError, Result};
use crate::graph::{Graph, GraphIo};
use crate::kernels::Dispatch;
use crate::linear::Linear;
use crate::model::MemoryPlan;
use crate::state::StateBuffer;
use crate::tensor::{DType, Tensor};
use crate::weights::GpuWeight;

/// Every architecture the engine runs (GGUF `general.architecture`).
pub fn supported_architectures() -> Vec<&'static str> {
    let mut v = LLAMA_LIKE.to_vec();
    v.push(qwen35::ARCH);
    v
}

/// What an architecture provides to the runtime: its weights and how to record a layer.
pub(crate) trait Forward: wgpu::WasmNotSendSync {
    fn embedding(&self) -> &GpuWeight;

    /// Records layer `i` over its activations `l` (the residual stream in `l.x`).
    fn record_layer(&self, g: &mut Graph, i: usize, l: &LayerActivations) -> Result<()>;

    /// Records the backward pass of layer `i` over the activations its forward kept: `b.g`
    /// holds ∂L/∂(its output) and is left holding ∂L/∂(its input) (see `crate::backward`).
    fn record_layer_backward(
        &self,
        _g: &mut Graph,
        _i: usize,
        _l: &LayerActivations,
        _b: &BackwardBuffers,
        _pos: &StepPosition,
    ) -> Result<()> {
        Err(EngineError::Config(
            "this architecture has no backward pass yet".into(),
        ))
    }

    fn output_norm(&self) -> &Tensor;

    fn eps(&self) -> f32;

    /// The [vocab, n_embd] output projection.
    fn lm_head(&self) -> &GpuWeight;

    /// Every linear projection of the forward pass (the ones a LoRA adapter can target).
    fn linears_mut(&mut self) -> Vec<&mut Linear>;

    /// Per layer, the buffers holding one sequence's state.
    fn state(&self) -> Vec<Vec<StateBuffer>>;

    /// Whether a multi-token-prediction layer is loaded ([`Forward::record_mtp`] records it).
    fn has_mtp(&self) -> bool {
        false
    }

    /// Records the multi-token-prediction layer over the step's rows: from each row's final
    /// hidden state (`store.hidden`, as the main graph left it) and the embedding of the token
    /// that follows it (`next`, u32 ids), its own hidden state, normed, into `store.hidden`:
    /// the LM head then gives the logits of the token after that one.
    fn record_mtp(
        &self,
        _g: &mut Graph,
        _next: &wgpu::Buffer,
        _store: &ActivationStore,
        _mtp: &MtpActivations,
    ) -> Result<()> {
        Err(no_mtp_layer())
    }
}

pub(crate) fn no_mtp_layer() -> EngineError {
    EngineError::Config("this model has no multi-token-prediction layer loaded".into())
}

/// The dispatches of a whole forward step: embedding of the step's token ids (`io.ids`), every
/// layer over `store`, and the final norm into `store.hidden` (the LM head's input).
pub(crate) fn record_forward(
    arch: &dyn Forward,
    io: &GraphIo,
    store: &ActivationStore,
) -> Result<Vec<Dispatch>> {
    let mut g = Graph::new(io, store.max_tokens);
    let x = &store.layers[0].x;
    g.embed(arch.embedding(), io.ids, x)?;
    for (i, l) in store.layers.iter().enumerate() {
        arch.record_layer(&mut g, i, l)?;
    }
    g.rms_norm(
        x,
        arch.output_norm(),
        None,
        &store.hidden,
        store.hidden_rstd.as_ref(),
        arch.eps(),
    )?;
    Ok(g.dispatches)
}

/// A model's configuration, read from GGUF metadata.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    Llama(LlamaConfig),
    Qwen35(Qwen35Config),
}

impl ModelConfig {
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        match file.metadata.architecture()? {
            qwen35::ARCH => Qwen35Config::from_gguf(file).map(Self::Qwen35),
            a if LLAMA_LIKE.contains(&a) => LlamaConfig::from_gguf(file).map(Self::Llama),
            a => Err(EngineError::UnsupportedArchitecture(a.to_string())),
        }
    }

    pub fn arch(&self) -> &str {
        match self {
            Self::Llama(c) => &c.arch,
            Self::Qwen35(_) => qwen35::ARCH,
        }
    }

    pub fn vocab(&self) -> u32 {
        match self {
            Self::Llama(c) => c.vocab,
            Self::Qwen35(c) => c.vocab,
        }
    }

    pub fn n_embd(&self) -> u32 {
        match self {
            Self::Llama(c) => c.n_embd,
            Self::Qwen35(c) => c.n_embd,
        }
    }

    pub fn context_train(&self) -> u32 {
        match self {
            Self::Llama(c) => c.context_train,
            Self::Qwen35(c) => c.context_train,
        }
    }

    /// The shapes a graph's activations are sized from.
    pub fn activation_shape(&self) -> ActivationShape {
        match self {
            Self::Llama(c) => c.activation_shape(),
            Self::Qwen35(c) => c.activation_shape(),
        }
    }

    /// (name, [rows, cols]) of every tensor the forward pass reads.
    pub fn tensor_shapes(&self) -> Vec<(String, [u64; 2])> {
        match self {
            Self::Llama(c) => c.tensor_shapes(),
            Self::Qwen35(c) => c.tensor_shapes(),
        }
    }

    /// Every linear a LoRA adapter can target: (GGUF weight name, outputs, inputs), the list
    /// [`crate::Model::lora_targets`] gives once loaded, read from the configuration alone.
    pub fn lora_targets(&self) -> Vec<(String, usize, usize)> {
        const LINEARS: [&str; 12] = [
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
            "attn_qkv",
            "attn_gate",
            "ssm_alpha",
            "ssm_beta",
            "ssm_out",
        ];
        self.tensor_shapes()
            .into_iter()
            .filter(|(name, _)| {
                let stem = name.strip_suffix(".weight").unwrap_or("");
                LINEARS.iter().any(|l| stem.ends_with(&format!(".{l}")))
            })
            .map(|(name, [rows, cols])| (name, rows as usize, cols as usize))
            .collect()
    }

    /// What the model will occupy on the GPU at `context` positions, `max_batch`-token
    /// steps and a KV cache of `kv` elements (`mtp`: with Qwen3.5's multi-token-prediction
    /// layers uploaded).
    pub fn memory_plan(
        &self,
        file: &GgufFile,
        context: u32,
        max_batch: u32,
        kv: DType,
        mtp: bool,
    ) -> MemoryPlan {
        match self {
            Self::Llama(c) => c.memory_plan(file, context, max_batch, kv),
            Self::Qwen35(c) => c.memory_plan(file, context, max_batch, kv, mtp),
        }
    }

    /// One line on the shape of the network, for `lilypad inspect`.
    pub fn summary(&self) -> String {
        match self {
            Self::Llama(c) => format!(
                "layers {}, embedding {}, FFN {}, heads {} (KV {}), head dim {}, vocab {}, RoPE {:?} base {}, context {}{}{}",
                c.n_layer,
                c.n_embd,
                c.n_ff,
                c.n_head,
                c.n_kv_head,
                c.head_dim,
                c.vocab,
                c.rope_mode,
                c.rope_base,
                c.context_train,
                if c.qk_norm { ", QK norm" } else { "" },
                if c.tied_embeddings {
                    ", tied embeddings"
                } else {
                    ""
                }
            ),
            Self::Qwen35(c) => format!(
                "layers {} ({} Gated DeltaNet, {} gated attention), embedding {}, FFN {}, \
                 attention heads {} (KV {}) of {} with RoPE on {} dims base {}, DeltaNet heads \
                 {} key / {} value of {}/{}, conv kernel {}, vocab {}, context {}{}{}",
                c.n_layer,
                c.n_layer - c.n_attention_layers(),
                c.n_attention_layers(),
                c.n_embd,
                c.n_ff,
                c.n_head,
                c.n_kv_head,
                c.head_dim,
                c.n_rot,
                c.rope_base,
                c.delta.n_k,
                c.delta.n_v,
                c.delta.d_k,
                c.delta.d_v,
                c.conv_kernel,
                c.vocab,
                c.context_train,
                if c.tied_embeddings {
                    ", tied embeddings"
                } else {
                    ""
                },
                match c.n_mtp {
                    0 => String::new(),
                    n => format!(", {n} multi-token-prediction layer(s)"),
                }
            ),
        }
    }

    /// Checks and uploads the weights.
    pub(crate) fn load(
        &self,
        l: &blocks::Loader,
        context: u32,
        mtp: bool,
    ) -> Result<Box<dyn Forward>> {
        Ok(match self {
            Self::Llama(c) => Box::new(llama::Llama::load(l, c, context)?),
            Self::Qwen35(c) => Box::new(qwen35::Qwen35::load(l, c, context, mtp)?),
        })
    }

    /// The tensors [`ModelConfig::load`] reads.
    pub(crate) fn loaded_tensor_shapes(&self, mtp: bool) -> Vec<(String, [u64; 2])> {
        let mut v = self.tensor_shapes();
        if let (Self::Qwen35(c), true) = (self, mtp) {
            v.extend(c.mtp_tensor_shapes());
        }
        v
    }
}

/// Bytes the tensors in `shapes` take on the GPU: norms are widened to f32, everything else
/// keeps its file size.
pub(crate) fn weight_bytes(file: &GgufFile, shapes: &[(String, [u64; 2])]) -> u64 {
    shapes
        .iter()
        .filter_map(|(name, _)| file.tensor(name))
        .map(|t| {
            if t.dims.len() == 1 || t.rows() == 1 {
                t.n_elements() * 4
            } else {
                t.n_bytes()
            }
        })
        .sum()
}
