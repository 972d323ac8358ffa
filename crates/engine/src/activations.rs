//! Where a graph's intermediate values live. Inference needs each value only until the next
//! op has read it, so every layer writes the same buffers ([`ActivationMode::Shared`]). A
//! backward pass needs, per layer, the inputs of each linear, the norms' reciprocal RMS,
//! attention's softmax statistics and DeltaNet's chunk states: a training graph either keeps
//! all of them per layer ([`ActivationMode::Keep`]) or keeps only each layer's input and
//! recomputes the layer from it when the backward pass reaches it
//! ([`ActivationMode::Checkpoint`]). [`ActivationPlan`] sizes each choice and picks by a
//! memory budget.

use crate::error::Result;
use crate::gpu::GpuContext;
use crate::models::blocks::AttentionShape;
use crate::ops::delta_net::DeltaNetShape;
use crate::tensor::Tensor;

/// How a graph stores its activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivationMode {
    /// One set of buffers for every layer: inference.
    Shared,
    /// Every layer keeps what its backward pass reads.
    Keep,
    /// Every layer keeps its input; the rest is shared and recomputed per layer.
    Checkpoint,
}

/// How a layer mixes tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    Attention,
    DeltaNet,
}

/// The shapes activations are sized from.
#[derive(Clone, Debug, PartialEq)]
pub struct ActivationShape {
    pub n_embd: u32,
    pub n_ff: u32,
    pub attention: AttentionShape,
    /// Qwen3.5's recurrent layers.
    pub delta: Option<DeltaNetShape>,
    /// Qwen3.5's conv kernel taps (its state holds the last taps − 1 inputs).
    pub conv_taps: u32,
    pub layers: Vec<LayerKind>,
}

/// Full attention's values.
#[derive(Clone, Debug)]
pub struct AttentionActivations {
    /// Queries after norm and RoPE [T, n_head · head_dim].
    pub q: Tensor,
    /// The step's keys (after any norm, before RoPE) and values [T, n_kv · head_dim], on
    /// their way into the caches (`Graph::rope_store`).
    pub k: Tensor,
    pub v: Tensor,
    /// Attention's output, the input of attn_output (gated, for Qwen3.5) [T, q_dim].
    pub att: Tensor,
    /// Projected q and k before their per-head norms (QK-norm models).
    pub qk_raw: Option<(Tensor, Tensor)>,
    /// attn_q's output with gated attention: per head, the query then its gate [T, 2 · q_dim].
    pub qg: Option<Tensor>,
    /// Training: reciprocal RMS of the per-head q and k norms [T, n_head], [T, n_kv].
    pub qk_rstd: Option<(Tensor, Tensor)>,
    /// Training: each (token, head)'s log-sum-exp of its scaled scores [T, n_head].
    pub lse: Option<Tensor>,
}

/// A Gated DeltaNet layer's values.
#[derive(Clone, Debug)]
pub struct DeltaNetActivations {
    /// attn_qkv's output (the conv's input) and the conv's output [T, qkv channels].
    pub qkv_raw: Tensor,
    pub qkv: Tensor,
    /// attn_gate's output, the output norm's gate [T, n_v · d_v].
    pub z: Tensor,
    /// ssm_alpha's and ssm_beta's outputs [T, n_v].
    pub alpha: Tensor,
    pub beta: Tensor,
    /// The delta rule's output, and the same after the gated norm (ssm_out's input).
    pub o: Tensor,
    pub o_normed: Tensor,
    /// The chunked form's scratch.
    pub chunks: Tensor,
    /// Training: the gated norm's reciprocal RMS [T, n_v].
    pub o_rstd: Option<Tensor>,
    /// Training: each 32-token chunk's incoming state [chunks, n_v · d_k · d_v].
    pub states: Option<Tensor>,
}

#[derive(Clone, Debug)]
pub enum MixerActivations {
    Attention(AttentionActivations),
    DeltaNet(DeltaNetActivations),
}

