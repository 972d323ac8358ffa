//! The backward pass of training: the gradients of a per-token log-probability loss
//!
//! ```text
//! L = Σ_t coef[t] · log p(targets[t] | tokens[..=t])
//! ```
//!
//! with respect to every LoRA adapter's A and B (the model's own weights stay frozen), through
//! the backward kernels of `shaders/*_backward.wgsl`, over a [`TrainingForward`]. `coef` carries
//! the policy-gradient weights (advantage, clipping, normalisation); zero leaves a position out.
//!
//! Steps run last to first and, inside a step, layers last to first. The residual stream's
//! gradient restarts at each step's LM head; what crosses steps is the gradient of the keys and
//! values, kept per layer in cache-shaped buffers: a step's queries add to the rows of every
//! earlier position they saw, and those rows' own step, which runs later, reads the total.
//! Each architecture records its layers' backward from the shared blocks
//! (`models/blocks.rs`), as it records their forward.

// An op names each tensor it reads and writes, as the graph's forward ops do.
#![allow(clippy::too_many_arguments)]

use std::collections::HashMap;

use lilypad_gguf::peft::LoraTensor;

use crate::activations::{
    ActivationMode, ActivationShape, ActivationStore, LayerActivations, LayerKind,
};
use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::graph::Graph;
use crate::kernels::Dispatch;
use crate::linear::Linear;
use crate::model::Model;
use crate::ops::{
    self,
    matmul::{Operand, TokenDim},
};
use crate::tensor::Tensor;
use crate::training::TrainingForward;

/// What a layer's backward reads and writes besides its kept activations; every [T, ·]
/// tensor has rows for the longest step.
pub struct BackwardBuffers {
    /// The residual stream's gradient [T, n_embd]: ∂L/∂(the layer's output) coming in,
    /// ∂L/∂(its input) going out.
    pub g: Tensor,
    /// A norm's output gradient, the sum over the linears that read it [T, n_embd].
    pub d_norm: Tensor,
    /// Attention: ∂L/∂(its output) [T, q_dim], ∂L/∂q after RoPE and before it (and before
    /// QK-norm), Σ dO·O per (token, head), and this step's rows of ∂L/∂K and ∂L/∂V.
    pub d_att: Tensor,
    pub dq: Tensor,
    pub dq_raw: Tensor,
    pub delta: Tensor,
    pub dk: Tensor,
    pub dk_raw: Tensor,
    pub dv: Tensor,
    /// Per attention layer (None for others), ∂L/∂K and ∂L/∂V in the caches' layout (one
    /// sequence's rows).
    pub kv: Vec<Option<(Tensor, Tensor)>>,
    /// The MLP: ∂L/∂(down's input), ∂L/∂gate, ∂L/∂up [T, n_ff].
    pub d_act: Tensor,
    pub d_gate: Tensor,
    pub d_up: Tensor,
    /// Gated attention (Qwen3.5): ∂L/∂(attn_q's output) [T, 2 · q_dim].
    pub dqg: Option<Tensor>,
    /// Qwen3.5's DeltaNet layers.
    pub delta_net: Option<DeltaBuffers>,
    /// The step's logits and their gradient [T, vocab], and the loss's targets and weights.
    pub logits: Tensor,
    pub d_logits: Tensor,
    pub targets: wgpu::Buffer,
    pub coef: Tensor,
    /// LoRA: A·x and its gradient [T, largest padded rank].
    pub lora_x: Option<(Tensor, Tensor)>,
    /// Per adapted linear (by weight name), ∂L/∂A [padded rank, n_in] and ∂L/∂B [n_out,
    /// padded rank], summed over the steps.
    pub lora: HashMap<String, (Tensor, Tensor)>,
}

