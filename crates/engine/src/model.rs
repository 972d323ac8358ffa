//! The runtime every architecture shares: a loaded model with one sequence's state, steps
//! of up to `max_batch` tokens recorded into one compute pass, logits or GPU sampling, prefix
//! reuse and sequence snapshots. The architectures themselves live in `crate::models`.

use std::collections::VecDeque;
use std::sync::Arc;

use lilypad_gguf::peft::{LoraAdapter, LoraTensor};
use lilypad_gguf::{ByteSource, GgufFile};

use crate::activations::{ActivationMode, ActivationStore};
use crate::error::{EngineError, Result, human_bytes};
use crate::gpu::{GpuContext, Submitted};
use crate::graph::GraphIo;
use crate::kernels::Dispatch;
use crate::models::blocks::{Loader, check_tensors};
use crate::models::record_forward;
use crate::models::{Forward, ModelConfig};
use crate::ops::{self, Step, matvec::PREFILL_TILE, sample::Sampler};
use crate::profile::KernelTimes;
use crate::state::{SequenceState, StateBuffer};
use crate::tensor::{DType, Tensor};
use crate::{Rng, SamplingParams};

/// What a model will occupy on the GPU.
#[derive(Clone, Debug, Default)]
pub struct MemoryPlan {
    pub weights: u64,
    pub kv_cache: u64,
    /// Fixed-size state of recurrent layers (Qwen3.5's DeltaNet): a slot per sequence plus
    /// one for a checkpoint taken part-way through a step (speculative decoding).
    pub recurrent_state: u64,
    /// One slot of it.
    pub recurrent_slot: u64,
    pub activations: u64,
    /// Largest single buffer (must fit one storage binding unless split).
    pub largest_unsplittable: u64,
    /// One layer's K (or V) cache for one sequence, and one recurrent layer's largest state
    /// buffer for one sequence: per-sequence buffers hold every slot.
    pub kv_layer: u64,
    pub recurrent_buffer: u64,
}

impl MemoryPlan {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.recurrent_state + self.activations
    }

    /// The plan with `n` sequence slots: every slot has its own KV rows and recurrent state
    /// (recurrent layers keep one more slot, the checkpoint).
    pub fn with_sequences(mut self, n: u32) -> Self {
        let n = n.max(1) as u64;
        self.kv_cache *= n;
        self.recurrent_state = self.recurrent_slot * (n + 1);
        self.largest_unsplittable = self
            .largest_unsplittable
            .max(self.kv_layer * n)
            .max(self.recurrent_buffer * (n + 1));
        self
    }
}

impl MemoryPlan {
    /// Refuses, before anything is allocated, a plan that cannot run on `ctx`'s adapter: a
    /// buffer that must be one binding (a layer's KV cache, the logits, recurrent state) larger
    /// than the adapter's binding or buffer limit, or a whole larger than the adapter's device
    /// memory where it reports it. Weights are split across bindings, so never refused alone.
    pub fn check_fits(&self, ctx: &GpuContext, context: u32) -> Result<()> {
        let limits = [
            (
                ctx.limits.max_storage_buffer_binding_size,
                "largest storage binding",
            ),
            (ctx.limits.max_buffer_size, "largest buffer"),
        ];
        for (allowed, what) in limits {
            if self.largest_unsplittable > allowed {
                return Err(EngineError::TooLarge {
                    adapter: ctx.adapter.name.clone(),
                    what,
                    needed: format!(
                        "{} in one buffer (a layer's KV cache or the logits at context {context})",
                        human_bytes(self.largest_unsplittable)
                    ),
                    allowed: human_bytes(allowed),
                });
            }
        }
        self.check_memory(&ctx.adapter, context)
    }

    /// Refuses a plan larger than the memory it must live in, where that is known: a GPU's
    /// device-local heap, or the machine's memory for a CPU adapter (whose reported heap is
    /// nominal: lavapipe says 2 GiB and runs more). Past it, a CPU adapter's allocations take
    /// the machine down with them (a browser's GPU process is killed and the device lost).
    pub fn check_memory(&self, adapter: &crate::gpu::AdapterSummary, context: u32) -> Result<()> {
        match adapter.memory_budget() {
            Some((memory, what)) if self.total() > memory => Err(EngineError::TooLarge {
                adapter: adapter.name.clone(),
                what,
                needed: format!("{self} at context {context}"),
                allowed: human_bytes(memory),
            }),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (weights {}, KV cache {}",
            human_bytes(self.total()),
            human_bytes(self.weights),
            human_bytes(self.kv_cache),
        )?;
        if self.recurrent_state > 0 {
            write!(f, ", recurrent state {}", human_bytes(self.recurrent_state))?;
        }
        write!(f, ", activations {})", human_bytes(self.activations))
    }
}

#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// Positions the KV cache holds (default: the training context, at most 4096).
    pub context: Option<u32>,
    /// Tokens per prefill step.
    pub max_batch: u32,
    /// Cap on one weight buffer (default: the adapter's binding limit).
    pub max_chunk_bytes: Option<u64>,
    /// Upload Qwen3.5's multi-token-prediction layers (for speculative decoding; the forward
    /// pass does not read them). Without it they are only checked.
    pub mtp: bool,
    /// Sequence slots: independent sequences with their own KV-cache rows and recurrent
    /// state, decoded together by [`Model::sample_batch`] (at most `max_batch`).
    pub sequences: u32,
    /// The KV cache's element type: f16 (the default) halves its memory and the bandwidth
    /// attention reads it with, at a cost in accuracy measured against the reference
    /// fixtures (BENCHMARKS.md); f32 keeps every bit the step computed.
    pub kv_cache: DType,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            context: None,
            max_batch: 64,
            max_chunk_bytes: None,
            mtp: false,
            sequences: 1,
            kv_cache: DEFAULT_KV_CACHE,
        }
    }
}

/// The KV cache's element type unless asked otherwise: f16 keeps the logits within the
/// reference tolerance (tests/tests/kv_cache.rs) at half the memory.
pub const DEFAULT_KV_CACHE: DType = DType::F16;

/// Which logits a step produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    None,
    Last,
    All,
}

#[derive(Clone, Debug)]
pub struct LoadProgress {
    pub tensor: String,
    pub done_bytes: u64,
    pub total_bytes: u64,
}

/// Buffers the runtime feeds and reads around an architecture's graph.
pub(crate) struct Io {
    pub(crate) ids: wgpu::Buffer,
    /// The tokens sampled in a batched step, one u32 per sequence.
    sampled: wgpu::Buffer,
    /// Per token of a step, the token whose log-probability is wanted, and that value.
    targets: wgpu::Buffer,
    log_probs: wgpu::Buffer,
    x_last: wgpu::Buffer,
    pub(crate) logits: wgpu::Buffer,
    pub(crate) step: wgpu::Buffer,
    step_one: wgpu::Buffer,
}