/// One layer's view of the store: what its ops read and write.
#[derive(Clone, Debug)]
pub struct LayerActivations {
    /// The residual stream [T, n_embd], one buffer through every layer.
    pub x: Tensor,
    /// Keep and Checkpoint: the layer's input (x before the layer).
    pub x_in: Option<Tensor>,
    /// Keep (and shared, in Checkpoint): x after the mixer, the MLP norm's input.
    pub x_mid: Option<Tensor>,
    /// The mixer's normed input, the input of its linears, and the norm's reciprocal RMS.
    pub mixer_in: Tensor,
    pub mixer_rstd: Option<Tensor>,
    pub mixer: MixerActivations,
    /// The MLP's normed input, and the norm's reciprocal RMS.
    pub mlp_in: Tensor,
    pub mlp_rstd: Option<Tensor>,
    /// ffn_gate's and ffn_up's outputs, and silu(gate) ⊙ up (ffn_down's input) [T, n_ff].
    pub gate: Tensor,
    pub up: Tensor,
    pub act: Tensor,
}

impl LayerActivations {
    pub fn attention(&self) -> Option<&AttentionActivations> {
        match &self.mixer {
            MixerActivations::Attention(a) => Some(a),
            MixerActivations::DeltaNet(_) => None,
        }
    }

    pub fn delta_net(&self) -> Option<&DeltaNetActivations> {
        match &self.mixer {
            MixerActivations::DeltaNet(d) => Some(d),
            MixerActivations::Attention(_) => None,
        }
    }
}

/// A graph's activations for steps of up to `max_tokens` tokens.
#[derive(Clone, Debug)]
pub struct ActivationStore {
    pub mode: ActivationMode,
    pub max_tokens: u32,
    pub layers: Vec<LayerActivations>,
    /// The final norm's output, the LM head's input [T, n_embd].
    pub hidden: Tensor,
    pub hidden_rstd: Option<Tensor>,
}

/// Tensor sizes, in f32 values per token unless said otherwise.
impl ActivationShape {
    /// f32 values of one recurrent layer's conv state.
    pub fn conv_state_len(&self) -> u64 {
        self.delta
            .map_or(0, |d| self.conv_taps.saturating_sub(1) as u64 * d.qkv_len())
    }

    fn attention_floats(&self) -> u64 {
        let a = &self.attention;
        let qk_raw = if a.qk_norm { a.q_dim() + a.kv_dim() } else { 0 };
        let qg = if a.gated { 2 * a.q_dim() } else { 0 };
        (2 * a.q_dim() + 2 * a.kv_dim() + qk_raw + qg) as u64
    }

    fn attention_saved_floats(&self) -> u64 {
        let a = &self.attention;
        let qk = if a.qk_norm { a.n_head + a.n_kv } else { 0 };
        (qk + a.n_head) as u64
    }

    fn delta_floats(d: &DeltaNetShape) -> u64 {
        2 * d.qkv_len() + 3 * d.n_v as u64 * d.d_v as u64 + 2 * d.n_v as u64
    }

    /// A mixer's values at `t` tokens: (what its ops write, what training keeps besides).
    fn mixer_floats(&self, kind: LayerKind, t: u64) -> (u64, u64) {
        match (kind, &self.delta) {
            (LayerKind::DeltaNet, Some(d)) => (
                t * Self::delta_floats(d) + d.chunk_scratch_bytes(t as u32) / 4,
                t * d.n_v as u64 + d.chunk_states_len(t as u32),
            ),
            _ => (
                t * self.attention_floats(),
                t * self.attention_saved_floats(),
            ),
        }
    }