impl BackwardBuffers {
    /// The buffers for steps of up to `t_max` tokens of a model of `shape` whose caches hold
    /// `context` positions per sequence.
    pub fn new(
        ctx: &GpuContext,
        shape: &ActivationShape,
        vocab: u32,
        t_max: u32,
        context: u32,
        max_rank: u32,
        lora: HashMap<String, (Tensor, Tensor)>,
    ) -> Result<Self> {
        let a = &shape.attention;
        let z = |label, cols| Tensor::zeros(ctx, label, [t_max, cols]);
        let kv = shape
            .layers
            .iter()
            .map(|k| match k {
                LayerKind::Attention => Ok(Some((
                    Tensor::zeros(ctx, "dK cache", [context, a.kv_dim()])?,
                    Tensor::zeros(ctx, "dV cache", [context, a.kv_dim()])?,
                ))),
                LayerKind::DeltaNet => Ok(None),
            })
            .collect::<Result<_>>()?;
        let delta_net = match &shape.delta {
            Some(d) => {
                let (value, channels) = (d.n_v * d.d_v, d.qkv_len() as u32);
                let conv_state = [shape.conv_taps - 1, channels];
                let carried = shape
                    .layers
                    .iter()
                    .map(|k| match k {
                        LayerKind::DeltaNet => Ok(Some((
                            Tensor::zeros(ctx, "d delta state", [d.n_v, d.d_k * d.d_v])?,
                            [
                                Tensor::zeros(ctx, "d conv state", conv_state)?,
                                Tensor::zeros(ctx, "d conv state", conv_state)?,
                            ],
                        ))),
                        LayerKind::Attention => Ok(None),
                    })
                    .collect::<Result<_>>()?;
                Some(DeltaBuffers {
                    d_normed: z("d delta normed", value)?,
                    d_o: z("d delta out", value)?,
                    dz: z("d delta gate", value)?,
                    dqkv: z("d qkv", channels)?,
                    dqkv_raw: z("d qkv raw", channels)?,
                    d_alpha: z("d alpha", d.n_v)?,
                    d_beta: z("d beta", d.n_v)?,
                    scratch: ctx.storage_buffer(
                        "delta backward scratch",
                        d.backward_scratch_len(t_max) * 4,
                        wgpu::BufferUsages::empty(),
                    )?,
                    conv_zeros: Tensor::zeros(ctx, "conv start", conv_state)?,
                    carried,
                })
            }
            None => None,
        };
        Ok(Self {
            g: z("d residual", shape.n_embd)?,
            d_norm: z("d normed", shape.n_embd)?,
            d_att: z("d attention out", a.q_dim())?,
            dq: z("dq", a.q_dim())?,
            dq_raw: z("dq raw", a.q_dim())?,
            delta: z("attention delta", a.n_head)?,
            dk: z("dk", a.kv_dim())?,
            dk_raw: z("dk raw", a.kv_dim())?,
            dv: z("dv", a.kv_dim())?,
            kv,
            d_act: z("d act", shape.n_ff)?,
            d_gate: z("d gate", shape.n_ff)?,
            d_up: z("d up", shape.n_ff)?,
            dqg: match a.gated {
                true => Some(z("dqg", 2 * a.q_dim())?),
                false => None,
            },
            delta_net,
            logits: z("logits", vocab)?,
            d_logits: z("d logits", vocab)?,
            targets: ctx.storage_buffer(
                "targets",
                t_max as u64 * 4,
                wgpu::BufferUsages::empty(),
            )?,
            coef: z("loss weights", 1)?,
            lora_x: Some((z("lora u", max_rank)?, z("lora du", max_rank)?)),
            lora,
        })
    }

    /// ∂L/∂K and ∂L/∂V of attention layer `layer`.
    pub fn kv_grads(&self, layer: usize) -> Result<&(Tensor, Tensor)> {
        self.kv.get(layer).and_then(Option::as_ref).ok_or_else(|| {
            EngineError::Config(format!("layer {layer} has no key/value gradient buffers"))
        })
    }

