//! One sequence's state as a list of per-layer buffers that can be copied out and back:
//! KV caches (only the rows in use) today, recurrent and convolution state for hybrid
//! models, which are copied whole.

use crate::error::{EngineError, Result, human_bytes};
use crate::gpu::GpuContext;

/// A model buffer that holds part of the sequence's state.
#[derive(Clone, Debug)]
pub(crate) struct StateBuffer {
    pub buffer: wgpu::Buffer,
    /// Bytes per position for a cache indexed by position (a snapshot copies the rows in
    /// use); `None` for a fixed-size state, copied whole.
    pub row_bytes: Option<u64>,
    /// Bytes of one sequence slot: the buffer holds the slots one after another.
    pub slot_bytes: u64,
}

impl StateBuffer {
    /// Bytes of a sequence of `n_tokens` tokens, from the start of its slot.
    pub(crate) fn bytes_for(&self, n_tokens: usize) -> u64 {
        match self.row_bytes {
            Some(row) => row * n_tokens as u64,
            None => self.slot_bytes,
        }
    }

    pub(crate) fn slot_offset(&self, slot: u32) -> u64 {
        slot as u64 * self.slot_bytes
    }
}

/// A snapshot of one sequence taken by `Model::snapshot`: its tokens and a GPU-side copy of
/// every layer's state. `Model::restore` puts it back, so a conversation can branch and
/// return without evaluating its prefix again.
pub struct SequenceState {
    tokens: Vec<u32>,
    /// Per layer, per state buffer: its `row_bytes` and the copy.
    layers: Vec<Vec<(Option<u64>, Option<wgpu::Buffer>)>>,
}

impl std::fmt::Debug for SequenceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SequenceState({} tokens, {} layers, {})",
            self.tokens.len(),
            self.layers.len(),
            human_bytes(self.gpu_bytes())
        )
    }
}

impl SequenceState {
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// GPU memory the copies occupy.
    pub fn gpu_bytes(&self) -> u64 {
        self.layers
            .iter()
            .flatten()
            .filter_map(|(_, b)| b.as_ref().map(|b| b.size()))
            .sum()
    }

    /// Copies the state of `tokens`, the sequence in `slot`, out of `layers`.
    pub(crate) async fn capture(
        ctx: &GpuContext,
        layers: &[Vec<StateBuffer>],
        tokens: &[u32],
        slot: u32,
    ) -> Result<Self> {
        let oom = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        let layers = layers
            .iter()
            .map(|bufs| {
                bufs.iter()
                    .map(|s| {
                        let size = s.bytes_for(tokens.len());
                        // Nothing to copy yet (an empty sequence's cache rows).
                        let copy = (size > 0).then(|| {
                            let copy = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                                label: Some("sequence state"),
                                size,
                                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                                mapped_at_creation: false,
                            });
                            encoder.copy_buffer_to_buffer(
                                &s.buffer,
                                s.slot_offset(slot),
                                &copy,
                                0,
                                size,
                            );
                            copy
                        });
                        (s.row_bytes, copy)
                    })
                    .collect()
            })
            .collect();
        ctx.queue.submit([encoder.finish()]);
        // A snapshot is only as large as the rows in use, but it can still exhaust memory.
        if let Some(e) = oom.pop().await {
            return Err(EngineError::OutOfMemory(format!(
                "copying the sequence state: {e}"
            )));
        }
        ctx.check()?;
        Ok(Self {
            tokens: tokens.to_vec(),
            layers,
        })
    }

    /// Copies this state back into `layers` as the sequence in `slot`, after checking it was
    /// taken from a model with the same state layout and fits its buffers.
    pub(crate) fn write_into(
        &self,
        ctx: &GpuContext,
        layers: &[Vec<StateBuffer>],
        slot: u32,
    ) -> Result<()> {
        let mismatch = |detail: String| Err(EngineError::State(detail));
        if layers.len() != self.layers.len() {
            return mismatch(format!(
                "{} layers in the snapshot, {} in the model",
                self.layers.len(),
                layers.len()
            ));
        }
        for (i, (model, saved)) in layers.iter().zip(&self.layers).enumerate() {
            if model.len() != saved.len() {
                return mismatch(format!("layer {i} holds a different kind of state"));
            }
            for (m, (row_bytes, copy)) in model.iter().zip(saved) {
                let size = copy.as_ref().map_or(0, |c| c.size());
                if m.row_bytes != *row_bytes
                    || size > m.slot_bytes
                    || (m.row_bytes.is_none() && size != m.slot_bytes)
                {
                    return mismatch(format!(
                        "layer {i}: a state buffer of {} does not fit the model's {}",
                        human_bytes(size),
                        human_bytes(m.slot_bytes)
                    ));
                }
            }
        }
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        for (model, saved) in layers.iter().zip(&self.layers) {
            for (m, (_, copy)) in model.iter().zip(saved) {
                if let Some(c) = copy {
                    encoder.copy_buffer_to_buffer(c, 0, &m.buffer, m.slot_offset(slot), c.size());
                }
            }
        }
        ctx.queue.submit([encoder.finish()]);
        ctx.check()
    }
}