    /// Bytes of an [`ActivationStore`] for steps of `max_tokens` tokens in `mode` (what
    /// [`ActivationStore::new`] allocates).
    pub fn store_bytes(&self, max_tokens: u32, mode: ActivationMode) -> u64 {
        let t = max_tokens as u64;
        let (e, f) = (t * self.n_embd as u64, 3 * t * self.n_ff as u64);
        let n_layers = self.layers.len() as u64;
        // One mixer of each kind present, for the shared stores.
        let mixers = |saving: bool| -> u64 {
            [LayerKind::Attention, LayerKind::DeltaNet]
                .into_iter()
                .filter(|k| self.layers.contains(k))
                .map(|k| {
                    let (ops, kept) = self.mixer_floats(k, t);
                    ops + if saving { kept } else { 0 }
                })
                .sum()
        };
        let floats = match mode {
            // x, one normed input (the mixer's and the MLP's, and the hidden state), the MLP.
            ActivationMode::Shared => 2 * e + f + mixers(false),
            // x; per layer its input, x after the mixer, both normed inputs and their rstd,
            // the MLP and the mixer; the hidden state and its rstd.
            ActivationMode::Keep => {
                e + self
                    .layers
                    .iter()
                    .map(|&k| {
                        let (ops, kept) = self.mixer_floats(k, t);
                        4 * e + 2 * t + f + ops + kept
                    })
                    .sum::<u64>()
                    + e
                    + t
            }
            // x and one shared layer with the training values (x after the mixer among
            // them); per layer its input; the hidden state and its rstd.
            ActivationMode::Checkpoint => {
                e + 3 * e + 2 * t + f + mixers(true) + n_layers * e + e + t
            }
        };
        floats * 4
    }
}