    /// Zeroes what crosses steps (the key/value gradient caches and the recurrent state
    /// gradients): each backward pass starts from its sequence's end with nothing carried.
    /// Everything else is written before it is read.
    pub fn clear_carried(&self, ctx: &GpuContext) {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        for (k, v) in self.kv.iter().flatten() {
            encoder.clear_buffer(&k.buffer, 0, None);
            encoder.clear_buffer(&v.buffer, 0, None);
        }
        if let Some(d) = &self.delta_net {
            for (state, [c0, c1]) in d.carried.iter().flatten() {
                for t in [state, c0, c1] {
                    encoder.clear_buffer(&t.buffer, 0, None);
                }
            }
        }
        ctx.queue.submit([encoder.finish()]);
    }

    /// Bytes of every buffer [`BackwardBuffers::new`] makes (the gradients in `lora` are the
    /// caller's and not counted).
    pub fn bytes(&self) -> u64 {
        let mut t = vec![
            &self.g,
            &self.d_norm,
            &self.d_att,
            &self.dq,
            &self.dq_raw,
            &self.delta,
            &self.dk,
            &self.dk_raw,
            &self.dv,
            &self.d_act,
            &self.d_gate,
            &self.d_up,
            &self.logits,
            &self.d_logits,
            &self.coef,
        ];
        t.extend(self.kv.iter().flatten().flat_map(|(k, v)| [k, v]));
        t.extend(&self.dqg);
        t.extend(self.lora_x.iter().flat_map(|(u, du)| [u, du]));
        let mut bytes = self.targets.size() + t.iter().map(|t| t.bytes()).sum::<u64>();
        if let Some(d) = &self.delta_net {
            let mut t = vec![
                &d.d_normed,
                &d.d_o,
                &d.dz,
                &d.dqkv,
                &d.dqkv_raw,
                &d.d_alpha,
                &d.d_beta,
                &d.conv_zeros,
            ];
            t.extend(
                d.carried
                    .iter()
                    .flatten()
                    .flat_map(|(s, [c0, c1])| [s, c0, c1]),
            );
            bytes += d.scratch.size() + t.iter().map(|t| t.bytes()).sum::<u64>();
        }
        bytes
    }

    /// What [`BackwardBuffers::new`] will allocate, without a GPU: a training plan's share for
    /// the backward pass.
    pub fn planned_bytes(
        shape: &ActivationShape,
        vocab: u32,
        t_max: u32,
        context: u32,
        max_rank: u32,
    ) -> u64 {
        let a = &shape.attention;
        let rows = |cols: u32| t_max as u64 * cols as u64 * 4;
        let attention_layers = shape
            .layers
            .iter()
            .filter(|k| **k == LayerKind::Attention)
            .count() as u64;
        let mut bytes = 2 * rows(shape.n_embd)
            + 3 * rows(a.q_dim())
            + rows(a.n_head)
            + 3 * rows(a.kv_dim())
            + 3 * rows(shape.n_ff)
            + 2 * rows(vocab)
            + 2 * rows(1)
            + 2 * rows(max_rank)
            + attention_layers * 2 * context as u64 * a.kv_dim() as u64 * 4;
        if a.gated {
            bytes += rows(2 * a.q_dim());
        }
        if let Some(d) = &shape.delta {
            let (value, channels) = (d.n_v * d.d_v, d.qkv_len() as u32);
            let conv_state = (shape.conv_taps as u64 - 1) * channels as u64 * 4;
            let delta_layers = shape.layers.len() as u64 - attention_layers;
            bytes += 3 * rows(value)
                + 2 * rows(channels)
                + 2 * rows(d.n_v)
                + d.backward_scratch_len(t_max) * 4
                + conv_state
                + delta_layers * (d.state_len() * 4 + 2 * conv_state);
        }
        bytes
    }
}