/// A loaded model with one sequence's state (its KV cache and the tokens in it).
pub struct Model {
    pub(crate) ctx: Arc<GpuContext>,
    pub config: ModelConfig,
    pub context: u32,
    pub max_batch: u32,
    /// The KV cache's element type.
    pub kv_cache: DType,
    pub plan: MemoryPlan,
    pub(crate) io: Io,
    /// Per sequence slot, the tokens whose state is in the model's buffers, in order. Slot 0
    /// is the sequence of the single-sequence API (`eval`, `next_token`, `snapshot`, …).
    pub(crate) seqs: Vec<Vec<u32>>,
    /// Per layer, the buffers holding the sequence state.
    pub(crate) state: Vec<Vec<StateBuffer>>,
    /// Whether the state can go back to an earlier position: true when it is all caches
    /// indexed by position, false with fixed-size recurrent state.
    pub(crate) rewindable: bool,
    pub(crate) decode_graph: Vec<Dispatch>,
    prefill_graph: Vec<Dispatch>,
    /// One token each of several sequences (empty with one slot).
    pub(crate) batch_graph: Vec<Dispatch>,
    head_last: Vec<Dispatch>,
    pub(crate) head_all: Vec<Dispatch>,
    /// log softmax(logits[t])[targets[t]] for each token of a step.
    gather_log_probs: Dispatch,
    /// One per sequence slot (each samples its own logits row).
    pub(crate) samplers: Vec<Sampler>,
    pub(crate) arch: Box<dyn Forward>,
    /// The inference graphs' activations, shared by every layer.
    pub(crate) store: ActivationStore,
    /// [max_batch, rank] for the LoRA adapters' A·x, sized for the largest padded rank set.
    pub(crate) lora_scratch: Option<Tensor>,
    /// Where `fork` passes a state buffer's rows through (a buffer cannot be copied onto
    /// itself); grown on demand.
    fork_staging: Option<wgpu::Buffer>,
    /// The adapter's alpha and base model, as `set_lora` was given them (its factors live in
    /// the linears, where training changes them).
    lora_meta: Option<(f32, Option<String>)>,
    /// Decode steps queued before the first is read back (`crate::decode`).
    pub(crate) decode_depth: u32,
    /// Copies of sequence 0's recurrent state, one per decode step in flight past the one
    /// being read, so a stop seen late can go back (allocated on first use).
    pub(crate) rewind_ring: Vec<wgpu::Buffer>,
    pub(crate) decode_stats: crate::decode::DecodeStats,
    /// What a saved state is keyed by: the weights' fingerprint, then the adapter's.
    identity: String,
    lora_identity: Option<String>,
    /// Where the training passes add their kernels' times while profiled
    /// ([`Model::profile_kernels`]).
    pub(crate) kernel_times: Option<KernelTimes>,
    /// Speculative decoding's draft and its buffers ([`Model::set_draft`]).
    pub(crate) speculation: Option<crate::speculative::Speculation>,
    pub(crate) speculative_stats: crate::speculative::SpeculativeStats,
}

/// One sequence's token in a batched decode step ([`Model::sample_batch`]), and how to pick
/// the token after it.
#[derive(Clone, Debug)]
pub struct BatchToken<'a> {
    /// The sequence slot.
    pub seq: u32,
    pub token: u32,
    pub params: &'a SamplingParams,
    /// A uniform draw in [0, 1) from the sequence's own random stream (unused when greedy).
    pub u: f32,
    /// The sequence's tokens so far, for the repetition penalties.
    pub history: &'a [u32],
}

impl Model {
    /// Checks every tensor and the adapter's limits, then uploads the weights.
    pub async fn load(
        ctx: Arc<GpuContext>,
        file: &GgufFile,
        src: &dyn ByteSource,
        opts: &ModelOptions,
        progress: &mut dyn FnMut(LoadProgress),
    ) -> Result<Self> {
        let cfg = ModelConfig::from_gguf(file)?;
        let context = opts.context.unwrap_or(cfg.context_train().min(4096)).max(1);
        let max_batch = opts.max_batch.clamp(1, ops::MAX_STEP_TOKENS as u32);
        let sequences = opts.sequences.clamp(1, max_batch);

        // Validate everything before allocating anything on the GPU, including layers that
        // are not uploaded.
        check_tensors(file, &cfg.loaded_tensor_shapes(true))?;
        let total_bytes = check_tensors(file, &cfg.loaded_tensor_shapes(opts.mtp))?;
        let plan = cfg
            .memory_plan(file, context, max_batch, opts.kv_cache, opts.mtp)
            .with_sequences(sequences);
        plan.check_fits(&ctx, context)?;

        let oom_scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let loader = Loader::new(&ctx, file, src, opts.max_chunk_bytes, total_bytes, progress)
            .with_sequences(sequences)
            .with_kv_cache(opts.kv_cache);
        let arch = cfg.load(&loader, context, opts.mtp)?;
        let store = ActivationStore::new(
            &ctx,
            &cfg.activation_shape(),
            max_batch,
            ActivationMode::Shared,
        )?;
        let io = Io {
            ids: loader.f32s("token ids", max_batch as u64)?,
            sampled: loader.f32s("sampled tokens", max_batch as u64)?,
            targets: loader.f32s("target tokens", max_batch as u64)?,
            log_probs: loader.f32s("log probs", max_batch as u64)?,
            x_last: loader.f32s("last x", cfg.n_embd() as u64)?,
            logits: loader.f32s("logits", max_batch as u64 * cfg.vocab() as u64)?,
            step: ops::step_buffer(&ctx),
            step_one: ops::step_buffer(&ctx),
        };
        ops::write_step(&ctx, &io.step_one, Step::new(1, 0));
        let [decode_graph, prefill_graph, batch_graph] =
            record_graphs(&ctx, arch.as_ref(), &io, &store, None, sequences > 1)?;
        let head = arch.lm_head();
        let head_last = ops::matvec::matvec(
            &ctx,
            head,
            &io.x_last,
            &io.logits,
            cfg.vocab(),
            &io.step_one,
            1,
            false,
        )?;
        let head_all = ops::matvec::matvec(
            &ctx,
            head,
            &store.hidden.buffer,
            &io.logits,
            cfg.vocab(),
            &io.step,
            PREFILL_TILE,
            false,
        )?;
        let gather_log_probs = ops::softmax::gather_log_probs(
            &ctx,
            &io.logits,
            &io.targets,
            &io.log_probs,
            cfg.vocab(),
            max_batch,
        )?;
        let samplers = (0..sequences)
            .map(|_| Sampler::new(&ctx, &io.logits, cfg.vocab()))
            .collect::<Result<_>>()?;
        if let Some(e) = oom_scope.pop().await {
            return Err(EngineError::OutOfMemory(format!(
                "loading the model ({plan}): {e}"
            )));
        }
        ctx.check()?;
        let state = arch.state();
        let rewindable = state.iter().flatten().all(|s| s.row_bytes.is_some());
        Ok(Self {
            ctx: ctx.clone(),
            config: cfg,
            context,
            max_batch,
            kv_cache: opts.kv_cache,
            plan,
            io,
            seqs: vec![Vec::new(); sequences as usize],
            state,
            rewindable,
            decode_graph,
            prefill_graph,
            batch_graph,
            head_last,
            head_all,
            gather_log_probs,
            samplers,
            arch,
            store,
            lora_scratch: None,
            lora_meta: None,
            fork_staging: None,
            decode_depth: crate::decode::default_decode_depth(&ctx),
            rewind_ring: Vec::new(),
            decode_stats: Default::default(),
            identity: lilypad_gguf::fingerprint(file, src)?,
            lora_identity: None,
            kernel_times: None,
            speculation: None,
            speculative_stats: Default::default(),
        })
    }

