//! Decoding without a host round trip per token. Each step reads its input token from the
//! previous step's sampled token on the GPU, so up to `depth` steps are queued before the
//! first of them is read back: the GPU never waits for the host to read a token, sample,
//! and encode the next step. Penalties see tokens sampled on the GPU through the sampler's
//! history ring.
//!
//! A stop (an end token, or the caller declining a token) is seen up to `depth - 1` steps
//! late; those steps are thrown away. Attention caches need nothing for that (rows past the
//! sequence's length are never read), while recurrent state is copied aside before every
//! step into a ring of `depth - 1` slots and put back from the slot of the first step thrown
//! away.

use std::collections::VecDeque;

use crate::error::{EngineError, Result};
use crate::gpu::GpuContext;
use crate::model::{Logits, Model};
use crate::ops::{self, Step};
use crate::{Rng, SamplingParams};

/// Steps in flight by default: on a GPU, two overlap the host's work on one step with the
/// GPU's on the next (more only add wasted steps after a stop); on a CPU adapter the
/// "GPU" is the host's own cores, which the next step's encoding would take from the
/// kernels (lavapipe decodes SmolLM2 about 15 % slower at depth 2 than at depth 1).
pub fn default_decode_depth(ctx: &GpuContext) -> u32 {
    if ctx.adapter.device_type == "Cpu" {
        1
    } else {
        2
    }
}

/// Most steps [`Model::set_decode_depth`] accepts.
pub const MAX_DECODE_DEPTH: u32 = 16;

/// Where a decode run's time went, on the host's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecodeStats {
    /// Steps decoded.
    pub steps: usize,
    /// Seconds spent writing uniforms, recording and submitting the steps.
    pub recording: f64,
    /// Seconds spent waiting for tokens to come back.
    pub waiting: f64,
}

/// One queued step: the staging buffer its token is copied into and the submission that
/// fills it.
struct InFlight {
    staging: usize,
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    submission: wgpu::SubmissionIndex,
    mapped: flume::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
}

impl Model {
    /// Steps decoded ahead of the host (1 = read each token before the next step).
    pub fn decode_depth(&self) -> u32 {
        self.decode_depth
    }

    /// Host time of the last generation's decode steps (after its first token).
    pub fn decode_stats(&self) -> DecodeStats {
        self.decode_stats
    }

    /// Sets how many decode steps may be queued before the first is read back (1..=16).
    pub fn set_decode_depth(&mut self, depth: u32) -> Result<()> {
        if !(1..=MAX_DECODE_DEPTH).contains(&depth) {
            return Err(EngineError::Sampling(format!(
                "decode depth {depth} must be in 1..={MAX_DECODE_DEPTH}"
            )));
        }
        self.decode_depth = depth;
        Ok(())
    }

    /// Samples up to `budget` tokens of sequence 0 after `first` (already sampled, in
    /// `history`, not yet evaluated), pushing each to `out` and `history` and reporting it
    /// to `on_token` in order. Ends after a token for which `is_stop` holds or `on_token`
    /// returns false; the sequence then holds exactly the tokens before that one. After an
    /// error the steps may have run past what the host saw: the caller forgets the sequence.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn decode_run(
        &mut self,
        first: u32,
        sp: &SamplingParams,
        rng: &mut Rng,
        history: &mut Vec<u32>,
        budget: usize,
        is_stop: &dyn Fn(u32) -> bool,
        on_token: &mut dyn FnMut(u32) -> bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        self.decode_stats = DecodeStats::default();
        let room = (self.context as usize).saturating_sub(self.seqs[0].len());
        let total = budget.min(room);
        let depth = (self.decode_depth as usize).clamp(1, total.max(1));
        let rewind = !self.rewindable && depth > 1;
        if rewind {
            self.ensure_rewind_ring(depth - 1).await?;
        }
        let staging: Vec<wgpu::Buffer> = (0..depth)
            .map(|_| {
                self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("decoded token"),
                    size: 4,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
            .collect();
        let sampler = &self.samplers[0];
        sampler.write_history(&self.ctx, sp, history);
        self.ctx
            .queue
            .write_buffer(&self.io.ids, 0, bytemuck::bytes_of(&first));
        // Step k feeds the token sampled by step k - 1 (the first feeds `first`) at position
        // pos0 + k, and samples history entry hist0 + k.
        let pos0 = self.seqs[0].len();
        let hist0 = history.len();
        let mut fed = first;
        let mut queue: VecDeque<InFlight> = VecDeque::new();
        let (mut submitted, mut read) = (0usize, 0usize);
        let mut stats = DecodeStats::default();
        while read < total {
            let clock = Clock::start();
            while submitted < total && submitted - read < depth {
                let u = if sp.is_greedy() { 0.0 } else { rng.next_f32() };
                queue.push_back(self.submit_decode_step(
                    submitted,
                    pos0 + submitted,
                    hist0 + submitted,
                    sp,
                    u,
                    &staging,
                    rewind.then_some(depth - 1),
                ));
                submitted += 1;
            }
            stats.recording += clock.seconds();
            let clock = Clock::start();
            let step = queue.pop_front().expect("a step is in flight");
            let id = self.read_decoded(&staging[step.staging], step).await?;
            stats.waiting += clock.seconds();
            read += 1;
            stats.steps = read;
            self.decode_stats = stats;
            self.seqs[0].push(fed);
            fed = id;
            out.push(id);
            history.push(id);
            if !on_token(id) || is_stop(id) {
                break;
            }
        }
        if submitted > read && rewind {
            // Steps read..submitted ran past the stop (their staging buffers are dropped
            // with their maps pending): the recurrent state goes back to before the first.
            self.restore_rewind_slot(read % (depth - 1));
        }
        Ok(())
    }

    /// Queues decode step `k` of a run: its input comes from the previous step's sampled
    /// token (step 0's was written by the host), its token goes to a staging buffer that is
    /// then mapped. With `rewind_slots`, the recurrent state is first copied aside.
    #[allow(clippy::too_many_arguments)]
    fn submit_decode_step(
        &self,
        k: usize,
        pos: usize,
        history_len: usize,
        sp: &SamplingParams,
        u: f32,
        staging: &[wgpu::Buffer],
        rewind_slots: Option<usize>,
    ) -> InFlight {
        let sampler = &self.samplers[0];
        ops::write_step(
            &self.ctx,
            &self.io.step,
            Step::for_sequence(1, pos as u32, 0, self.context),
        );
        sampler.write_draw(&self.ctx, sp, history_len, 0, u);
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        if let Some(slots) = rewind_slots {
            self.save_rewind_slot(&mut encoder, k % slots);
        }
        if k > 0 {
            encoder.copy_buffer_to_buffer(&sampler.result, 0, &self.io.ids, 0, 4);
        }
        self.encode_graph(&mut encoder, &self.decode_graph, 1, Logits::Last);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            sampler.dispatch().record(&mut pass, 1);
        }
        sampler.record_append(&mut encoder, history_len);
        let slot = k % staging.len();
        encoder.copy_buffer_to_buffer(&sampler.result, 0, &staging[slot], 0, 4);
        let submission = self.ctx.queue.submit([encoder.finish()]);
        let (tx, rx) = flume::bounded(1);
        staging[slot].map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        InFlight {
            staging: slot,
            submission,
            mapped: rx,
        }
    }

