//! The Llama-family forward pass (llama, SmolLM, Mistral-style GGUFs): config from GGUF
//! metadata, weights uploaded once, and a recorded graph of kernel dispatches per step.
//!
//! Conventions follow llama.cpp's `llama` architecture: GGUF Q/K rows are pre-permuted, so
//! RoPE rotates adjacent pairs; norms are plain RMSNorm; SwiGLU MLP; the head is
//! `output.weight`, or the token embedding when tied.

use std::sync::Arc;

use lilypad_gguf::{ByteSource, GgmlType, GgufFile, TensorInfo};

use crate::error::{EngineError, Result, human_bytes};
use crate::gpu::GpuContext;
use crate::kernels::Dispatch;
use crate::ops::{self, Step, matvec::PREFILL_TILE, rope::RopeMode, sample::Sampler};
use crate::weights::{self, GpuWeight};
use crate::{Rng, SamplingParams};

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
}

/// Architectures whose GGUF layout is llama's.
pub const LLAMA_LIKE: &[&str] = &["llama", "mistral", "smollm"];

impl LlamaConfig {
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let md = &file.metadata;
        let arch = md.architecture()?.to_string();
        if !LLAMA_LIKE.contains(&arch.as_str()) {
            return Err(EngineError::UnsupportedArchitecture(arch));
        }
        let key = |k: &str| format!("{arch}.{k}");
        let n_embd = md.u32(&key("embedding_length"))?;
        let n_head = md.u32(&key("attention.head_count"))?;
        let n_kv_head = md.u32(&key("attention.head_count_kv")).unwrap_or(n_head);
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 || n_embd % n_head != 0 {
            return Err(EngineError::Config(format!(
                "{n_head} heads, {n_kv_head} KV heads, embedding {n_embd}"
            )));
        }
        let head_dim = md
            .u32(&key("attention.key_length"))
            .unwrap_or(n_embd / n_head);
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
            arch,
        };
        if cfg.n_layer == 0
            || cfg.n_layer > 1024
            || cfg.head_dim > 256
            || cfg.head_dim % 8 != 0
            || cfg.n_rot > cfg.head_dim
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

    /// (name, [rows, cols]) of every tensor the forward pass reads.
    pub fn tensor_shapes(&self) -> Vec<(String, [u64; 2])> {
        let (e, q, kv, f) = (
            self.n_embd as u64,
            self.q_dim() as u64,
            self.kv_dim() as u64,
            self.n_ff as u64,
        );
        let mut v = vec![
            ("token_embd.weight".to_string(), [self.vocab as u64, e]),
            ("output_norm.weight".into(), [1, e]),
        ];
        if !self.tied_embeddings {
            v.push(("output.weight".into(), [self.vocab as u64, e]));
        }
        for i in 0..self.n_layer {
            let b = |n: &str| format!("blk.{i}.{n}.weight");
            v.extend([
                (b("attn_norm"), [1, e]),
                (b("attn_q"), [q, e]),
                (b("attn_k"), [kv, e]),
                (b("attn_v"), [kv, e]),
                (b("attn_output"), [e, q]),
                (b("ffn_norm"), [1, e]),
                (b("ffn_gate"), [f, e]),
                (b("ffn_up"), [f, e]),
                (b("ffn_down"), [e, f]),
            ]);
        }
        v
    }
}

/// What a model will occupy on the GPU.
#[derive(Clone, Debug, Default)]
pub struct MemoryPlan {
    pub weights: u64,
    pub kv_cache: u64,
    pub activations: u64,
    /// Largest single buffer (must fit one storage binding unless split).
    pub largest_unsplittable: u64,
}

impl MemoryPlan {
    pub fn total(&self) -> u64 {
        self.weights + self.kv_cache + self.activations
    }
}

impl std::fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (weights {}, KV cache {}, activations {})",
            human_bytes(self.total()),
            human_bytes(self.weights),
            human_bytes(self.kv_cache),
            human_bytes(self.activations)
        )
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
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            context: None,
            max_batch: 64,
            max_chunk_bytes: None,
        }
    }
}