    /// Sequence slots (`ModelOptions::sequences`).
    pub fn sequences(&self) -> u32 {
        self.seqs.len() as u32
    }

    /// Tokens cached for the sequence in slot `seq` (empty for a free or unknown slot).
    pub fn sequence_tokens(&self, seq: u32) -> &[u32] {
        self.seqs.get(seq as usize).map_or(&[], |s| s)
    }

    /// Forgets the sequence in slot `seq`: the slot is free for a new sequence.
    pub fn release(&mut self, seq: u32) {
        if let Some(s) = self.seqs.get_mut(seq as usize) {
            s.clear();
        }
    }

    /// Starts the sequence in slot `to` as a copy of the one in `from` (a GRPO group's
    /// shared prompt, best-of-k), without evaluating anything: each attention layer's K/V
    /// rows in use and each recurrent layer's fixed-size state are copied on the GPU.
    pub fn fork(&mut self, from: u32, to: u32) -> Result<()> {
        let n = self.seqs.len() as u32;
        if from >= n || to >= n || from == to {
            return Err(EngineError::Sequence(format!(
                "cannot fork sequence {from} into {to}: the model has {n} slots"
            )));
        }
        let len = self.seqs[from as usize].len();
        self.copy_slot(from, to, &|s| s.bytes_for(len));
        self.seqs[to as usize] = self.seqs[from as usize].clone();
        self.ctx.check()
    }

