//! The forward pass of training: one sequence, from position 0, in steps of up to the
//! model's `max_batch` tokens, through the same blocks and kernels as inference, with the
//! activations a backward pass reads kept per [`ActivationMode`]. With
//! [`ActivationMode::Checkpoint`] each layer keeps only its input (and a recurrent layer its
//! incoming state), and [`TrainingForward::recompute`] runs one layer of one step again into
//! the shared buffers when the backward pass reaches it.

use crate::activations::{ActivationMode, ActivationStore};
use crate::error::{EngineError, Result};
use crate::graph::{Graph, GraphIo};
use crate::model::Model;
use crate::models::record_forward;
use crate::ops::{self, Step, matvec::PREFILL_TILE};
use crate::tensor::Tensor;

/// A recorded and run training forward pass (see the module docs).
pub struct TrainingForward {
    pub mode: ActivationMode,
    pub tokens: Vec<u32>,
    /// Tokens per step; step s holds tokens[s · step_tokens ..].
    pub step_tokens: u32,
    /// Per step, its activations (in checkpoint mode the steps share every buffer but the
    /// layer inputs).
    pub steps: Vec<ActivationStore>,
    /// Checkpoint: per step and layer, each recurrent state buffer's slot as it was when the
    /// step began (empty for attention layers).
    recurrent_in: Vec<Vec<Vec<wgpu::Buffer>>>,
}