/// What a DeltaNet layer's backward uses besides [`BackwardBuffers`]' shared tensors.
pub struct DeltaBuffers {
    /// ∂L/∂(ssm_out's input), ∂L/∂(the delta rule's output), ∂L/∂z [T, n_v · d_v].
    pub d_normed: Tensor,
    pub d_o: Tensor,
    pub dz: Tensor,
    /// ∂L/∂(the conv's output) and ∂L/∂(its input) [T, qkv channels].
    pub dqkv: Tensor,
    pub dqkv_raw: Tensor,
    /// ∂L/∂alpha, ∂L/∂beta [T, n_v].
    pub d_alpha: Tensor,
    pub d_beta: Tensor,
    /// The delta rule backward's scratch.
    pub scratch: wgpu::Buffer,
    /// The conv's state at a sequence's start: zeros [taps − 1, channels].
    pub conv_zeros: Tensor,
    /// Per layer (None for attention layers): the delta rule's state gradient, carried from
    /// step to step in place, and the conv state's, in two buffers that steps use in turn
    /// (one read while the other is written).
    pub carried: Vec<Option<(Tensor, [Tensor; 2])>>,
}

/// Where a layer's backward runs: which step, and what a recurrent layer's incoming state
/// comes from: the same layer's kept activations in the step before (its conv state is that
/// step's last inputs), or, checkpointed, the state saved as the step began.
pub struct StepPosition<'a> {
    pub index: usize,
    pub previous: Option<&'a LayerActivations>,
    /// Checkpointed passes: the layer's recurrent state buffers as the step began.
    pub recurrent_in: Option<&'a [wgpu::Buffer]>,
}

/// dx (+)= ∂L/∂x of y = W·x (+ scale · B·(A·x)) given dy, for a frozen W; an adapter's
/// gradients are added to its entry of `b.lora` (A·x is recomputed from x).
pub fn linear_backward(
    g: &mut Graph,
    linear: &Linear,
    x: &Tensor,
    dy: &Tensor,
    dx: &Tensor,
    accumulate: bool,
    b: &BackwardBuffers,
) -> Result<()> {
    let w = &linear.weight;
    let (n_out, n_in) = (w.rows as u32, w.cols as u32);
    x.expect("linear_backward", g.max_tokens, n_in)?;
    dx.expect("linear_backward", g.max_tokens, n_in)?;
    dy.expect("linear_backward", g.max_tokens, n_out)?;
    for d in
        ops::matvec::matvec_backward(g.ctx, w, &dy.buffer, &dx.buffer, n_out, g.step, accumulate)?
    {
        g.push(d);
    }
    let Some(lora) = &linear.lora else {
        return Ok(());
    };
    let missing = || EngineError::Config(format!("no gradient buffers for {}", linear.name()));
    let (da, db) = b.lora.get(linear.name()).ok_or_else(missing)?;
    let (u, du) = b.lora_x.as_ref().ok_or_else(missing)?;
    let (t, r) = (g.max_tokens, lora.rank);
    let (a_w, b_w) = (&lora.a.chunks[0].q, &lora.b.chunks[0].q);
    let (ur, dyr) = (u.cols(), dy.cols());
    let mm = |g: &mut Graph, a, b, c: &Tensor, mnk, alpha, acc, tokens| -> Result<()> {
        let d = ops::matmul::matmul(
            g.ctx,
            ops::matmul::MatmulLayout::for_context(g.ctx),
            a,
            b,
            &c.buffer,
            mnk,
            c.cols(),
            alpha,
            acc,
            tokens,
            g.step,
        )?;
        g.push(d);
        Ok(())
    };
    // u = x·Aᵀ; ∂B = scale · dyᵀ·u; du = dy·(scale · B); ∂A = duᵀ·x; dx += du·A.
    let (xo, uo, duo) = (
        Operand::new(&x.buffer, n_in),
        Operand::new(&u.buffer, ur),
        Operand::new(&du.buffer, ur),
    );
    mm(
        g,
        xo,
        Operand::t(a_w, n_in),
        u,
        [t, r, n_in],
        1.0,
        false,
        TokenDim::Rows,
    )?;
    mm(
        g,
        Operand::t(&dy.buffer, dyr),
        uo,
        db,
        [n_out, r, t],
        lora.scale,
        true,
        TokenDim::Inner,
    )?;
    mm(
        g,
        Operand::new(&dy.buffer, dyr),
        Operand::new(b_w, r),
        du,
        [t, r, n_out],
        1.0,
        false,
        TokenDim::Rows,
    )?;
    mm(
        g,
        Operand::t(&du.buffer, ur),
        xo,
        da,
        [r, n_in, t],
        1.0,
        true,
        TokenDim::Inner,
    )?;
    mm(
        g,
        duo,
        Operand::new(a_w, n_in),
        dx,
        [t, n_in, r],
        1.0,
        true,
        TokenDim::Rows,
    )
}