    /// Copies the first `bytes(buffer)` bytes of slot `from` of every state buffer into slot
    /// `to`, through a staging buffer (a buffer cannot be copied onto itself).
    pub(crate) fn copy_slot(&mut self, from: u32, to: u32, bytes: &dyn Fn(&StateBuffer) -> u64) {
        let largest = self.state.iter().flatten().map(bytes).max().unwrap_or(0);
        if largest == 0 {
            return;
        }
        if self
            .fork_staging
            .as_ref()
            .is_none_or(|b| b.size() < largest)
        {
            self.fork_staging = Some(self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("state slot staging"),
                size: largest,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let staging = self.fork_staging.as_ref().expect("made above");
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        for s in self.state.iter().flatten() {
            let n = bytes(s);
            if n > 0 {
                encoder.copy_buffer_to_buffer(&s.buffer, s.slot_offset(from), staging, 0, n);
                encoder.copy_buffer_to_buffer(staging, 0, &s.buffer, s.slot_offset(to), n);
            }
        }
        self.ctx.queue.submit([encoder.finish()]);
    }

    /// The recurrent layers' spare slot, after the sequences' (`Step::checkpoint_after`).
    pub(crate) fn checkpoint_slot(&self) -> u32 {
        self.seqs.len() as u32
    }

    /// Bytes [`Model::fork`] copies for a sequence of `n_tokens` tokens: K/V rows grow with
    /// the sequence, recurrent state does not.
    pub fn fork_bytes(&self, n_tokens: usize) -> u64 {
        self.state
            .iter()
            .flatten()
            .map(|s| s.bytes_for(n_tokens))
            .sum()
    }

    /// Checks a batched step (one token each of distinct sequences), writes its uniforms
    /// and ids, clears the recurrent state of sequences that start now, and returns the graph.
    fn begin_batch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        tokens: &[(u32, u32)],
    ) -> Result<&[Dispatch]> {
        if tokens.is_empty() || tokens.len() > self.max_batch as usize {
            return Err(EngineError::Sequence(format!(
                "a batched step takes 1..={} tokens, not {}",
                self.max_batch,
                tokens.len()
            )));
        }
        let mut seen = vec![false; self.seqs.len()];
        for &(seq, token) in tokens {
            self.check_sequence_tokens(seq, &[token])?;
            if std::mem::replace(&mut seen[seq as usize], true) {
                return Err(EngineError::Sequence(format!(
                    "sequence {seq} appears twice in one batched step"
                )));
            }
        }
        let slots: Vec<(u32, u32)> = tokens
            .iter()
            .map(|&(seq, _)| (seq, self.seqs[seq as usize].len() as u32))
            .collect();
        ops::write_step(&self.ctx, &self.io.step, Step::batch(&slots, self.context));
        let ids: Vec<u32> = tokens.iter().map(|t| t.1).collect();
        self.ctx
            .queue
            .write_buffer(&self.io.ids, 0, bytemuck::cast_slice(&ids));
        for &(seq, pos) in &slots {
            if pos == 0 {
                self.clear_recurrent_state(encoder, seq);
            }
        }
        Ok(self.batch_step_graph(tokens.len()))
    }

    /// The graph a batched step of `rows` tokens runs: decode's for one, else the batch's.
    fn batch_step_graph(&self, rows: usize) -> &[Dispatch] {
        if rows == 1 {
            &self.decode_graph
        } else {
            &self.batch_graph
        }
    }

    /// Evaluates one token each of several sequences (`(seq, token)`, every seq distinct) in
    /// one step, and returns their logits rows in order: what each would give alone.
    pub async fn eval_batch(&mut self, tokens: &[(u32, u32)]) -> Result<Vec<f32>> {
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        let graph = self.begin_batch(&mut encoder, tokens)?;
        self.encode_graph(
            &mut encoder,
            graph,
            tokens.len() as u32,
            batch_head(tokens.len()),
        );
        self.ctx.queue.submit([encoder.finish()]);
        for &(seq, token) in tokens {
            self.seqs[seq as usize].push(token);
        }
        let vocab = self.config.vocab() as u64;
        self.ctx
            .read_f32(&self.io.logits, 0, tokens.len() as u64 * vocab)
            .await
    }

    /// One decode step of several sequences: evaluates each item's token in one step and
    /// samples each sequence's next token on the GPU with its own parameters and draw. Only
    /// the sampled tokens come back.
    pub async fn sample_batch(&mut self, items: &[BatchToken<'_>]) -> Result<Vec<u32>> {
        for it in items {
            it.params.validate()?;
        }
        let tokens: Vec<(u32, u32)> = items.iter().map(|it| (it.seq, it.token)).collect();
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        let graph = self.begin_batch(&mut encoder, &tokens)?;
        let profiled = cfg!(not(target_arch = "wasm32")) && self.kernel_times.is_some();
        if !profiled {
            self.encode_graph(
                &mut encoder,
                graph,
                tokens.len() as u32,
                batch_head(tokens.len()),
            );
        }
        #[cfg(not(target_arch = "wasm32"))]
        if profiled {
            // The step and its head run timed (and waited for), the samplers after.
            let mut times = self.kernel_times.take().unwrap_or_default();
            let n = tokens.len();
            let graph = self.batch_step_graph(n);
            let result = self
                .time_graph(encoder, graph, n as u32, batch_head(n), &mut times)
                .await;
            self.kernel_times = Some(times);
            result?;
            encoder = self.ctx.device.create_command_encoder(&Default::default());
        }
        for (row, it) in items.iter().enumerate() {
            // Sampler i reads logits row i; slots are at most max_batch, so one per row.
            let sampler = &self.samplers[row];
            sampler.prepare(&self.ctx, it.params, it.history, row as u32, it.u)?;
        }
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for sampler in &self.samplers[..items.len()] {
                sampler.dispatch().record(&mut pass, 1);
            }
        }
        for (row, sampler) in self.samplers[..items.len()].iter().enumerate() {
            encoder.copy_buffer_to_buffer(&sampler.result, 0, &self.io.sampled, row as u64 * 4, 4);
        }
        self.ctx.queue.submit([encoder.finish()]);
        for &(seq, token) in &tokens {
            self.seqs[seq as usize].push(token);
        }
        let ids = self
            .ctx
            .read_u32(&self.io.sampled, 0, items.len() as u64)
            .await?;
        if let Some(&id) = ids.iter().find(|&&id| id >= self.config.vocab()) {
            return Err(EngineError::Sampling(format!("the sampler returned {id}")));
        }
        Ok(ids)
    }

    /// What [`Model::encode_graph`] records, run now with each kernel timed into `times`: the
    /// graph over `n` rows, then the head over every row or over the last, as `want` says.
    #[cfg(not(target_arch = "wasm32"))]
    async fn time_graph(
        &self,
        encoder: wgpu::CommandEncoder,
        graph: &[Dispatch],
        n: u32,
        want: Logits,
        times: &mut KernelTimes,
    ) -> Result<()> {
        let mut steps: Vec<(&Dispatch, u32)> = graph.iter().map(|d| (d, n)).collect();
        if want == Logits::All {
            steps.extend(self.head_all.iter().map(|d| (d, n)));
        }
        crate::profile::run_timed(&self.ctx, encoder, &steps, times).await?;
        if want != Logits::Last {
            return Ok(());
        }
        let row = self.config.n_embd() as u64 * 4;
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(
            &self.store.hidden.buffer,
            (n as u64 - 1) * row,
            &self.io.x_last,
            0,
            row,
        );
        let head: Vec<(&Dispatch, u32)> = self.head_last.iter().map(|d| (d, 1)).collect();
        crate::profile::run_timed(&self.ctx, encoder, &head, times).await
    }

    /// Every linear a LoRA adapter can target: (GGUF weight name, outputs, inputs), in the
    /// forward pass's order.
    pub fn lora_targets(&mut self) -> Vec<(String, usize, usize)> {
        self.arch
            .linears_mut()
            .iter()
            .map(|l| {
                (
                    l.name().to_string(),
                    l.weight.rows as usize,
                    l.weight.cols as usize,
                )
            })
            .collect()
    }

    /// Puts a LoRA adapter on the model (`None` removes it): every linear it names adds
    /// scale · B·(A·x) to its output from the next step on, every other linear has none.
    /// An adapter whose padded ranks match the current one's is written into the existing
    /// buffers (how a trainer updates it between steps); otherwise buffers are made and the
    /// graphs recorded again. The cached sequence is forgotten: it was computed with other
    /// weights. Checked whole before anything changes.
    pub fn set_lora(&mut self, adapter: Option<&LoraAdapter>) -> Result<()> {
        let tensors = adapter.map_or(&[][..], |a| &a.tensors[..]);
        let linears = self.arch.linears_mut();
        for t in tensors {
            let Some(linear) = linears.iter().find(|l| l.name() == t.target) else {
                return Err(EngineError::Config(format!(
                    "the LoRA adapter targets {}, which is not a linear of this model's forward pass",
                    t.target
                )));
            };
            let (rows, cols) = (linear.weight.rows as usize, linear.weight.cols as usize);
            if (t.n_out, t.n_in) != (rows, cols) {
                return Err(EngineError::Config(format!(
                    "the LoRA adapter's {} is [{} outputs, {} inputs], the model's weight [{rows}, {cols}]",
                    t.target, t.n_out, t.n_in
                )));
            }
        }
        drop(linears);
        self.seqs.iter_mut().for_each(Vec::clear);
        let applied = self.apply_lora(tensors, adapter.map_or(1.0, |a| a.scale));
        self.lora_meta = adapter.map(|a| (a.alpha, a.base_model.clone()));
        self.lora_identity = adapter.map(lora_fingerprint);
        if applied.is_err() {
            // Never leave some linears adapted and others not: back to the base model.
            let _ = self.apply_lora(&[], 1.0);
            self.lora_meta = None;
            self.lora_identity = None;
        }
        applied
    }

    /// The adapter on the model as it is now, read back from the GPU (after training steps it
    /// differs from what `set_lora` was given): the same targets, ranks, alpha and scale, B
    /// unscaled again. `None` without an adapter.
    pub async fn lora_adapter(&mut self) -> Result<Option<LoraAdapter>> {
        let Some((alpha, base_model)) = self.lora_meta.clone() else {
            return Ok(None);
        };
        let ctx = self.ctx.clone();
        let mut tensors = Vec::new();
        let mut scale = 1.0;
        for linear in self.arch.linears_mut() {
            let Some(lora) = &linear.lora else { continue };
            let (n_out, n_in) = (linear.weight.rows as usize, linear.weight.cols as usize);
            let (rank, padded) = (lora.adapter_rank as usize, lora.rank as usize);
            scale = lora.scale;
            // A's first `rank` rows; B's first `rank` columns of each padded row.
            let a = ctx
                .read_f32(&lora.a.chunks[0].q, 0, (rank * n_in) as u64)
                .await?;
            let b_padded = ctx
                .read_f32(&lora.b.chunks[0].q, 0, (n_out * padded) as u64)
                .await?;
            let b = b_padded
                .chunks_exact(padded)
                .flat_map(|row| row[..rank].iter().map(|v| v / lora.scale))
                .collect();
            tensors.push(LoraTensor {
                target: linear.name().to_string(),
                rank,
                n_in,
                n_out,
                a,
                b,
            });
        }
        tensors.sort_by(|x, y| x.target.cmp(&y.target));
        Ok(Some(LoraAdapter {
            rank: tensors.first().map_or(0, |t| t.rank),
            alpha,
            scale,
            base_model,
            tensors,
        }))
    }

    fn apply_lora(&mut self, tensors: &[LoraTensor], scale: f32) -> Result<()> {
        let ctx = self.ctx.clone();
        let mut rerecord = false;
        let mut max_rank = 0;
        for linear in self.arch.linears_mut() {
            match tensors.iter().find(|t| t.target == linear.name()) {
                Some(t) => rerecord |= linear.set_lora(&ctx, t, scale)?,
                None => rerecord |= linear.clear_lora(),
            }
            max_rank = max_rank.max(linear.lora_rank().unwrap_or(0));
        }
        let scratch_rank = self.lora_scratch.as_ref().map_or(0, |t| t.cols());
        if max_rank > scratch_rank {
            self.lora_scratch = Some(Tensor::zeros(
                &ctx,
                "lora scratch",
                [self.max_batch, max_rank],
            )?);
            rerecord = true;
        } else if max_rank == 0 && self.lora_scratch.take().is_some() {
            rerecord = true;
        }
        if rerecord {
            self.record_graphs()?;
        }
        ctx.check()
    }

    /// Records the step graphs again (new LoRA buffers; the batch graph when speculative
    /// decoding first needs it).
    pub(crate) fn record_graphs(&mut self) -> Result<()> {
        let multi = self.seqs.len() > 1 || self.speculation.is_some();
        [self.decode_graph, self.prefill_graph, self.batch_graph] = record_graphs(
            &self.ctx,
            self.arch.as_ref(),
            &self.io,
            &self.store,
            self.lora_scratch.as_ref(),
            multi,
        )?;
        Ok(())
    }

    pub fn gpu(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Tokens whose state is in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.seqs[0]
    }

    /// Forgets everything after the first `n` tokens (their cache rows get overwritten).
    /// Recurrent state cannot go back, so a model with it forgets the whole sequence
    /// instead unless `n` keeps every token (use [`Model::snapshot`] to return to a point).
    pub fn truncate(&mut self, n: usize) {
        if n < self.seqs[0].len() && !self.rewindable {
            self.seqs[0].clear();
        }
        self.seqs[0].truncate(n);
    }

    /// Whether [`Model::truncate`] can keep a prefix (false for recurrent models).
    pub fn can_rewind(&self) -> bool {
        self.rewindable
    }

    pub fn reset(&mut self) {
        self.seqs[0].clear();
    }

    /// Copies the sequence state (tokens and, per layer, the cache rows in use) on the GPU,
    /// so that [`Model::restore`] can return to this point later.
    pub async fn snapshot(&self) -> Result<SequenceState> {
        SequenceState::capture(&self.ctx, &self.state, &self.seqs[0], 0).await
    }

    /// After training changed the adapter's factors in place (an optimizer step, a restored
    /// optimizer state): states saved before are not this model's any more, so the adapter's
    /// part of [`Model::state_key`] moves on to a value never used before.
    pub(crate) fn adapter_changed(&mut self) {
        static CHANGES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CHANGES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = web_time::SystemTime::now()
            .duration_since(web_time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        #[cfg(not(target_arch = "wasm32"))]
        let process = std::process::id();
        #[cfg(target_arch = "wasm32")]
        let process = 0;
        self.lora_identity = Some(format!("trained-{process}-{now:x}-{n}"));
    }

    /// What a state saved by this model is keyed by: its weights' fingerprint, the KV
    /// cache's element type and, with a LoRA adapter, the adapter's fingerprint (after
    /// training steps, a value of its own per step: [`Model::adapter_changed`]).
    pub fn state_key(&self) -> String {
        // With the MTP layer loaded a state also holds its KV cache.
        let mtp = if self.arch.has_mtp() { "+mtp" } else { "" };
        let base = format!("{}+kv:{}{mtp}", self.identity, self.kv_cache);
        match &self.lora_identity {
            Some(lora) => format!("{base}+lora:{lora}"),
            None => base,
        }
    }

    /// Sequence 0's state as bytes, for [`Model::load_state`] in another process or session
    /// (a prompt's prefix computed once, ever).
    pub async fn save_state(&self) -> Result<Vec<u8>> {
        self.snapshot()
            .await?
            .to_bytes(&self.ctx, &self.state_key())
            .await
    }

    /// Puts back a state from [`Model::save_state`] of the same weights and adapter as
    /// sequence 0; anything else is an `EngineError::State` and leaves the model as it was.
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        let state = SequenceState::from_bytes(&self.ctx, &self.state_key(), bytes)?;
        self.restore(&state)
    }

    /// Puts back a state from [`Model::snapshot`] of this model (or one with the same
    /// layout): the next step continues as if nothing had run since the snapshot.
    pub fn restore(&mut self, state: &SequenceState) -> Result<()> {
        if state.tokens().len() > self.context as usize {
            return Err(EngineError::ContextFull {
                needed: state.tokens().len(),
                capacity: self.context as usize,
            });
        }
        state.write_into(&self.ctx, &self.state, 0)?;
        self.seqs[0] = state.tokens().to_vec();
        Ok(())
    }

    /// Keeps the longest common prefix of the cache and `tokens`, returning the tokens
    /// still to evaluate: how a conversation reuses its earlier turns.
    pub fn reuse_prefix<'a>(&mut self, tokens: &'a [u32]) -> &'a [u32] {
        let common = self.seqs[0]
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        // At least one token must be evaluated to produce logits.
        let keep = common.min(tokens.len().saturating_sub(1));
        self.truncate(keep);
        &tokens[self.seqs[0].len()..]
    }

    /// A prompt to generate after: not empty, and no longer than the context (a prompt that
    /// fills it still gives one token, which needs no position of its own).
    pub fn check_prompt(&self, prompt: &[u32]) -> Result<()> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if prompt.len() > self.context as usize {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                context: self.context as usize,
            });
        }
        Ok(())
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        self.check_sequence_tokens(0, tokens)
    }

    pub(crate) fn check_sequence_tokens(&self, seq: u32, tokens: &[u32]) -> Result<()> {
        let Some(cached) = self.seqs.get(seq as usize) else {
            return Err(EngineError::Sequence(format!(
                "sequence {seq} does not exist: the model has {} slots (ModelOptions::sequences)",
                self.seqs.len()
            )));
        };
        if let Some(&id) = tokens.iter().find(|&&t| t >= self.config.vocab()) {
            return Err(EngineError::BadToken {
                id,
                vocab: self.config.vocab() as usize,
            });
        }
        let needed = cached.len() + tokens.len();
        if needed > self.context as usize {
            return Err(EngineError::ContextFull {
                needed,
                capacity: self.context as usize,
            });
        }
        Ok(())
    }

    /// Records one step of `chunk` tokens (≤ max_batch) of sequence `seq` into `encoder`.
    fn encode_step(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        seq: u32,
        chunk: &[u32],
        want: Logits,
    ) {
        let n = chunk.len() as u32;
        let graph = self.begin_step(encoder, seq, chunk);
        self.encode_graph(encoder, graph, n, want);
    }

    /// Records `graph` over a step of `n` tokens, then the LM head per `want`.
    pub(crate) fn encode_graph(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        graph: &[Dispatch],
        n: u32,
        want: Logits,
    ) {
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("forward"),
                ..Default::default()
            });
            for d in graph {
                d.record(&mut pass, n);
            }
            if want == Logits::All {
                for d in &self.head_all {
                    d.record(&mut pass, n);
                }
            }
        }
        if want == Logits::Last {
            let row = self.config.n_embd() as u64 * 4;
            encoder.copy_buffer_to_buffer(
                &self.store.hidden.buffer,
                (n as u64 - 1) * row,
                &self.io.x_last,
                0,
                row,
            );
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("head"),
                ..Default::default()
            });
            for d in &self.head_last {
                d.record(&mut pass, 1);
            }
        }
    }

    /// Writes the step's uniforms and token ids (clearing the sequence's recurrent state at
    /// position 0) and returns the graph that runs `chunk`: the decode graph for one token,
    /// else prefill.
    pub(crate) fn begin_step(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        seq: u32,
        chunk: &[u32],
    ) -> &[Dispatch] {
        let n = chunk.len() as u32;
        let pos0 = self.seqs[seq as usize].len() as u32;
        self.write_step(
            encoder,
            seq,
            chunk,
            Step::for_sequence(n, pos0, seq, self.context),
        );
        if n == 1 {
            &self.decode_graph
        } else {
            &self.prefill_graph
        }
    }

    /// Writes `step` (a step over `chunk` of the sequence in slot `seq`) and the token ids,
    /// clearing the sequence's recurrent state when the step starts it.
    pub(crate) fn write_step(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        seq: u32,
        chunk: &[u32],
        step: Step,
    ) {
        let pos0 = step.pos0;
        ops::write_step(&self.ctx, &self.io.step, step);
        self.ctx
            .queue
            .write_buffer(&self.io.ids, 0, bytemuck::cast_slice(chunk));
        if pos0 == 0 {
            self.clear_recurrent_state(encoder, seq);
        }
    }

    /// A new sequence: its recurrent state starts from zero (caches need no clearing,
    /// attention reads only the rows written in this sequence).
    pub(crate) fn clear_recurrent_state(&self, encoder: &mut wgpu::CommandEncoder, seq: u32) {
        for s in self
            .state
            .iter()
            .flatten()
            .filter(|s| s.row_bytes.is_none())
        {
            encoder.clear_buffer(&s.buffer, s.slot_offset(seq), Some(s.slot_bytes));
        }
    }

    /// Evaluates `tokens` after the cached ones. Returns logits per `want`:
    /// nothing, the last position's row, or every position's rows (row-major, vocab wide).
    pub async fn eval(&mut self, tokens: &[u32], want: Logits) -> Result<Vec<f32>> {
        self.eval_sequence(0, tokens, want).await
    }

    /// [`Model::eval`] on the sequence in slot `seq`.
    pub async fn eval_sequence(
        &mut self,
        seq: u32,
        tokens: &[u32],
        want: Logits,
    ) -> Result<Vec<f32>> {
        self.check_sequence_tokens(seq, tokens)?;
        let vocab = self.config.vocab() as u64;
        let mut out = Vec::new();
        let chunks: Vec<&[u32]> = tokens.chunks(self.max_batch as usize).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            let step_want = match want {
                Logits::All => Logits::All,
                Logits::Last if last => Logits::Last,
                _ => Logits::None,
            };
            let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
            self.encode_step(&mut encoder, seq, chunk, step_want);
            self.ctx.queue.submit([encoder.finish()]);
            self.seqs[seq as usize].extend_from_slice(chunk);
            match step_want {
                Logits::All => out.extend(
                    self.ctx
                        .read_f32(&self.io.logits, 0, chunk.len() as u64 * vocab)
                        .await?,
                ),
                Logits::Last => out = self.ctx.read_f32(&self.io.logits, 0, vocab).await?,
                Logits::None => self.ctx.check()?,
            }
        }
        Ok(out)
    }

    /// Evaluates `tokens` after sequence 0's cached ones, without logits, for a long prompt
    /// that the caller may give up on: `on_progress(evaluated)` is called after each step the
    /// GPU has finished, and when it returns false no further step is queued. Steps are sized
    /// to take about [`PREFILL_STEP_SECONDS`] (from 8 tokens up to `max_batch`, measured as
    /// they run: a CPU fallback reads 8 tokens in seconds, a GPU `max_batch` in milliseconds),
    /// with one more queued behind the one running once their cost is known, so a stop takes
    /// effect within about two steps. Returns the tokens evaluated (a prefix of `tokens`,
    /// which the sequence then holds, so a later prompt that starts the same way goes on from
    /// there).
    pub async fn prefill(
        &mut self,
        tokens: &[u32],
        on_progress: &mut dyn FnMut(usize) -> bool,
    ) -> Result<usize> {
        self.prefill_before(tokens, None, on_progress).await
    }

    /// [`Model::prefill`] of tokens followed by `after`, when it is known: drafting with a
    /// multi-token-prediction layer, each step also runs that layer over its rows, which
    /// pairs each token with the one after it.
    pub(crate) async fn prefill_before(
        &mut self,
        tokens: &[u32],
        after: Option<u32>,
        on_progress: &mut dyn FnMut(usize) -> bool,
    ) -> Result<usize> {
        self.check_tokens(tokens)?;
        let tile = PREFILL_TILE as usize;
        let max = (self.max_batch as usize).max(1);
        // The first step is small: until it is timed, nothing says how slow the adapter is.
        let mut size = tile.min(max);
        let mut timed = false;
        let mut queued: VecDeque<(usize, usize, Submitted)> = VecDeque::with_capacity(2);
        let mut submitted = 0;
        let mut last_done = web_time::Instant::now();
        loop {
            let depth = if timed { 2 } else { 1 };
            if queued.len() < depth && submitted < tokens.len() {
                let end = tokens.len().min(submitted + size);
                let chunk = &tokens[submitted..end];
                let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
                self.encode_step(&mut encoder, 0, chunk, Logits::None);
                self.encode_mtp_prefill(&mut encoder, chunk, tokens.get(end).copied().or(after));
                if queued.is_empty() {
                    last_done = web_time::Instant::now();
                }
                submitted += chunk.len();
                queued.push_back((submitted, chunk.len(), self.ctx.submit_tracked(encoder)));
                self.seqs[0].extend_from_slice(chunk);
                continue;
            }
            let Some((evaluated, n, work)) = queued.pop_front() else {
                return Ok(submitted);
            };
            if let Err(e) = self.ctx.finished(work).await {
                self.seqs[0].clear();
                return Err(e);
            }
            // The step ran from the later of its submission and the previous step's end.
            let now = web_time::Instant::now();
            let per_token = now.duration_since(last_done).as_secs_f64() / n as f64;
            last_done = now;
            let fits = (PREFILL_STEP_SECONDS / per_token.max(1e-9)) as usize;
            size = (fits / tile * tile).clamp(tile.min(max), max);
            timed = true;
            if !on_progress(evaluated) {
                // What is queued still runs and counts; nothing more is queued.
                return Ok(submitted);
            }
        }
    }

    /// Log-probabilities of given tokens, computed on the GPU: evaluates `tokens` after the
    /// sequence's cached ones and returns log p(targets[i] | cached, tokens[..=i]) for each i.
    /// One float per token comes back, never the logits (what a policy-gradient loss and its
    /// importance ratios need: `targets` is `tokens` shifted by one, plus the next token).
    pub async fn log_probs(
        &mut self,
        seq: u32,
        tokens: &[u32],
        targets: &[u32],
    ) -> Result<Vec<f32>> {
        self.log_probs_of(seq, tokens, targets, true).await
    }

    /// [`Model::log_probs`] of the base model alone, as if no adapter were set (the reference
    /// policy of a KL penalty): the adapter stays loaded, its graph is recorded without it.
    /// The sequence's state is the base model's afterwards, so truncate it before using it
    /// with the adapter.
    pub async fn base_log_probs(
        &mut self,
        seq: u32,
        tokens: &[u32],
        targets: &[u32],
    ) -> Result<Vec<f32>> {
        self.log_probs_of(seq, tokens, targets, false).await
    }

    async fn log_probs_of(
        &mut self,
        seq: u32,
        tokens: &[u32],
        targets: &[u32],
        adapters: bool,
    ) -> Result<Vec<f32>> {
        if tokens.len() != targets.len() {
            return Err(EngineError::Shape {
                op: "log_probs",
                detail: format!("{} tokens but {} targets", tokens.len(), targets.len()),
            });
        }
        self.check_sequence_tokens(seq, tokens)?;
        if let Some(&id) = targets.iter().find(|&&t| t >= self.config.vocab()) {
            return Err(EngineError::BadToken {
                id,
                vocab: self.config.vocab() as usize,
            });
        }
        // Without the adapters: a prefill graph recorded for this call (the stored graphs
        // have them), which serves steps of every size.
        let base = if adapters || self.lora_scratch.is_none() {
            None
        } else {
            let io = GraphIo {
                ctx: &self.ctx,
                ids: &self.io.ids,
                step: &self.io.step,
                tile: PREFILL_TILE,
                lora: None,
                multi_sequence: false,
                adapters: false,
            };
            Some(record_forward(self.arch.as_ref(), &io, &self.store)?)
        };
        let mut out = Vec::with_capacity(tokens.len());
        let size = self.max_batch as usize;
        for (chunk, want) in tokens.chunks(size).zip(targets.chunks(size)) {
            self.ctx
                .queue
                .write_buffer(&self.io.targets, 0, bytemuck::cast_slice(want));
            let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
            let graph = self.begin_step(&mut encoder, seq, chunk);
            let graph = base.as_deref().unwrap_or(graph);
            self.encode_graph(&mut encoder, graph, chunk.len() as u32, Logits::All);
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                self.gather_log_probs.record(&mut pass, chunk.len() as u32);
            }
            self.ctx.queue.submit([encoder.finish()]);
            self.seqs[seq as usize].extend_from_slice(chunk);
            out.extend(
                self.ctx
                    .read_f32(&self.io.log_probs, 0, chunk.len() as u64)
                    .await?,
            );
        }
        Ok(out)
    }

    /// Starts (or, with false, stops) timing every kernel the training passes run
    /// (`forward_for_training`, `training_log_probs`, `lora_backward`, recomputed layers) and
    /// batched steps (`sample_batch`, its samplers excepted): each of their graphs then waits
    /// for the device, so they run slower. Native only.
    pub fn profile_kernels(&mut self, on: bool) {
        self.kernel_times = on.then(KernelTimes::default);
    }

    /// The kernel times gathered since profiling started, which starts again from zero.
    pub fn take_kernel_times(&mut self) -> Option<KernelTimes> {
        self.kernel_times.as_mut().map(std::mem::take)
    }

    /// Records `graph` for a step of `n` tokens after what `encoder` holds and submits it;
    /// while kernels are profiled it runs timed (and waits for the device).
    pub(crate) async fn submit_graph(
        &mut self,
        mut encoder: wgpu::CommandEncoder,
        graph: &[Dispatch],
        n: u32,
    ) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(times) = self.kernel_times.as_mut() {
            let steps: Vec<(&Dispatch, u32)> = graph.iter().map(|d| (d, n)).collect();
            return crate::profile::run_timed(&self.ctx, encoder, &steps, times).await;
        }
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            for d in graph {
                d.record(&mut pass, n);
            }
        }
        self.ctx.queue.submit([encoder.finish()]);
        Ok(())
    }

    /// Times each kernel of one step over `tokens` (the decode graph for one token, the
    /// prefill graph for more; see [`crate::profile`]). The state advances as after `eval`.
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn profile_step(&mut self, tokens: &[u32]) -> Result<KernelTimes> {
        self.check_tokens(tokens)?;
        if tokens.is_empty() || tokens.len() > self.max_batch as usize {
            return Err(EngineError::Shape {
                op: "profile_step",
                detail: format!("{} tokens (1..={})", tokens.len(), self.max_batch),
            });
        }
        let n = tokens.len() as u32;
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        let graph = self.begin_step(&mut encoder, 0, tokens);
        let mut times = KernelTimes::default();
        // The head runs on one row (the last token's), as in `eval`.
        self.time_graph(encoder, graph, n, Logits::Last, &mut times)
            .await?;
        self.seqs[0].extend_from_slice(tokens);
        Ok(times)
    }

    /// Evaluates `tokens` and samples the next token on the GPU; only 4 bytes come back.
    /// `history` feeds the repetition penalties.
    pub async fn next_token(
        &mut self,
        tokens: &[u32],
        sp: &SamplingParams,
        rng: &mut Rng,
        history: &[u32],
    ) -> Result<u32> {
        self.check_tokens(tokens)?;
        if tokens.is_empty() {
            return Err(EngineError::Sampling("no tokens to evaluate".into()));
        }
        let (head, tail) = tokens
            .split_at(tokens.len() - tokens.len().min(self.max_batch as usize).min(tokens.len()));
        if !head.is_empty() {
            self.eval(head, Logits::None).await?;
        }
        let u = if sp.is_greedy() { 0.0 } else { rng.next_f32() };
        let sampler = &self.samplers[0];
        sampler.prepare(&self.ctx, sp, history, 0, u)?;
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        self.encode_step(&mut encoder, 0, tail, Logits::Last);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            sampler.dispatch().record(&mut pass, 1);
        }
        self.ctx.queue.submit([encoder.finish()]);
        self.seqs[0].extend_from_slice(tail);
        let id = self.ctx.read_u32(&self.samplers[0].result, 0, 1).await?[0];
        if id >= self.config.vocab() {
            return Err(EngineError::Sampling(format!("the sampler returned {id}")));
        }
        Ok(id)
    }
}