impl ActivationStore {
    /// Allocates the activations of steps of up to `max_tokens` tokens.
    pub fn new(
        ctx: &GpuContext,
        shape: &ActivationShape,
        max_tokens: u32,
        mode: ActivationMode,
    ) -> Result<Self> {
        let t = max_tokens;
        let z = |label, cols| Tensor::zeros(ctx, label, [t, cols]);
        let saving = mode != ActivationMode::Shared;
        let a = &shape.attention;
        let attention = |saving: bool| -> Result<AttentionActivations> {
            Ok(AttentionActivations {
                q: z("q", a.q_dim())?,
                k: z("k", a.kv_dim())?,
                v: z("v", a.kv_dim())?,
                att: z("attention out", a.q_dim())?,
                qk_raw: match a.qk_norm {
                    true => Some((z("q raw", a.q_dim())?, z("k raw", a.kv_dim())?)),
                    false => None,
                },
                qg: match a.gated {
                    true => Some(z("q and gate", 2 * a.q_dim())?),
                    false => None,
                },
                qk_rstd: match (saving, a.qk_norm) {
                    (true, true) => Some((z("q rstd", a.n_head)?, z("k rstd", a.n_kv)?)),
                    _ => None,
                },
                lse: match saving {
                    true => Some(z("attention lse", a.n_head)?),
                    false => None,
                },
            })
        };
        let delta = |d: &DeltaNetShape, saving: bool| -> Result<DeltaNetActivations> {
            let value = d.n_v * d.d_v;
            let states_rows = max_tokens.div_ceil(ops_chunk());
            Ok(DeltaNetActivations {
                qkv_raw: z("qkv", d.qkv_len() as u32)?,
                qkv: z("qkv conv", d.qkv_len() as u32)?,
                z: z("z", value)?,
                alpha: z("alpha", d.n_v)?,
                beta: z("beta", d.n_v)?,
                o: z("delta out", value)?,
                o_normed: z("delta out normed", value)?,
                chunks: Tensor::zeros(
                    ctx,
                    "delta chunks",
                    [1, (d.chunk_scratch_bytes(max_tokens) / 4) as u32],
                )?,
                o_rstd: match saving {
                    true => Some(z("delta out rstd", d.n_v)?),
                    false => None,
                },
                states: match saving {
                    true => Some(Tensor::zeros(
                        ctx,
                        "delta chunk states",
                        [states_rows, d.state_len() as u32],
                    )?),
                    false => None,
                },
            })
        };
        let mixer = |kind, saving| -> Result<MixerActivations> {
            Ok(match (kind, &shape.delta) {
                (LayerKind::DeltaNet, Some(d)) => MixerActivations::DeltaNet(delta(d, saving)?),
                _ => MixerActivations::Attention(attention(saving)?),
            })
        };
        let e = shape.n_embd;
        let f = shape.n_ff;
        let x = z("x", e)?;
        let rstd = |label| -> Result<Option<Tensor>> {
            match saving {
                true => z(label, 1).map(Some),
                false => Ok(None),
            }
        };
        let layer = |mixer: MixerActivations, x_in: Option<Tensor>, x_mid: Option<Tensor>| {
            Ok::<_, crate::error::EngineError>(LayerActivations {
                x: x.clone(),
                x_in,
                x_mid,
                mixer_in: z("mixer in", e)?,
                mixer_rstd: rstd("mixer rstd")?,
                mixer,
                mlp_in: z("mlp in", e)?,
                mlp_rstd: rstd("mlp rstd")?,
                gate: z("gate", f)?,
                up: z("up", f)?,
                act: z("swiglu", f)?,
            })
        };
        let layers = match mode {
            ActivationMode::Keep => shape
                .layers
                .iter()
                .map(|&k| layer(mixer(k, true)?, Some(z("x in", e)?), Some(z("x mid", e)?)))
                .collect::<Result<Vec<_>>>()?,
            ActivationMode::Shared | ActivationMode::Checkpoint => {
                // One set of buffers for every layer; only the mixer differs by kind, so
                // there is one mixer set per kind the model has.
                // Checkpoint keeps x after the mixer in the shared set too: a recomputed
                // layer's MLP backward reads it.
                let x_mid = match mode {
                    ActivationMode::Checkpoint => Some(z("x mid", e)?),
                    _ => None,
                };
                let mut shared = layer(mixer(shape.layers[0], saving)?, None, x_mid)?;
                if mode == ActivationMode::Shared {
                    shared.mlp_in = shared.mixer_in.clone();
                }
                let mut mixers = vec![(shape.layers[0], shared.mixer.clone())];
                for &k in &shape.layers {
                    if !mixers.iter().any(|(kind, _)| *kind == k) {
                        mixers.push((k, mixer(k, saving)?));
                    }
                }
                shape
                    .layers
                    .iter()
                    .map(|&k| {
                        let x_in = match mode {
                            ActivationMode::Checkpoint => Some(z("x in", e)?),
                            _ => None,
                        };
                        let (_, mixer) = mixers
                            .iter()
                            .find(|(kind, _)| *kind == k)
                            .expect("made above");
                        Ok(LayerActivations {
                            x_in,
                            mixer: mixer.clone(),
                            ..shared.clone()
                        })
                    })
                    .collect::<Result<Vec<_>>>()?
            }
        };
        let (hidden, hidden_rstd) = match mode {
            ActivationMode::Shared => (layers[0].mixer_in.clone(), None),
            _ => (z("hidden", e)?, rstd("hidden rstd")?),
        };
        Ok(Self {
            mode,
            max_tokens,
            layers,
            hidden,
            hidden_rstd,
        })
    }

    /// A store sharing every buffer of this one but the layer inputs, which are new: the
    /// next step of a checkpointed pass.
    pub fn with_new_layer_inputs(&self, ctx: &GpuContext) -> Result<Self> {
        let mut next = self.clone();
        for l in &mut next.layers {
            if let Some(x_in) = &mut l.x_in {
                *x_in = Tensor::zeros(ctx, x_in.label, x_in.shape)?;
            }
        }
        Ok(next)
    }