/// dx (+)= ∂L/∂x of a plain RMSNorm y = x · rstd · w, from the forward's saved rstd.
pub fn rms_norm_backward(
    g: &mut Graph,
    x: &Tensor,
    w: &Tensor,
    rstd: Option<&Tensor>,
    dy: &Tensor,
    dx: &Tensor,
    groups: u32,
    accumulate: bool,
) -> Result<()> {
    let rstd = rstd.ok_or_else(|| {
        EngineError::Config("a norm's backward needs the rstd its forward kept".into())
    })?;
    let n = w.cols();
    x.expect("rms_norm_backward", g.max_tokens, n * groups)?;
    dy.expect("rms_norm_backward", g.max_tokens, n * groups)?;
    dx.expect("rms_norm_backward", g.max_tokens, n * groups)?;
    rstd.expect("rms_norm_backward", g.max_tokens, groups)?;
    let d = ops::rms_norm::rms_norm_backward(
        g.ctx,
        &x.buffer,
        &w.buffer,
        &rstd.buffer,
        &dy.buffer,
        &dx.buffer,
        None,
        n,
        groups,
        accumulate,
        g.step,
    )?;
    g.push(d);
    Ok(())
}

/// The gradients of a model's LoRA adapter on the GPU, in the layout of the adapter's own
/// buffers (ranks padded), summed over backward passes until [`LoraGradients::zero`]: what an
/// optimizer reads. It also holds the backward pass's buffers
/// ([`BackwardBuffers::planned_bytes`]), made once for the model's step size and context.
pub struct LoraGradients {
    /// Per adapted linear (by weight name): ∂L/∂A [padded rank, n_in] and ∂L/∂B [n_out,
    /// padded rank], of B before its scale.
    pub tensors: HashMap<String, (Tensor, Tensor)>,
    /// The backward pass's own buffers, made once and reused by every pass that adds here.
    buffers: BackwardBuffers,
}

impl LoraGradients {
    /// Zeroed gradients for the adapter `model` has now.
    pub fn new(model: &mut Model) -> Result<Self> {
        let ctx = model.gpu().clone();
        let mut tensors = HashMap::new();
        let mut max_rank = 0;
        for l in model.arch.linears_mut() {
            if let Some(ad) = &l.lora {
                let (rows, cols) = (l.weight.rows as u32, l.weight.cols as u32);
                max_rank = max_rank.max(ad.rank);
                tensors.insert(
                    l.name().to_string(),
                    (
                        Tensor::zeros(&ctx, "lora dA", [ad.rank, cols])?,
                        Tensor::zeros(&ctx, "lora dB", [rows, ad.rank])?,
                    ),
                );
            }
        }
        if tensors.is_empty() {
            return Err(EngineError::Config(
                "the model has no LoRA adapter to take gradients of".into(),
            ));
        }
        let buffers = BackwardBuffers::new(
            &ctx,
            &model.config.activation_shape(),
            model.config.vocab(),
            model.max_batch,
            model.context,
            max_rank,
            tensors.clone(),
        )?;
        Ok(Self { tensors, buffers })
    }