impl Model {
    /// Generates after `prompt`: reuses the cached prefix, evaluates the rest, then samples
    /// up to `max_tokens` tokens, calling `on_token` for each (return false to stop).
    /// Stops after a token for which `is_stop` is true (that token is reported too).
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        sp: &SamplingParams,
        max_tokens: usize,
        is_stop: &dyn Fn(u32) -> bool,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Generation> {
        self.generate_observed(prompt, sp, max_tokens, is_stop, &mut |_, _| true, on_token)
            .await
    }

    /// [`Model::generate`], reporting the prompt's progress: `on_prompt(evaluated, pending)`
    /// as steps of a long prompt finish, where `pending` is what the cache did not hold.
    /// Returning false stops before the first token ([`Generation::prompt_stopped`]); the
    /// sequence keeps the prompt tokens evaluated so far.
    pub async fn generate_observed(
        &mut self,
        prompt: &[u32],
        sp: &SamplingParams,
        max_tokens: usize,
        is_stop: &dyn Fn(u32) -> bool,
        on_prompt: &mut dyn FnMut(usize, usize) -> bool,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Generation> {
        sp.validate()?;
        self.check_prompt(prompt)?;
        let mut rng = Rng::new(sp.seed);
        let pending = self.reuse_prefix(prompt).to_vec();
        let reused = prompt.len() - pending.len();
        let mut history = prompt.to_vec();
        let mut out = Vec::new();
        if max_tokens > 0 {
            // All but the last step of the prompt report their progress; the last one samples
            // the first token and is read back at once. The decode steps after it are queued
            // ahead of the host.
            // Speculative decoding's first step reads one token: a draft may go behind it.
            let last = match self.speculation {
                Some(_) => pending.len().min(1),
                None => pending.len().min(self.max_batch as usize),
            };
            let (head, tail) = pending.split_at(pending.len() - last);
            let total = pending.len();
            let mut going = true;
            let evaluated = self
                .prefill_before(head, tail.first().copied(), &mut |n| {
                    going = on_prompt(n, total);
                    going
                })
                .await?;
            if !going {
                return Ok(Generation {
                    tokens: out,
                    prompt_evaluated: evaluated,
                    prompt_reused: reused,
                    prompt_stopped: true,
                });
            }
            let run = if self.speculation.is_some() {
                let mut reported = false;
                let mut report = |id| {
                    if !reported {
                        reported = true;
                        on_prompt(total, total);
                    }
                    on_token(id)
                };
                self.speculative_run(
                    tail,
                    sp,
                    &mut rng,
                    &mut history,
                    max_tokens,
                    is_stop,
                    &mut report,
                    &mut out,
                )
                .await
            } else {
                let first = self.next_token(tail, sp, &mut rng, &history).await?;
                on_prompt(total, total);
                out.push(first);
                history.push(first);
                if on_token(first) && !is_stop(first) {
                    self.decode_run(
                        first,
                        sp,
                        &mut rng,
                        &mut history,
                        max_tokens - 1,
                        is_stop,
                        on_token,
                        &mut out,
                    )
                    .await
                } else {
                    Ok(())
                }
            };
            if let Err(e) = run {
                self.seqs[0].clear();
                return Err(e);
            }
        }
        Ok(Generation {
            tokens: out,
            prompt_evaluated: pending.len(),
            prompt_reused: reused,
            prompt_stopped: false,
        })
    }
}

/// SHA-256 (hex) of an adapter's factors and scale.
fn lora_fingerprint(adapter: &LoraAdapter) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(adapter.scale.to_le_bytes());
    for t in &adapter.tensors {
        hash.update(t.target.as_bytes());
        hash.update(bytemuck::cast_slice(&t.a));
        hash.update(bytemuck::cast_slice(&t.b));
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// What one step of a prompt read by [`Model::prefill`] should take: long enough that the
/// steps' fixed costs do not matter, short enough that a stop takes effect soon.
pub const PREFILL_STEP_SECONDS: f64 = 0.5;

/// What [`Model::generate`] did.
#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// Prompt tokens evaluated now (the rest came from the cache).
    pub prompt_evaluated: usize,
    pub prompt_reused: usize,
    /// The caller stopped it while the prompt was evaluated: no token was sampled.
    pub prompt_stopped: bool,
}

/// The decode graph (tile 1), the prefill graph and, with `multi` (several sequence slots,
/// or speculative decoding's checks), the batched-decode graph (prefill's tiles, recurrent
/// layers token by token).
fn record_graphs(
    ctx: &GpuContext,
    arch: &dyn Forward,
    io: &Io,
    store: &ActivationStore,
    lora: Option<&Tensor>,
    multi: bool,
) -> Result<[Vec<Dispatch>; 3]> {
    let graph = |tile, multi_sequence| {
        let io = GraphIo {
            ctx,
            ids: &io.ids,
            step: &io.step,
            tile,
            lora,
            multi_sequence,
            adapters: true,
        };
        record_forward(arch, &io, store)
    };
    let batch = if multi {
        graph(PREFILL_TILE, true)?
    } else {
        Vec::new()
    };
    Ok([graph(1, false)?, graph(PREFILL_TILE, false)?, batch])
}

/// The LM head of a batched step: every row, except that one row takes the decode head
/// (the prefill head's tile would compute the vocabulary-wide product for a whole tile).
fn batch_head(rows: usize) -> Logits {
    if rows == 1 { Logits::Last } else { Logits::All }
}