    /// Waits for one queued step (only that submission, not the ones after it) and returns
    /// its token.
    async fn read_decoded(&self, staging: &wgpu::Buffer, step: InFlight) -> Result<u32> {
        #[cfg(not(target_arch = "wasm32"))]
        self.ctx.poll_until(step.submission)?;
        let mapped = step
            .mapped
            .recv_async()
            .await
            .map_err(|e| EngineError::Readback(e.to_string()))?;
        self.ctx.check()?;
        mapped.map_err(|e| EngineError::Readback(e.to_string()))?;
        let id = {
            let view = staging
                .get_mapped_range(..)
                .map_err(|e| EngineError::Readback(e.to_string()))?;
            u32::from_le_bytes(view[..4].try_into().expect("4 bytes"))
        };
        staging.unmap();
        if id >= self.config.vocab() {
            return Err(EngineError::Sampling(format!("the sampler returned {id}")));
        }
        Ok(id)
    }

    /// Sequence 0's fixed-size state buffers (recurrent and convolution state): (buffer,
    /// offset, bytes).
    fn fixed_state(&self) -> impl Iterator<Item = (&wgpu::Buffer, u64, u64)> {
        self.state
            .iter()
            .flatten()
            .filter(|s| s.row_bytes.is_none())
            .map(|s| (&s.buffer, s.slot_offset(0), s.slot_bytes))
    }

    async fn ensure_rewind_ring(&mut self, slots: usize) -> Result<()> {
        let bytes: u64 = self.fixed_state().map(|(_, _, n)| n).sum();
        while self.rewind_ring.len() < slots {
            let oom = self
                .ctx
                .device
                .push_error_scope(wgpu::ErrorFilter::OutOfMemory);
            let buffer = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("decode rewind"),
                size: bytes.max(4),
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            if let Some(e) = oom.pop().await {
                return Err(EngineError::OutOfMemory(format!(
                    "decode rewind state ({}): {e}",
                    crate::error::human_bytes(bytes)
                )));
            }
            self.rewind_ring.push(buffer);
        }
        Ok(())
    }

    fn save_rewind_slot(&self, encoder: &mut wgpu::CommandEncoder, slot: usize) {
        let ring = &self.rewind_ring[slot];
        let mut at = 0;
        for (buffer, offset, bytes) in self.fixed_state() {
            encoder.copy_buffer_to_buffer(buffer, offset, ring, at, bytes);
            at += bytes;
        }
    }

    fn restore_rewind_slot(&self, slot: usize) {
        let ring = &self.rewind_ring[slot];
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        let mut at = 0;
        for (buffer, offset, bytes) in self.fixed_state() {
            encoder.copy_buffer_to_buffer(ring, at, buffer, offset, bytes);
            at += bytes;
        }
        self.ctx.queue.submit([encoder.finish()]);
    }
}

/// A stopwatch where one exists: natively `Instant`; in the browser the stats stay zero
/// (wasm32 has no `Instant`, and the page times generation itself).
struct Clock(#[cfg(not(target_arch = "wasm32"))] std::time::Instant);

impl Clock {
    fn start() -> Self {
        Clock(
            #[cfg(not(target_arch = "wasm32"))]
            std::time::Instant::now(),
        )
    }

    fn seconds(&self) -> f64 {
        #[cfg(not(target_arch = "wasm32"))]
        return self.0.elapsed().as_secs_f64();
        #[cfg(target_arch = "wasm32")]
        0.0
    }
}
