//! The runtime every architecture shares: a loaded model with one sequence's state, steps
//! of up to `max_batch` tokens recorded into one compute pass, logits or GPU sampling, prefix
//! reuse and sequence snapshots. The architectures themselves live in `crate::models`.

use std::sync::Arc;

use lilypad_gguf::peft::{LoraAdapter, LoraTensor};
use lilypad_gguf::{ByteSource, GgufFile};

use crate::error::{EngineError, Result, human_bytes};
use crate::gpu::GpuContext;
use crate::kernels::Dispatch;
use crate::models::blocks::{GraphIo, Loader, check_tensors};
use crate::models::{Forward, ModelConfig};
use crate::ops::{self, Step, matvec::PREFILL_TILE, sample::Sampler};
use crate::state::{SequenceState, StateBuffer};
use crate::{Rng, SamplingParams};

/// What a model will occupy on the GPU.
#[derive(Clone, Debug, Default)]
pub struct MemoryPlan {
    pub weights: u64,
    pub kv_cache: u64,
    /// Fixed-size per-sequence state of recurrent layers (Qwen3.5's DeltaNet).
    pub recurrent_state: u64,
    pub activations: u64,
    /// Largest single buffer (must fit one storage binding unless split).
    pub largest_unsplittable: u64,
}

impl MemoryPlan {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.recurrent_state + self.activations
    }
}

impl MemoryPlan {
    /// Refuses, before anything is allocated, a plan that cannot run on `ctx`'s adapter: a
    /// buffer that must be one binding (a layer's KV cache, the logits, recurrent state) larger
    /// than the adapter's binding or buffer limit. Weights are split, so never refused here.
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
        Ok(())
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
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            context: None,
            max_batch: 64,
            max_chunk_bytes: None,
            mtp: false,
        }
    }
}

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
struct Io {
    ids: wgpu::Buffer,
    x_last: wgpu::Buffer,
    logits: wgpu::Buffer,
    step: wgpu::Buffer,
    step_one: wgpu::Buffer,
}

/// A loaded model with one sequence's state (its KV cache and the tokens in it).
pub struct Model {
    ctx: Arc<GpuContext>,
    pub config: ModelConfig,
    pub context: u32,
    pub max_batch: u32,
    pub plan: MemoryPlan,
    io: Io,
    /// Tokens whose state is in the model's buffers, in order.
    tokens: Vec<u32>,
    /// Per layer, the buffers holding the sequence state.
    state: Vec<Vec<StateBuffer>>,
    /// Whether the state can go back to an earlier position: true when it is all caches
    /// indexed by position, false with fixed-size recurrent state.
    rewindable: bool,
    decode_graph: Vec<Dispatch>,
    prefill_graph: Vec<Dispatch>,
    head_last: Vec<Dispatch>,
    head_all: Vec<Dispatch>,
    sampler: Sampler,
    arch: Box<dyn Forward>,
    /// [max_batch, rank] for the LoRA adapters' A·x, sized for the largest padded rank set.
    lora_scratch: Option<wgpu::Buffer>,
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
        let max_batch = opts.max_batch.clamp(1, 512);

        // Validate everything before allocating anything on the GPU, including layers that
        // are not uploaded.
        check_tensors(file, &cfg.loaded_tensor_shapes(true))?;
        let total_bytes = check_tensors(file, &cfg.loaded_tensor_shapes(opts.mtp))?;
        let plan = cfg.memory_plan(file, context, max_batch, opts.mtp);
        plan.check_fits(&ctx, context)?;