/// The plan for `cfg` at `context` positions and `max_batch`-token steps.
pub fn memory_plan(file: &GgufFile, cfg: &LlamaConfig, context: u32, max_batch: u32) -> MemoryPlan {
    let mut plan = MemoryPlan::default();
    for (name, _) in cfg.tensor_shapes() {
        if let Some(t) = file.tensor(&name) {
            // Norms are widened to f32; everything else keeps its size.
            plan.weights += if t.dims.len() == 1 || t.rows() == 1 {
                t.n_elements() * 4
            } else {
                t.n_bytes()
            };
        }
    }
    let kv_layer = context as u64 * cfg.kv_dim() as u64 * 4;
    plan.kv_cache = 2 * cfg.n_layer as u64 * kv_layer;
    let b = max_batch as u64;
    plan.activations = 4
        * b
        * (2 * cfg.n_embd as u64 + 2 * cfg.q_dim() as u64 + 3 * cfg.n_ff as u64 + cfg.vocab as u64)
        + 4 * (cfg.n_embd as u64 + 2 * cfg.vocab as u64);
    plan.largest_unsplittable = kv_layer.max(b * cfg.vocab as u64 * 4);
    plan
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

struct Layer {
    attn_norm: wgpu::Buffer,
    wq: GpuWeight,
    wk: GpuWeight,
    wv: GpuWeight,
    wo: GpuWeight,
    ffn_norm: wgpu::Buffer,
    gate: GpuWeight,
    up: GpuWeight,
    down: GpuWeight,
    k_cache: wgpu::Buffer,
    v_cache: wgpu::Buffer,
}

struct Buffers {
    ids: wgpu::Buffer,
    x: wgpu::Buffer,
    xn: wgpu::Buffer,
    q: wgpu::Buffer,
    att: wgpu::Buffer,
    gate: wgpu::Buffer,
    up: wgpu::Buffer,
    act: wgpu::Buffer,
    x_last: wgpu::Buffer,
    logits: wgpu::Buffer,
    step: wgpu::Buffer,
    step_one: wgpu::Buffer,
}

/// A loaded model with one sequence's state (its KV cache and the tokens in it).
pub struct Model {
    ctx: Arc<GpuContext>,
    pub config: LlamaConfig,
    pub context: u32,
    pub max_batch: u32,
    pub plan: MemoryPlan,
    buf: Buffers,
    /// Tokens whose K/V are in the cache, in order.
    tokens: Vec<u32>,
    decode_graph: Vec<Dispatch>,
    prefill_graph: Vec<Dispatch>,
    head_last: Vec<Dispatch>,
    head_all: Vec<Dispatch>,
    sampler: Sampler,
    _keep: (
        Vec<Layer>,
        GpuWeight,
        Option<GpuWeight>,
        wgpu::Buffer,
        wgpu::Buffer,
    ),
}

fn shape_of(t: &TensorInfo) -> [u64; 2] {
    [t.rows(), t.cols()]
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
        let cfg = LlamaConfig::from_gguf(file)?;
        let context = opts.context.unwrap_or(cfg.context_train.min(4096)).max(1);
        let max_batch = opts.max_batch.clamp(1, 512);

        // Validate everything before allocating anything on the GPU.
        let mut total_bytes = 0;
        for (name, expected) in cfg.tensor_shapes() {
            let t = file
                .tensor(&name)
                .ok_or_else(|| EngineError::MissingTensor(name.clone()))?;
            let got = shape_of(t);
            if got != expected || t.dims.len() > 2 {
                return Err(EngineError::TensorShape {
                    name,
                    expected: expected.to_vec(),
                    got: t.dims.clone(),
                });
            }
            let is_norm = expected[0] == 1;
            let ok = if is_norm {
                matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
            } else {
                weights::supported(t.ty)
            };
            if !ok {
                return Err(EngineError::UnsupportedType {
                    tensor: name,
                    ty: t.ty.name(),
                    context: "this engine",
                });
            }
            total_bytes += t.n_bytes();
        }
        let plan = memory_plan(file, &cfg, context, max_batch);
        let allowed = ctx.limits.max_storage_buffer_binding_size as u64;
        if plan.largest_unsplittable > allowed {
            return Err(EngineError::TooLarge {
                adapter: ctx.adapter.name.clone(),
                what: "largest storage binding",
                needed: format!(
                    "{} for one layer's KV cache or the logits at context {context}",
                    human_bytes(plan.largest_unsplittable)
                ),
                allowed: human_bytes(allowed),
            });
        }

        let oom_scope = ctx.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        // Matrices and norms both advance one byte counter, so progress reaches the total.
        let done = std::cell::Cell::new(0u64);
        let progress = std::cell::RefCell::new(progress);
        let report = |name: &str, bytes: u64| {
            done.set(done.get() + bytes);
            (*progress.borrow_mut())(LoadProgress {
                tensor: name.to_string(),
                done_bytes: done.get(),
                total_bytes,
            });
        };
        let matrix = |name: &str| -> Result<GpuWeight> {
            let t = file
                .tensor(name)
                .ok_or_else(|| EngineError::MissingTensor(name.into()))?;
            let bytes = file.tensor_bytes(src, t)?;
            let w = GpuWeight::upload(
                &ctx,
                name,
                t.ty,
                t.rows(),
                t.cols(),
                &bytes,
                opts.max_chunk_bytes,
            )?;
            report(name, t.n_bytes());
            Ok(w)
        };
        let embd = matrix("token_embd.weight")?;
        let output = if cfg.tied_embeddings {
            None
        } else {
            Some(matrix("output.weight")?)
        };
        let norm = |name: &str| -> Result<wgpu::Buffer> {
            let t = file
                .tensor(name)
                .ok_or_else(|| EngineError::MissingTensor(name.into()))?;
            let mut v = vec![0f32; t.n_elements() as usize];
            lilypad_gguf::dequantize(t.ty, &file.tensor_bytes(src, t)?, &mut v)?;
            report(name, t.n_bytes());
            ctx.storage_buffer_init(name, bytemuck::cast_slice(&v))
        };
        let output_norm = norm("output_norm.weight")?;
        let b = max_batch as u64;
        let kv_bytes = context as u64 * cfg.kv_dim() as u64 * 4;
        let mut layers = Vec::with_capacity(cfg.n_layer as usize);
        for i in 0..cfg.n_layer {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(Layer {
                attn_norm: norm(&n("attn_norm"))?,
                ffn_norm: norm(&n("ffn_norm"))?,
                wq: matrix(&n("attn_q"))?,
                wk: matrix(&n("attn_k"))?,
                wv: matrix(&n("attn_v"))?,
                wo: matrix(&n("attn_output"))?,
                gate: matrix(&n("ffn_gate"))?,
                up: matrix(&n("ffn_up"))?,
                down: matrix(&n("ffn_down"))?,
                k_cache: ctx.storage_buffer("k cache", kv_bytes, wgpu::BufferUsages::empty())?,
                v_cache: ctx.storage_buffer("v cache", kv_bytes, wgpu::BufferUsages::empty())?,
            });
        }
        let f32s =
            |label: &str, n: u64| ctx.storage_buffer(label, n * 4, wgpu::BufferUsages::empty());
        let buf = Buffers {
            ids: f32s("token ids", b)?,
            x: f32s("x", b * cfg.n_embd as u64)?,
            xn: f32s("x normed", b * cfg.n_embd as u64)?,
            q: f32s("q", b * cfg.q_dim() as u64)?,
            att: f32s("attention out", b * cfg.q_dim() as u64)?,
            gate: f32s("gate", b * cfg.n_ff as u64)?,
            up: f32s("up", b * cfg.n_ff as u64)?,
            act: f32s("swiglu", b * cfg.n_ff as u64)?,
            x_last: f32s("last x", cfg.n_embd as u64)?,
            logits: f32s("logits", b * cfg.vocab as u64)?,
            step: ops::step_buffer(&ctx),
            step_one: ops::step_buffer(&ctx),
        };
        ops::write_step(&ctx, &buf.step_one, Step::new(1, 0));
        let freqs = ctx.storage_buffer_init(
            "rope freqs",
            bytemuck::cast_slice(&ops::rope::frequencies(cfg.rope_base as f64, cfg.n_rot)),
        )?;

        let graph = |tile: u32| -> Result<Vec<Dispatch>> {
            let mut g = Vec::new();
            let (e, q, kv, f) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
            let s = &buf.step;
            g.extend(ops::get_rows::get_rows(
                &ctx, &embd, &buf.ids, &buf.x, max_batch, s,
            )?);
            let scale = 1.0 / (cfg.head_dim as f32).sqrt();
            for l in &layers {
                g.push(ops::rms_norm::rms_norm(
                    &ctx,
                    &buf.x,
                    &l.attn_norm,
                    &buf.xn,
                    e,
                    1,
                    cfg.rms_eps,
                    s,
                )?);
                g.extend(ops::matvec::matvec(
                    &ctx, &l.wq, &buf.xn, &buf.q, q, s, tile, false, false,
                )?);
                g.extend(ops::matvec::matvec(
                    &ctx, &l.wk, &buf.xn, &l.k_cache, kv, s, tile, false, true,
                )?);
                g.extend(ops::matvec::matvec(
                    &ctx, &l.wv, &buf.xn, &l.v_cache, kv, s, tile, false, true,
                )?);
                g.push(ops::rope::rope(
                    &ctx,
                    &buf.q,
                    &freqs,
                    cfg.n_head,
                    cfg.head_dim,
                    cfg.n_rot,
                    RopeMode::Interleaved,
                    false,
                    s,
                )?);
                g.push(ops::rope::rope(
                    &ctx,
                    &l.k_cache,
                    &freqs,
                    cfg.n_kv_head,
                    cfg.head_dim,
                    cfg.n_rot,
                    RopeMode::Interleaved,
                    true,
                    s,
                )?);
                g.push(ops::attention::attention(
                    &ctx,
                    &buf.q,
                    &l.k_cache,
                    &l.v_cache,
                    &buf.att,
                    cfg.n_head,
                    cfg.n_kv_head,
                    cfg.head_dim,
                    scale,
                    s,
                )?);
                g.extend(ops::matvec::matvec(
                    &ctx, &l.wo, &buf.att, &buf.x, e, s, tile, true, false,
                )?);
                g.push(ops::rms_norm::rms_norm(
                    &ctx,
                    &buf.x,
                    &l.ffn_norm,
                    &buf.xn,
                    e,
                    1,
                    cfg.rms_eps,
                    s,
                )?);
                g.extend(ops::matvec::matvec(
                    &ctx, &l.gate, &buf.xn, &buf.gate, f, s, tile, false, false,
                )?);
                g.extend(ops::matvec::matvec(
                    &ctx, &l.up, &buf.xn, &buf.up, f, s, tile, false, false,
                )?);
                g.push(ops::elementwise::silu_mul(
                    &ctx, &buf.gate, &buf.up, &buf.act, f, max_batch, s,
                )?);
                g.extend(ops::matvec::matvec(
                    &ctx, &l.down, &buf.act, &buf.x, e, s, tile, true, false,
                )?);
            }
            g.push(ops::rms_norm::rms_norm(
                &ctx,
                &buf.x,
                &output_norm,
                &buf.xn,
                e,
                1,
                cfg.rms_eps,
                s,
            )?);
            Ok(g)
        };
        let decode_graph = graph(1)?;
        let prefill_graph = graph(PREFILL_TILE)?;
        let head = output.as_ref().unwrap_or(&embd);
        let head_last = ops::matvec::matvec(
            &ctx,
            head,
            &buf.x_last,
            &buf.logits,
            cfg.vocab,
            &buf.step_one,
            1,
            false,
            false,
        )?;
        let head_all = ops::matvec::matvec(
            &ctx,
            head,
            &buf.xn,
            &buf.logits,
            cfg.vocab,
            &buf.step,
            PREFILL_TILE,
            false,
            false,
        )?;
        let sampler = Sampler::new(&ctx, &buf.logits, cfg.vocab)?;
        if let Some(e) = oom_scope.pop().await {
            return Err(EngineError::OutOfMemory(format!(
                "loading the model ({plan}): {e}"
            )));
        }
        ctx.check()?;
        Ok(Self {
            ctx: ctx.clone(),
            config: cfg,
            context,
            max_batch,
            plan,
            buf,
            tokens: Vec::new(),
            decode_graph,
            prefill_graph,
            head_last,
            head_all,
            sampler,
            _keep: (layers, embd, output, output_norm, freqs),
        })
    }

    pub fn gpu(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Tokens whose state is in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Forgets everything after the first `n` tokens (their cache rows get overwritten).
    pub fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
    }

    pub fn reset(&mut self) {
        self.tokens.clear();
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
        self.tokens.truncate(keep);
        &tokens[keep..]
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        if let Some(&id) = tokens.iter().find(|&&t| t >= self.config.vocab) {
            return Err(EngineError::BadToken {
                id,
                vocab: self.config.vocab as usize,
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
        let pos0 = self.tokens.len() as u32;
        ops::write_step(&self.ctx, &self.buf.step, Step::new(n, pos0));
        self.ctx
            .queue
            .write_buffer(&self.buf.ids, 0, bytemuck::cast_slice(chunk));
        let graph = if n == 1 {
            &self.decode_graph
        } else {
            &self.prefill_graph
        };
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
            let row = self.config.n_embd as u64 * 4;
            encoder.copy_buffer_to_buffer(
                &self.buf.xn,
                (n as u64 - 1) * row,
                &self.buf.x_last,
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

    /// Evaluates `tokens` after the cached ones. Returns logits per `want`:
    /// nothing, the last position's row, or every position's rows (row-major, vocab wide).
    pub async fn eval(&mut self, tokens: &[u32], want: Logits) -> Result<Vec<f32>> {
        self.check_tokens(tokens)?;
        let vocab = self.config.vocab as u64;
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
                        .read_f32(&self.buf.logits, 0, chunk.len() as u64 * vocab)
                        .await?,
                ),
                Logits::Last => out = self.ctx.read_f32(&self.buf.logits, 0, vocab).await?,
                Logits::None => self.ctx.check()?,
            }
        }
        Ok(out)
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
        if id >= self.config.vocab {
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