    /// Bytes of the distinct buffers this store holds.
    // wgpu hashes a buffer by its id, which never changes.
    #[allow(clippy::mutable_key_type)]
    pub fn bytes(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        let mut total = 0;
        let mut add = |t: &Tensor| {
            if seen.insert(t.buffer.clone()) {
                total += t.buffer.size();
            }
        };
        add(&self.hidden);
        if let Some(r) = &self.hidden_rstd {
            add(r);
        }
        for l in &self.layers {
            for t in [&l.x, &l.mixer_in, &l.mlp_in, &l.gate, &l.up, &l.act] {
                add(t);
            }
            for t in [&l.x_in, &l.x_mid, &l.mixer_rstd, &l.mlp_rstd]
                .into_iter()
                .flatten()
            {
                add(t);
            }
            match &l.mixer {
                MixerActivations::Attention(a) => {
                    for t in [&a.q, &a.k, &a.v, &a.att] {
                        add(t);
                    }
                    for (p, q) in [&a.qk_raw, &a.qk_rstd].into_iter().flatten() {
                        add(p);
                        add(q);
                    }
                    for t in [&a.qg, &a.lse].into_iter().flatten() {
                        add(t);
                    }
                }
                MixerActivations::DeltaNet(d) => {
                    for t in [
                        &d.qkv_raw,
                        &d.qkv,
                        &d.z,
                        &d.alpha,
                        &d.beta,
                        &d.o,
                        &d.o_normed,
                        &d.chunks,
                    ] {
                        add(t);
                    }
                    for t in [&d.o_rstd, &d.states].into_iter().flatten() {
                        add(t);
                    }
                }
            }
        }
        total
    }
}

fn ops_chunk() -> u32 {
    crate::ops::delta_net::CHUNK
}

/// The activation memory of a training forward pass over one sequence of `tokens` tokens,
/// run in steps of `step_tokens`, for both ways of keeping what the backward pass needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActivationPlan {
    pub tokens: u32,
    pub step_tokens: u32,
    /// Every step keeps every layer's values.
    pub keep: u64,
    /// Every step keeps each layer's input (and each recurrent layer's incoming state); one
    /// shared layer is recomputed from them.
    pub checkpoint: u64,
}

impl ActivationPlan {
    pub fn new(shape: &ActivationShape, tokens: u32, step_tokens: u32) -> Self {
        let step_tokens = step_tokens.clamp(1, tokens.max(1));
        let steps = tokens.div_ceil(step_tokens).max(1) as u64;
        let layer_inputs = shape.layers.len() as u64 * step_tokens as u64 * shape.n_embd as u64;
        let recurrent = shape.delta.map_or(0, |d| {
            let n = shape
                .layers
                .iter()
                .filter(|&&k| k == LayerKind::DeltaNet)
                .count() as u64;
            n * (d.state_len() + shape.conv_state_len())
        });
        Self {
            tokens,
            step_tokens,
            keep: steps * shape.store_bytes(step_tokens, ActivationMode::Keep),
            checkpoint: shape.store_bytes(step_tokens, ActivationMode::Checkpoint)
                + 4 * ((steps - 1) * layer_inputs + steps * recurrent),
        }
    }

    /// Keep when it fits in `budget` bytes, else checkpoint.
    pub fn choose(&self, budget: u64) -> ActivationMode {
        if self.keep <= budget {
            ActivationMode::Keep
        } else {
            ActivationMode::Checkpoint
        }
    }
}

/// What a multi-token-prediction layer reads before its decoder layer (which runs over an
/// attention layer's activations of the shared store): the next tokens' embeddings, both
/// inputs normed, and the two side by side [T, 2 · n_embd].
#[derive(Clone, Debug)]
pub struct MtpActivations {
    pub embedded: Tensor,
    pub embedded_normed: Tensor,
    pub hidden_normed: Tensor,
    pub joined: Tensor,
}

impl MtpActivations {
    pub fn new(ctx: &GpuContext, max_tokens: u32, n_embd: u32) -> Result<Self> {
        let t = |label| Tensor::zeros(ctx, label, [max_tokens, n_embd]);
        Ok(Self {
            embedded: t("mtp embedded")?,
            embedded_normed: t("mtp embedded normed")?,
            hidden_normed: t("mtp hidden normed")?,
            joined: Tensor::zeros(ctx, "mtp joined", [max_tokens, 2 * n_embd])?,
        })
    }

    /// Bytes for steps of `max_tokens` tokens.
    pub fn bytes(max_tokens: u32, n_embd: u32) -> u64 {
        5 * max_tokens as u64 * n_embd as u64 * 4
    }
}
