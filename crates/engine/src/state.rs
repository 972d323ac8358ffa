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

/// First bytes of a saved sequence state.
const MAGIC: &[u8; 8] = b"LPSTATE\x01";

impl SequenceState {
    /// The state as bytes (read back from the GPU), tagged with `key`: what a later
    /// [`SequenceState::from_bytes`] must be given to accept it (the model's identity).
    pub async fn to_bytes(&self, ctx: &GpuContext, key: &str) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.gpu_bytes() as usize + 64);
        out.extend_from_slice(MAGIC);
        put_u32(&mut out, key.len() as u32);
        out.extend_from_slice(key.as_bytes());
        put_u32(&mut out, self.tokens.len() as u32);
        for &t in &self.tokens {
            put_u32(&mut out, t);
        }
        put_u32(&mut out, self.layers.len() as u32);
        for layer in &self.layers {
            put_u32(&mut out, layer.len() as u32);
            for (row_bytes, copy) in layer {
                out.extend_from_slice(&row_bytes.map_or(u64::MAX, |r| r).to_le_bytes());
                let size = copy.as_ref().map_or(0, |c| c.size());
                out.extend_from_slice(&size.to_le_bytes());
                if let Some(c) = copy {
                    out.extend(ctx.read_back(c, 0, size).await?);
                }
            }
        }
        Ok(out)
    }

    /// A state saved by [`SequenceState::to_bytes`] with the same `key`, uploaded to the GPU.
    /// Anything else (another key, a truncated or corrupt file) is an `EngineError::State`;
    /// whether it fits a model is checked by `Model::restore`.
    pub fn from_bytes(ctx: &GpuContext, key: &str, bytes: &[u8]) -> Result<Self> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(MAGIC.len())? != MAGIC {
            return Err(EngineError::State(
                "not a saved lilypad sequence state".into(),
            ));
        }
        let key_len = r.u32()? as usize;
        if r.take(key_len)? != key.as_bytes() {
            return Err(EngineError::State(
                "the state was saved by another model or adapter".into(),
            ));
        }
        let n_tokens = r.u32()? as usize;
        let tokens: Vec<u32> = r
            .take(n_tokens.checked_mul(4).ok_or_else(truncated)?)?
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        // Counts are checked against the bytes left (a layer takes at least 4, a buffer 16),
        // so a corrupt count cannot make the loops below allocate without bound.
        let n_layers = r.count(4)?;
        let mut layers = Vec::new();
        for _ in 0..n_layers {
            let n_bufs = r.count(16)?;
            let mut bufs = Vec::new();
            for _ in 0..n_bufs {
                let row_bytes = match r.u64()? {
                    u64::MAX => None,
                    row => Some(row),
                };
                let size = r.u64()?;
                let data = r.take(usize::try_from(size).map_err(|_| truncated())?)?;
                if row_bytes.is_some_and(|row| row == 0 || size != row * n_tokens as u64) {
                    return Err(EngineError::State(format!(
                        "a cache of {size} bytes does not hold {n_tokens} rows"
                    )));
                }
                if size % 4 != 0 {
                    return Err(EngineError::State(format!(
                        "a state buffer of {size} bytes is not whole floats"
                    )));
                }
                let copy = (size > 0).then(|| {
                    use wgpu::util::DeviceExt;
                    ctx.device
                        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                            label: Some("sequence state"),
                            contents: data,
                            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                        })
                });
                bufs.push((row_bytes, copy));
            }
            layers.push(bufs);
        }
        if r.at != bytes.len() {
            return Err(EngineError::State(format!(
                "{} bytes after the saved state",
                bytes.len() - r.at
            )));
        }
        ctx.check()?;
        Ok(Self { tokens, layers })
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn truncated() -> EngineError {
    EngineError::State("the saved state is truncated".into())
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).ok_or_else(truncated)?;
        let piece = self.bytes.get(self.at..end).ok_or_else(truncated)?;
        self.at = end;
        Ok(piece)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    /// A count of items of at least `min_bytes` each, which the bytes left must hold.
    fn count(&mut self, min_bytes: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes) > self.bytes.len() - self.at {
            return Err(truncated());
        }
        Ok(n)
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}