    /// Sets every gradient to zero (after an optimizer step).
    pub fn zero(&self, ctx: &GpuContext) {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        for (a, b) in self.tensors.values() {
            encoder.clear_buffer(&a.buffer, 0, None);
            encoder.clear_buffer(&b.buffer, 0, None);
        }
        ctx.queue.submit([encoder.finish()]);
    }

    /// The gradients, one per adapted linear of `model` in its order, each in its adapter
    /// tensor's layout (the adapter's own rank, B before its scale).
    pub async fn read(&self, model: &mut Model) -> Result<Vec<LoraTensor>> {
        let ctx = model.gpu().clone();
        let mut out = Vec::new();
        for l in model.arch.linears_mut() {
            let (Some(ad), Some((da, db))) = (&l.lora, self.tensors.get(l.name())) else {
                continue;
            };
            let (rows, cols, r) = (
                l.weight.rows as usize,
                l.weight.cols as usize,
                ad.rank as usize,
            );
            let a_pad = ctx.read_f32(&da.buffer, 0, (r * cols) as u64).await?;
            let b_pad = ctx.read_f32(&db.buffer, 0, (rows * r) as u64).await?;
            // The padding rows of A and columns of B are not the adapter's.
            let rank = ad.adapter_rank as usize;
            out.push(LoraTensor {
                target: l.name().to_string(),
                rank,
                n_in: cols,
                n_out: rows,
                a: a_pad[..rank * cols].to_vec(),
                b: b_pad
                    .chunks_exact(r)
                    .flat_map(|row| row[..rank].to_vec())
                    .collect(),
            });
        }
        Ok(out)
    }
}

impl Model {
    /// The LoRA gradients of L = Σ_t coef[t] · log p(targets[t] | tokens[..=t]) over the
    /// sequence of `fwd` (which this model must still hold in slot 0), one per adapted
    /// linear, each in its adapter tensor's layout (∂L/∂A, and ∂L/∂B of B before its scale).
    /// `targets` and `coef` have a value per token of the sequence.
    pub async fn lora_gradients(
        &mut self,
        fwd: &TrainingForward,
        targets: &[u32],
        coef: &[f32],
    ) -> Result<Vec<LoraTensor>> {
        let grads = LoraGradients::new(self)?;
        self.lora_backward(fwd, targets, coef, &grads).await?;
        grads.read(self).await
    }

    /// log p(targets[t] | tokens[..=t]) for every token of `fwd`'s sequence, from its kept
    /// final hidden states: the current policy's log-probabilities, which a clipped
    /// policy-gradient loss compares with those recorded at sampling time before it sets the
    /// backward pass's weights. The model must still hold the sequence in slot 0.
    pub async fn training_log_probs(
        &mut self,
        fwd: &TrainingForward,
        targets: &[u32],
    ) -> Result<Vec<f32>> {
        let n = fwd.tokens.len();
        if targets.len() != n {
            return Err(EngineError::Sequence(format!(
                "{} targets for {n} tokens",
                targets.len()
            )));
        }
        let vocab = self.config.vocab();
        if let Some(&id) = targets.iter().find(|&&t| t >= vocab) {
            return Err(EngineError::BadToken {
                id,
                vocab: vocab as usize,
            });
        }
        if self.sequence_tokens(0) != fwd.tokens.as_slice() || fwd.mode != ActivationMode::Keep {
            return Err(EngineError::Sequence(
                "log-probabilities need a kept forward pass of the sequence the model holds".into(),
            ));
        }
        let ctx = self.gpu().clone();
        let t_max = fwd.step_tokens;
        let logits = Tensor::zeros(&ctx, "logits", [t_max, vocab])?;
        let step_targets =
            ctx.storage_buffer("targets", t_max as u64 * 4, wgpu::BufferUsages::empty())?;
        let out = Tensor::zeros(&ctx, "log probs", [t_max, 1])?;
        let mut lp = Vec::with_capacity(n);
        for (s, store) in fwd.steps.iter().enumerate() {
            let start = s * t_max as usize;
            let end = (start + t_max as usize).min(n);
            self.write_step_input(&fwd.tokens[start..end], start as u32);
            ctx.queue
                .write_buffer(&step_targets, 0, bytemuck::cast_slice(&targets[start..end]));
            let graph = {
                let io = self.graph_io();
                let mut g = Graph::new(&io, t_max);
                self.record_logits(&mut g, store, &logits)?;
                g.push(ops::softmax::gather_log_probs(
                    g.ctx,
                    &logits.buffer,
                    &step_targets,
                    &out.buffer,
                    vocab,
                    t_max,
                )?);
                g.dispatches
            };
            self.submit_graph(new_encoder(&ctx), &graph, (end - start) as u32)
                .await?;
            lp.extend(ctx.read_f32(&out.buffer, 0, (end - start) as u64).await?);
        }
        Ok(lp)
    }