        let oom_scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let loader = Loader::new(&ctx, file, src, opts.max_chunk_bytes, total_bytes, progress);
        let arch = cfg.load(&loader, context, max_batch, opts.mtp)?;
        let io = Io {
            ids: loader.f32s("token ids", max_batch as u64)?,
            x_last: loader.f32s("last x", cfg.n_embd() as u64)?,
            logits: loader.f32s("logits", max_batch as u64 * cfg.vocab() as u64)?,
            step: ops::step_buffer(&ctx),
            step_one: ops::step_buffer(&ctx),
        };
        ops::write_step(&ctx, &io.step_one, Step::new(1, 0));
        let [decode_graph, prefill_graph] = record_graphs(&ctx, arch.as_ref(), &io, None)?;
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
            false,
        )?;
        let head_all = ops::matvec::matvec(
            &ctx,
            head,
            arch.hidden(),
            &io.logits,
            cfg.vocab(),
            &io.step,
            PREFILL_TILE,
            false,
            false,
        )?;
        let sampler = Sampler::new(&ctx, &io.logits, cfg.vocab())?;
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
            plan,
            io,
            tokens: Vec::new(),
            state,
            rewindable,
            decode_graph,
            prefill_graph,
            head_last,
            head_all,
            sampler,
            arch,
            lora_scratch: None,
        })
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
        self.tokens.clear();
        let applied = self.apply_lora(tensors, adapter.map_or(1.0, |a| a.scale));
        if applied.is_err() {
            // Never leave some linears adapted and others not: back to the base model.
            let _ = self.apply_lora(&[], 1.0);
        }
        applied
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
        let needed = self.max_batch as u64 * max_rank as u64 * 4;
        let scratch_size = self.lora_scratch.as_ref().map_or(0, |b| b.size());
        if needed > scratch_size {
            self.lora_scratch =
                Some(ctx.storage_buffer("lora scratch", needed, wgpu::BufferUsages::empty())?);
            rerecord = true;
        } else if needed == 0 && self.lora_scratch.take().is_some() {
            rerecord = true;
        }
        if rerecord {
            [self.decode_graph, self.prefill_graph] = record_graphs(
                &ctx,
                self.arch.as_ref(),
                &self.io,
                self.lora_scratch.as_ref(),
            )?;
        }
        ctx.check()
    }

    pub fn gpu(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Tokens whose state is in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Forgets everything after the first `n` tokens (their cache rows get overwritten).
    /// Recurrent state cannot go back, so a model with it forgets the whole sequence
    /// instead unless `n` keeps every token (use [`Model::snapshot`] to return to a point).
    pub fn truncate(&mut self, n: usize) {
        if n < self.tokens.len() && !self.rewindable {
            self.tokens.clear();
        }
        self.tokens.truncate(n);
    }

    /// Whether [`Model::truncate`] can keep a prefix (false for recurrent models).
    pub fn can_rewind(&self) -> bool {
        self.rewindable
    }

    pub fn reset(&mut self) {
        self.tokens.clear();
    }

    /// Copies the sequence state (tokens and, per layer, the cache rows in use) on the GPU,
    /// so that [`Model::restore`] can return to this point later.
    pub async fn snapshot(&self) -> Result<SequenceState> {
        SequenceState::capture(&self.ctx, &self.state, &self.tokens).await
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
        state.write_into(&self.ctx, &self.state)?;
        self.tokens = state.tokens().to_vec();
        Ok(())
    }

    /// Keeps the longest common prefix of the cache and `tokens`, returning the tokens
    /// still to evaluate: how a conversation reuses its earlier turns.
    pub fn reuse_prefix<'a>(&mut self, tokens: &'a [u32]) -> &'a [u32] {
        let common = self
            .tokens
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        // At least one token must be evaluated to produce logits.
        let keep = common.min(tokens.len().saturating_sub(1));
        self.truncate(keep);
        &tokens[self.tokens.len()..]
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        if let Some(&id) = tokens.iter().find(|&&t| t >= self.config.vocab()) {
            return Err(EngineError::BadToken {
                id,
                vocab: self.config.vocab() as usize,
            });
        }
        let needed = self.tokens.len() + tokens.len();
        if needed > self.context as usize {
            return Err(EngineError::ContextFull {
                needed,
                capacity: self.context as usize,
            });
        }
        Ok(())
    }

    /// Records one step of `chunk` tokens (≤ max_batch) into `encoder`.
    fn encode_step(&self, encoder: &mut wgpu::CommandEncoder, chunk: &[u32], want: Logits) {
        let n = chunk.len() as u32;
        let graph = self.begin_step(encoder, chunk);
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
                self.arch.hidden(),
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

    /// Writes the step's uniforms and token ids (clearing recurrent state at position 0) and
    /// returns the graph that runs `chunk`: the decode graph for one token, else prefill.
    fn begin_step(&self, encoder: &mut wgpu::CommandEncoder, chunk: &[u32]) -> &[Dispatch] {
        let n = chunk.len() as u32;
        let pos0 = self.tokens.len() as u32;
        ops::write_step(&self.ctx, &self.io.step, Step::new(n, pos0));
        self.ctx
            .queue
            .write_buffer(&self.io.ids, 0, bytemuck::cast_slice(chunk));
        if pos0 == 0 {
            self.clear_recurrent_state(encoder);
        }
        if n == 1 {
            &self.decode_graph
        } else {
            &self.prefill_graph
        }
    }

    /// A new sequence: recurrent state starts from zero (caches need no clearing, attention
    /// reads only the rows written in this sequence).
    fn clear_recurrent_state(&self, encoder: &mut wgpu::CommandEncoder) {
        for s in self
            .state
            .iter()
            .flatten()
            .filter(|s| s.row_bytes.is_none())
        {
            encoder.clear_buffer(&s.buffer, 0, None);
        }
    }

    /// Evaluates `tokens` after the cached ones. Returns logits per `want`:
    /// nothing, the last position's row, or every position's rows (row-major, vocab wide).
    pub async fn eval(&mut self, tokens: &[u32], want: Logits) -> Result<Vec<f32>> {
        self.check_tokens(tokens)?;
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
            self.encode_step(&mut encoder, chunk, step_want);
            self.ctx.queue.submit([encoder.finish()]);
            self.tokens.extend_from_slice(chunk);
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

    /// Times each kernel of one step over `tokens` (the decode graph for one token, the
    /// prefill graph for more) by submitting and waiting for every dispatch on its own.
    /// Returns (kernel, seconds) summed per kernel name, slowest first. The state advances
    /// as after `eval`. Native only: it blocks on the device.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn profile_step(&mut self, tokens: &[u32]) -> Result<Vec<(&'static str, f64)>> {
        self.check_tokens(tokens)?;
        if tokens.is_empty() || tokens.len() > self.max_batch as usize {
            return Err(EngineError::Shape {
                op: "profile_step",
                detail: format!("{} tokens (1..={})", tokens.len(), self.max_batch),
            });
        }
        let n = tokens.len() as u32;
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        let graph = self.begin_step(&mut encoder, tokens);
        self.ctx.queue.submit([encoder.finish()]);
        self.wait()?;
        // The head runs on one row (the last token's), as in `eval`.
        let steps = graph.iter().map(|d| (d, n));
        let steps = steps.chain(self.head_last.iter().map(|d| (d, 1)));
        let mut times = std::collections::BTreeMap::<&'static str, f64>::new();
        for (d, rows) in steps {
            let t = std::time::Instant::now();
            let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                d.record(&mut pass, rows);
            }
            self.ctx.queue.submit([encoder.finish()]);
            self.wait()?;
            *times.entry(d.label).or_default() += t.elapsed().as_secs_f64();
        }
        self.tokens.extend_from_slice(tokens);
        let mut times: Vec<_> = times.into_iter().collect();
        times.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(times)
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait(&self) -> Result<()> {
        let _ = self.ctx.device.poll(wgpu::PollType::wait_indefinitely());
        self.ctx.check()
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
        self.sampler.prepare(&self.ctx, sp, history, 0, u)?;
        let mut encoder = self.ctx.device.create_command_encoder(&Default::default());
        self.encode_step(&mut encoder, tail, Logits::Last);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            self.sampler.dispatch().record(&mut pass, 1);
        }
        self.ctx.queue.submit([encoder.finish()]);
        self.tokens.extend_from_slice(tail);
        let id = self.ctx.read_u32(&self.sampler.result, 0, 1).await?[0];
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
        sp.validate()?;
        let mut rng = Rng::new(sp.seed);
        let pending = self.reuse_prefix(prompt).to_vec();
        let reused = prompt.len() - pending.len();
        let mut history = prompt.to_vec();
        let mut feed = pending.clone();
        let mut out = Vec::new();
        while out.len() < max_tokens {
            if self.tokens.len() + feed.len() > self.context as usize {
                break;
            }
            let id = self.next_token(&feed, sp, &mut rng, &history).await?;
            out.push(id);
            history.push(id);
            feed = vec![id];
            if !on_token(id) || is_stop(id) {
                break;
            }
        }
        Ok(Generation {
            tokens: out,
            prompt_evaluated: pending.len(),
            prompt_reused: reused,
        })
    }
}

/// What [`Model::generate`] did.
#[derive(Clone, Debug)]
pub struct Generation {
    pub tokens: Vec<u32>,
    /// Prompt tokens evaluated now (the rest came from the cache).
    pub prompt_evaluated: usize,
    pub prompt_reused: usize,
}

/// The decode graph (tile 1) and the prefill graph.
fn record_graphs(
    ctx: &GpuContext,
    arch: &dyn Forward,
    io: &Io,
    lora: Option<&wgpu::Buffer>,
) -> Result<[Vec<Dispatch>; 2]> {
    let graph = |tile| {
        arch.graph(&GraphIo {
            ctx,
            ids: &io.ids,
            step: &io.step,
            tile,
            lora,
        })
    };
    Ok([graph(1)?, graph(PREFILL_TILE)?])
}