impl Model {
    /// Runs `tokens` through the model as a new sequence in slot 0 (which then holds it),
    /// keeping the activations a backward pass needs per `mode` (`Keep` or `Checkpoint`).
    /// The final hidden states of step s are in `steps[s].hidden`.
    pub async fn forward_for_training(
        &mut self,
        tokens: &[u32],
        mode: ActivationMode,
    ) -> Result<TrainingForward> {
        if mode == ActivationMode::Shared {
            return Err(EngineError::Config(
                "a training forward pass keeps its activations: Keep or Checkpoint".into(),
            ));
        }
        if tokens.is_empty() {
            return Err(EngineError::Sequence("an empty training sequence".into()));
        }
        if tokens.len() > self.context as usize {
            return Err(EngineError::ContextFull {
                needed: tokens.len(),
                capacity: self.context as usize,
            });
        }
        if let Some(&id) = tokens.iter().find(|&&t| t >= self.config.vocab()) {
            return Err(EngineError::BadToken {
                id,
                vocab: self.config.vocab() as usize,
            });
        }
        let ctx = self.gpu().clone();
        let step_tokens = self.training_step_tokens();
        let shape = self.config.activation_shape();
        let n_steps = tokens.len().div_ceil(step_tokens as usize);
        let mut steps: Vec<ActivationStore> = Vec::with_capacity(n_steps);
        for s in 0..n_steps {
            steps.push(match (mode, steps.first()) {
                (ActivationMode::Checkpoint, Some(first)) => first.with_new_layer_inputs(&ctx)?,
                _ => ActivationStore::new(&ctx, &shape, step_tokens, mode)?,
            });
            debug_assert_eq!(steps.len(), s + 1);
        }
        let graphs = steps
            .iter()
            .map(|store| record_forward(self.arch.as_ref(), &self.graph_io(), store))
            .collect::<Result<Vec<_>>>()?;
        let recurrent_in = match mode {
            ActivationMode::Checkpoint => (0..n_steps)
                .map(|_| {
                    self.state
                        .iter()
                        .map(|layer| {
                            layer
                                .iter()
                                .filter(|b| b.row_bytes.is_none())
                                .map(|b| {
                                    ctx.storage_buffer(
                                        "recurrent state in",
                                        b.slot_bytes,
                                        wgpu::BufferUsages::empty(),
                                    )
                                })
                                .collect::<Result<Vec<_>>>()
                        })
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<Vec<_>>>()?,
            _ => Vec::new(),
        };
        self.seqs[0].clear();
        for (s, (chunk, graph)) in tokens.chunks(step_tokens as usize).zip(&graphs).enumerate() {
            let pos0 = (s * step_tokens as usize) as u32;
            self.write_step_input(chunk, pos0);
            let mut encoder = ctx.device.create_command_encoder(&Default::default());
            if s == 0 {
                self.clear_recurrent_state(&mut encoder, 0);
            }
            if let Some(saved) = recurrent_in.get(s) {
                self.copy_recurrent_state(&mut encoder, saved, 0..saved.len(), true);
            }
            self.submit_graph(encoder, graph, chunk.len() as u32)
                .await?;
            self.seqs[0].extend_from_slice(chunk);
        }
        ctx.check()?;
        Ok(TrainingForward {
            mode,
            tokens: tokens.to_vec(),
            step_tokens,
            steps,
            recurrent_in,
        })
    }

    /// Tokens per step of the training passes: the model's batch, or fewer where a backward
    /// kernel cannot take that many on this adapter (the gated delta rule's on CPU adapters:
    /// 15 for FrogNano-4B's d_k of 128).
    pub fn training_step_tokens(&self) -> u32 {
        let limit = self.config.activation_shape().delta.map_or(u32::MAX, |s| {
            ops::delta_net::backward_max_tokens(self.gpu(), &s)
        });
        self.max_batch.min(limit)
    }

    pub(crate) fn graph_io(&self) -> GraphIo<'_> {
        GraphIo {
            ctx: self.gpu(),
            ids: &self.io.ids,
            step: &self.io.step,
            tile: PREFILL_TILE,
            lora: self.lora_scratch.as_ref(),
            multi_sequence: false,
            adapters: true,
        }
    }

    /// The step uniform and token ids of `chunk`, at `pos0` in slot 0.
    pub(crate) fn write_step_input(&self, chunk: &[u32], pos0: u32) {
        let step = Step::for_sequence(chunk.len() as u32, pos0, 0, self.context);
        ops::write_step(self.gpu(), &self.io.step, step);
        self.gpu()
            .queue
            .write_buffer(&self.io.ids, 0, bytemuck::cast_slice(chunk));
    }

    /// Copies slot 0 of every recurrent state buffer of the layers in `layers` into `saved`
    /// (per layer, in order) when `save`, or back from it.
    fn copy_recurrent_state(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        saved: &[Vec<wgpu::Buffer>],
        layers: std::ops::Range<usize>,
        save: bool,
    ) {
        let layers = self
            .state
            .iter()
            .zip(saved)
            .skip(layers.start)
            .take(layers.len());
        for (layer, saved) in layers {
            let recurrent = layer.iter().filter(|b| b.row_bytes.is_none());
            for (b, copy) in recurrent.zip(saved) {
                let offset = b.slot_offset(0);
                if save {
                    encoder.copy_buffer_to_buffer(&b.buffer, offset, copy, 0, b.slot_bytes);
                } else {
                    encoder.copy_buffer_to_buffer(copy, 0, &b.buffer, offset, b.slot_bytes);
                }
            }
        }
    }
}

impl TrainingForward {
    /// Checkpoint mode: runs layer `layer` of step `step` again from its kept input (and
    /// recurrent state), so `steps[step].layers[layer]` holds all its values, as
    /// [`ActivationMode::Keep`] would have kept them. The model must still hold this
    /// sequence (nothing else run in slot 0 since).
    pub async fn recompute(&self, model: &mut Model, step: usize, layer: usize) -> Result<()> {
        if self.mode != ActivationMode::Checkpoint {
            return Err(EngineError::Config(
                "only a checkpointed forward pass recomputes layers".into(),
            ));
        }
        let (Some(store), Some(saved)) = (self.steps.get(step), self.recurrent_in.get(step)) else {
            return Err(EngineError::Sequence(format!(
                "step {step} of a forward pass of {} steps",
                self.steps.len()
            )));
        };
        let Some(acts) = store.layers.get(layer) else {
            return Err(EngineError::Sequence(format!(
                "layer {layer} of {}",
                store.layers.len()
            )));
        };
        if model.sequence_tokens(0) != self.tokens.as_slice() {
            return Err(EngineError::Sequence(
                "the model no longer holds this sequence".into(),
            ));
        }
        let x_in = acts
            .x_in
            .as_ref()
            .expect("checkpointed layers keep their input");
        let graph = {
            let io = model.graph_io();
            let mut g = Graph::new(&io, store.max_tokens);
            g.copy(x_in, &acts.x)?;
            model.arch.record_layer(&mut g, layer, acts)?;
            g.dispatches
        };
        let start = step * self.step_tokens as usize;
        let chunk = &self.tokens[start..(start + self.step_tokens as usize).min(self.tokens.len())];
        model.write_step_input(chunk, start as u32);
        let ctx = model.gpu().clone();
        // The layer runs from its state at the step's start; its state at the end of the
        // sequence is put back after, so the model still holds the whole sequence.
        let current = saved[layer]
            .iter()
            .map(|b| {
                ctx.storage_buffer("recurrent state now", b.size(), wgpu::BufferUsages::empty())
            })
            .collect::<Result<Vec<_>>>()?;
        let mut keep = vec![Vec::new(); layer];
        keep.push(current);
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        model.copy_recurrent_state(&mut encoder, &keep, layer..layer + 1, true);
        model.copy_recurrent_state(&mut encoder, saved, layer..layer + 1, false);
        model
            .submit_graph(encoder, &graph, chunk.len() as u32)
            .await?;
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        model.copy_recurrent_state(&mut encoder, &keep, layer..layer + 1, false);
        ctx.queue.submit([encoder.finish()]);
        ctx.check()
    }

    /// Checkpoint: the recurrent state buffers of `layer` as they were when `step` began
    /// (in the order of the layer's state, one sequence slot each); None otherwise.
    pub fn recurrent_in(&self, step: usize, layer: usize) -> Option<&[wgpu::Buffer]> {
        self.recurrent_in
            .get(step)
            .and_then(|s| s.get(layer))
            .map(Vec::as_slice)
    }

    /// Bytes of every activation buffer this pass holds (shared buffers counted once).
    pub fn bytes(&self) -> u64 {
        let stores: u64 = match self.mode {
            ActivationMode::Checkpoint => {
                let inputs: u64 = self.steps[0]
                    .layers
                    .iter()
                    .filter_map(|l| l.x_in.as_ref().map(Tensor::bytes))
                    .sum();
                self.steps[0].bytes() + (self.steps.len() as u64 - 1) * inputs
            }
            _ => self.steps.iter().map(ActivationStore::bytes).sum(),
        };
        let recurrent: u64 = self
            .recurrent_in
            .iter()
            .flatten()
            .flatten()
            .map(|b| b.size())
            .sum();
        stores + recurrent
    }
}