    /// [`Model::lora_gradients`] added to `grads` on the GPU (a batch's sequences sum there).
    pub async fn lora_backward(
        &mut self,
        fwd: &TrainingForward,
        targets: &[u32],
        coef: &[f32],
        grads: &LoraGradients,
    ) -> Result<()> {
        let n = fwd.tokens.len();
        if targets.len() != n || coef.len() != n {
            return Err(EngineError::Sequence(format!(
                "{} targets and {} weights for {n} tokens",
                targets.len(),
                coef.len()
            )));
        }
        let vocab = self.config.vocab();
        if let Some(&id) = targets.iter().find(|&&t| t >= vocab) {
            return Err(EngineError::BadToken {
                id,
                vocab: vocab as usize,
            });
        }
        if self.sequence_tokens(0) != fwd.tokens.as_slice() {
            return Err(EngineError::Sequence(
                "the model no longer holds the forward pass's sequence".into(),
            ));
        }
        if fwd.mode == ActivationMode::Shared {
            return Err(EngineError::Config(
                "the backward pass reads a training forward pass's activations (Keep or Checkpoint)".into(),
            ));
        }
        // Checkpointed: each layer is run again from its kept input before its backward.
        let checkpoint = fwd.mode == ActivationMode::Checkpoint;
        let ctx = self.gpu().clone();
        let t_max = fwd.step_tokens;
        let shape = self.config.activation_shape();
        for l in self.arch.linears_mut() {
            let fits = match (&l.lora, grads.tensors.get(l.name())) {
                (None, None) => true,
                (Some(ad), Some((da, db))) => {
                    da.shape == [ad.rank, l.weight.cols as u32]
                        && db.shape == [l.weight.rows as u32, ad.rank]
                }
                _ => false,
            };
            if !fits {
                return Err(EngineError::Config(format!(
                    "the gradients were made for another adapter than {}'s",
                    l.name()
                )));
            }
        }
        if t_max > self.max_batch {
            return Err(EngineError::Sequence(format!(
                "a forward pass in steps of {t_max} tokens for a model that takes {}",
                self.max_batch
            )));
        }
        let b = &grads.buffers;
        b.clear_carried(&ctx);
        let n_layers = shape.layers.len();
        for s in (0..fwd.steps.len()).rev() {
            let start = s * t_max as usize;
            let end = (start + t_max as usize).min(n);
            let store = &fwd.steps[s];
            if checkpoint {
                // The last layer's output is the final norm's input.
                fwd.recompute(self, s, n_layers - 1).await?;
            }
            self.write_step_input(&fwd.tokens[start..end], start as u32);
            let mut tg = targets[start..end].to_vec();
            let mut cf = coef[start..end].to_vec();
            tg.resize(t_max as usize, 0);
            cf.resize(t_max as usize, 0.0);
            ctx.queue
                .write_buffer(&b.targets, 0, bytemuck::cast_slice(&tg));
            ctx.queue
                .write_buffer(&b.coef.buffer, 0, bytemuck::cast_slice(&cf));
            let head = {
                let io = self.graph_io();
                let mut g = Graph::new(&io, t_max);
                self.record_head_backward(&mut g, store, b)?;
                g.dispatches
            };
            self.submit_graph(new_encoder(&ctx), &head, (end - start) as u32)
                .await?;
            for i in (0..n_layers).rev() {
                if checkpoint {
                    fwd.recompute(self, s, i).await?;
                    self.write_step_input(&fwd.tokens[start..end], start as u32);
                }
                let layer = {
                    let io = self.graph_io();
                    let mut g = Graph::new(&io, t_max);
                    let pos = StepPosition {
                        index: s,
                        previous: (!checkpoint)
                            .then(|| s.checked_sub(1).map(|p| &fwd.steps[p].layers[i]))
                            .flatten(),
                        recurrent_in: fwd.recurrent_in(s, i),
                    };
                    self.arch
                        .record_layer_backward(&mut g, i, &store.layers[i], b, &pos)?;
                    g.dispatches
                };
                self.submit_graph(new_encoder(&ctx), &layer, (end - start) as u32)
                    .await?;
            }
        }
        ctx.check()
    }

    /// The step's final norm again (into `store.hidden`) and its logits.
    fn record_logits(&self, g: &mut Graph, store: &ActivationStore, logits: &Tensor) -> Result<()> {
        let x = &store
            .layers
            .last()
            .ok_or_else(|| EngineError::Config("a model without layers".into()))?
            .x;
        let rstd = store.hidden_rstd.as_ref();
        let eps = self.arch.eps();
        g.rms_norm(x, self.arch.output_norm(), None, &store.hidden, rstd, eps)?;
        let head = self.arch.lm_head();
        let vocab = head.rows as u32;
        for d in ops::matvec::matvec(
            g.ctx,
            head,
            &store.hidden.buffer,
            &logits.buffer,
            vocab,
            g.step,
            g.tile,
            false,
        )? {
            // Named apart in profiles: the head is the largest matrix by far.
            g.push(Dispatch {
                label: "lm_head",
                ..d
            });
        }
        Ok(())
    }

    /// The step's logits, their gradient, and back through the LM head and the final norm
    /// into `b.g`.
    fn record_head_backward(
        &self,
        g: &mut Graph,
        store: &ActivationStore,
        b: &BackwardBuffers,
    ) -> Result<()> {
        let (logits, d_logits, targets, coef) = (&b.logits, &b.d_logits, &b.targets, &b.coef);
        self.record_logits(g, store, logits)?;
        let x = &store.layers[store.layers.len() - 1].x;
        let (norm, rstd) = (self.arch.output_norm(), store.hidden_rstd.as_ref());
        let head = self.arch.lm_head();
        let vocab = head.rows as u32;
        g.push(ops::softmax::log_prob_backward(
            g.ctx,
            &logits.buffer,
            targets,
            &coef.buffer,
            &d_logits.buffer,
            vocab,
            g.max_tokens,
        )?);
        for d in ops::matvec::matvec_backward(
            g.ctx,
            head,
            &d_logits.buffer,
            &b.d_norm.buffer,
            vocab,
            g.step,
            false,
        )? {
            g.push(Dispatch {
                label: "lm_head_backward",
                ..d
            });
        }
        rms_norm_backward(g, x, norm, rstd, &b.d_norm, &b.g, 1, false)
    }
}

fn new_encoder(ctx: &GpuContext) -> wgpu::CommandEncoder {
    ctx.device.create_command_encoder(&Default::default())
}
