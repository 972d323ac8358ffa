//! `lilypad bench`: kernel bandwidth against a copy kernel on the same adapter, the same
//! matrices in prefill (per token, over a prefill step's worth of tokens), then whole-model
//! prefill and decode speed. Wall-clock timing after a full device wait.

use std::time::Instant;

use anyhow::Result;
use lilypad_engine::kernels::Dispatch;
use lilypad_engine::ops::{self, Step};
use lilypad_engine::weights::GpuWeight;
use lilypad_engine::{BatchToken, GpuContext, Logits, Model, SamplingParams, StepProfile};
use lilypad_gguf::{ByteSource, GgufFile};
use lilypad_tokenizer::TextTokenizer;

const REPS: usize = 10;
/// Passes per measurement; the fastest counts, since other processes only ever slow a
/// pass down (shared CI-class machines).
const TRIALS: usize = 5;

/// Seconds per run of `ds` for `tokens` tokens: `REPS` runs recorded into one pass (after
/// one warm-up), the fastest of `TRIALS` passes.
fn time(ctx: &GpuContext, ds: &[Dispatch], tokens: u32) -> Result<f64> {
    let once = |reps: usize| -> Result<f64> {
        let t = Instant::now();
        let mut enc = ctx.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for _ in 0..reps {
                for d in ds {
                    d.record(&mut pass, tokens);
                }
            }
        }
        ctx.queue.submit([enc.finish()]);
        ctx.wait()?;
        Ok(t.elapsed().as_secs_f64())
    };
    once(1)?;
    let mut best = f64::INFINITY;
    for _ in 0..TRIALS {
        best = best.min(once(REPS)? / REPS as f64);
    }
    Ok(best)
}

/// One matrix timed at decode (1 token) and at the prefill tile over `batch` tokens, each
/// against the copy kernel timed just before it (other processes come and go).
struct Matvec<'a> {
    ctx: &'a GpuContext,
    copy: Dispatch,
    copy_bytes: u64,
    batch: u32,
    step: wgpu::Buffer,
    prefill_step: wgpu::Buffer,
}

impl Matvec<'_> {
    fn header(&self, what: &str) {
        println!(
            "{what:<24} {:>6} {:>11} {:>6} {:>9} {:>7} {:>7} {:>11} {:>7} {:>7}",
            "type", "shape", "copy", "µs", "GB/s", "vs copy", "prefill µs/t", "GB/s", "vs copy"
        );
    }

    /// The copy kernel's bandwidth, reads plus writes.
    fn copy_gbs(&self) -> Result<f64> {
        let secs = time(self.ctx, std::slice::from_ref(&self.copy), 1)?;
        Ok(2.0 * self.copy_bytes as f64 / secs / 1e9)
    }

    /// Prefill GB/s counts the weight bytes once per tile of tokens, as the kernel reads them.
    fn row(&self, name: &str, w: &GpuWeight, bytes: u64, prefill: bool) -> Result<()> {
        let (ctx, batch) = (self.ctx, self.batch as u64);
        let copy_gbs = self.copy_gbs()?;
        let x = ctx.storage_buffer("bench x", batch * w.cols * 4, wgpu::BufferUsages::empty())?;
        let y = ctx.storage_buffer("bench y", batch * w.rows * 4, wgpu::BufferUsages::empty())?;
        let rows = w.rows as u32;
        let ds = ops::matvec::matvec(ctx, w, &x, &y, rows, &self.step, 1, false, false)?;
        let secs = time(ctx, &ds, 1)?;
        let gbs = bytes as f64 / secs / 1e9;
        let prefill = if prefill {
            let tile = ops::matvec::PREFILL_TILE;
            let ds =
                ops::matvec::matvec(ctx, w, &x, &y, rows, &self.prefill_step, tile, false, false)?;
            let secs = time(ctx, &ds, self.batch)?;
            let gbs = (bytes * batch.div_ceil(tile as u64)) as f64 / secs / 1e9;
            format!(
                "{:>11.1} {gbs:>7.2} {:>6.0}%",
                secs * 1e6 / batch as f64,
                100.0 * gbs / copy_gbs
            )
        } else {
            String::new()
        };
        println!(
            "{:<24} {:>6} {:>11} {copy_gbs:>6.2} {:>9.1} {gbs:>7.2} {:>6.0}% {prefill}",
            name,
            w.ty.name(),
            format!("{}x{}", w.rows, w.cols),
            secs * 1e6,
            100.0 * gbs / copy_gbs
        );
        Ok(())
    }
}

/// Deterministic values in [-1, 1) for synthetic weights (no RNG dependency).
fn synthetic(n: usize) -> Vec<f32> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

pub fn run(
    model: &mut Model,
    file: &GgufFile,
    src: &dyn ByteSource,
    tok: &TextTokenizer,
    prompt_tokens: usize,
    gen_tokens: usize,
    profile: bool,
) -> Result<()> {
    let ctx = model.gpu().clone();
    println!("adapter: {}", ctx.adapter);

    let bytes = (64u64 << 20).min(ctx.limits.max_storage_buffer_binding_size / 2);
    let copy_src = ctx.storage_buffer("bench src", bytes, wgpu::BufferUsages::empty())?;
    let dst = ctx.storage_buffer("bench dst", bytes, wgpu::BufferUsages::empty())?;
    let copy = ops::copy::copy(&ctx, &copy_src, &dst, (bytes / 16) as u32)?;
    // Prefill: one step of the model's batch size, each weight reused across the tile.
    let batch = model.max_batch;
    let bench = Matvec {
        ctx: &ctx,
        copy,
        copy_bytes: bytes,
        batch,
        step: ops::step_buffer(&ctx),
        prefill_step: ops::step_buffer(&ctx),
    };
    ops::write_step(&ctx, &bench.step, Step::new(1, 0));
    ops::write_step(&ctx, &bench.prefill_step, Step::new(batch, 0));
    println!(
        "copy kernel: {:.2} GB/s (read + write of {} MiB; timed again before each matrix)",
        bench.copy_gbs()?,
        bytes >> 20
    );
    println!(
        "decode: 1 token; prefill: {batch} tokens in tiles of {}, time per token, weight bytes once per tile",
        ops::matvec::PREFILL_TILE
    );
    bench.header("matvec (model)");
    let mut seen = std::collections::HashSet::new();
    let names: Vec<&str> = [
        "blk.0.attn_q.weight",
        "blk.0.attn_k.weight",
        "blk.0.attn_output.weight",
        "blk.0.ffn_gate.weight",
        "blk.0.ffn_down.weight",
        "output.weight",
        "token_embd.weight",
    ]
    .into();
    for name in names {
        let Some(t) = file.tensor(name) else { continue };
        if name == "token_embd.weight" && file.tensor("output.weight").is_some() {
            continue;
        }
        if !seen.insert((t.ty, t.rows(), t.cols())) {
            continue;
        }
        let raw = file.tensor_bytes(src, t)?;
        let w = GpuWeight::upload(&ctx, name, t.ty, t.rows(), t.cols(), &raw, None)?;
        // The output head only runs for the last token, so its prefill is not timed.
        let short = name.trim_end_matches(".weight");
        bench.row(short, &w, t.n_bytes(), name.starts_with("blk."))?;
    }

    // Every weight type on one synthetic shape (columns in whole K-quant super-blocks).
    let (rows, cols) = (1536u64, 1536u64);
    bench.header("matvec (synthetic)");
    let data = synthetic((rows * cols) as usize);
    for &ty in lilypad_engine::weights::SUPPORTED {
        let raw = lilypad_gguf::quantize(ty, &data)?;
        let w = GpuWeight::upload(&ctx, "synthetic", ty, rows, cols, &raw, None)?;
        bench.row("synthetic", &w, raw.len() as u64, true)?;
    }

    // Whole model: a real-text prompt of the requested length.
    let seed_text = "The quick brown fox jumps over the lazy dog. ";
    let mut prompt = tok.encode(&seed_text.repeat(prompt_tokens / 8 + 1), true)?;
    prompt.truncate(
        prompt_tokens
            .min(model.context as usize - gen_tokens - 1)
            .max(1),
    );
    // One extra token for `generate` to feed on top of the timed prefill, so the prefilled
    // state is extended rather than rewound (recurrent models cannot rewind, so `generate`
    // over the same prompt would prefill it all again).
    prompt.push(prompt[prompt.len() - 1]);
    let prefilled = &prompt[..prompt.len() - 1];
    model.reset();
    let t = Instant::now();
    pollster::block_on(model.eval(prefilled, Logits::Last))?;
    let prefill = t.elapsed().as_secs_f64();
    let prefilled = prefilled.len();
    println!(
        "prefill: {} tokens in {:.2} s = {:.1} tok/s",
        prefilled,
        prefill,
        prefilled as f64 / prefill
    );
    // Decode below starts from this state (a snapshot: recurrent models cannot rewind).
    let state = pollster::block_on(model.snapshot())?;
    // The same prompt read as a stoppable prompt is (steps sized by their measured cost,
    // each reported before the next is queued): what that costs against all at once.
    model.reset();
    let mut steps = 0;
    let t = Instant::now();
    pollster::block_on(model.prefill(&prompt[..prefilled], &mut |_| {
        steps += 1;
        true
    }))?;
    let stoppable = t.elapsed().as_secs_f64();
    println!(
        "prefill in reported steps: {:.2} s = {:.1} tok/s ({:.2}x all at once), {steps} steps, \
         {:.2} s between reports",
        stoppable,
        prefilled as f64 / stoppable,
        prefill / stoppable,
        stoppable / steps.max(1) as f64,
    );
    // Decode with each depth of queued steps, from the same prefilled state: depth 1 reads
    // every token back before the next step.
    let greedy = SamplingParams::greedy();
    let mut base = None;
    let mut texts = Vec::new();
    let mut walls = Vec::new();
    let default_depth = model.decode_depth();
    for depth in [1, 2, 4] {
        model.restore(&state)?;
        model.set_decode_depth(depth)?;
        let mut stamps = Vec::new();
        let generation = pollster::block_on(model.generate(
            &prompt,
            &greedy,
            gen_tokens + 1,
            &|_| false,
            &mut |_| {
                stamps.push(Instant::now());
                true
            },
        ))?;
        texts.push(generation.tokens);
        let decode = if stamps.len() > 1 {
            (stamps[stamps.len() - 1] - stamps[0]).as_secs_f64() / (stamps.len() - 1) as f64
        } else {
            f64::NAN
        };
        walls.push((depth, decode));
        let ratio = *base.get_or_insert(decode) / decode;
        let stats = model.decode_stats();
        let per_step = |s: f64| s * 1e3 / stats.steps.max(1) as f64;
        println!(
            "decode:  {} tokens, {:.1} ms/token = {:.1} tok/s (depth {depth}: {ratio:.2}x depth 1; \
             host recording {:.2} ms/token = {:.1} %, waiting {:.1} ms/token)",
            stamps.len().saturating_sub(1),
            decode * 1e3,
            1.0 / decode,
            per_step(stats.recording),
            100.0 * per_step(stats.recording) / (decode * 1e3),
            per_step(stats.waiting),
        );
    }
    if texts.windows(2).any(|w| w[0] != w[1]) {
        println!("warning: the depths decoded different greedy tokens");
    }
    model.set_decode_depth(default_depth)?;
    println!("GPU memory: {} at context {}", model.plan, model.context);
    if profile {
        // A decode step where the last generation ended, then a prefill step from the start.
        let decode = pollster::block_on(model.profile_step(&prompt[..1]))?;
        let batch = (model.max_batch as usize).min(prompt.len() - 1);
        model.reset();
        let prefill = pollster::block_on(model.profile_step(&prompt[..batch]))?;
        print_profile(&format!("prefill step ({batch} tokens)"), &prefill);
        print_profile("decode step (1 token)", &decode);
        if decode.timestamps {
            for (depth, wall) in walls {
                println!(
                    "decode at depth {depth}: kernels {:.1} ms of {:.1} ms per token, host overhead {:.1} %",
                    decode.span * 1e3,
                    wall * 1e3,
                    100.0 * (1.0 - decode.span / wall)
                );
            }
        }
    }
    Ok(())
}

/// Per-kernel times of one step.
fn print_profile(what: &str, p: &StepProfile) {
    let total: f64 = p.kernels.iter().map(|t| t.1).sum();
    let how = if p.timestamps {
        "GPU timestamps between the dispatches of one step"
    } else {
        "each dispatch submitted and waited for alone, so submission costs are included"
    };
    println!(
        "profile of a {what}: {:.1} ms of kernels ({how})",
        total * 1e3
    );
    for (kernel, t) in &p.kernels {
        println!(
            "  {kernel:24} {:10.2} ms {:5.1} %",
            t * 1e3,
            100.0 * t / total
        );
    }
}

/// `lilypad bench --batch 1,2,4,8`: total decode tokens/s with B sequences decoded together,
/// measured in one run. Each B starts from one prefilled prompt forked into B slots (the
/// fork is timed too), then `gen_tokens` batched greedy steps.
pub fn run_batch(
    model: &mut Model,
    tok: &TextTokenizer,
    sizes: &[u32],
    prompt_tokens: usize,
    gen_tokens: usize,
) -> Result<()> {
    let ctx = model.gpu().clone();
    println!("adapter: {}", ctx.adapter);
    let seed_text = "The quick brown fox jumps over the lazy dog. ";
    let mut prompt = tok.encode(&seed_text.repeat(prompt_tokens / 8 + 1), true)?;
    let room = (model.context as usize)
        .saturating_sub(gen_tokens + 2)
        .max(1);
    prompt.truncate(prompt_tokens.min(room).max(1));
    let greedy = SamplingParams::greedy();
    println!(
        "prompt {} tokens, {gen_tokens} decode steps per batch size; GPU memory: {}",
        prompt.len(),
        model.plan
    );
    println!(
        "{:>5} {:>10} {:>12} {:>12} {:>14} {:>9}",
        "batch", "fork ms", "ms/step", "tok/s", "tok/s per seq", "vs B=1"
    );
    let mut base = None;
    for &b in sizes {
        for s in 0..model.sequences() {
            model.release(s);
        }
        pollster::block_on(model.eval_sequence(0, &prompt, Logits::None))?;
        ctx.wait()?;
        let t = Instant::now();
        for s in 1..b {
            model.fork(0, s)?;
        }
        ctx.wait()?;
        let fork_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut next: Vec<u32> = vec![prompt[prompt.len() - 1]; b as usize];
        let histories: Vec<Vec<u32>> = vec![prompt.clone(); b as usize];
        // One untimed step (pipelines, first-use costs), then the timed ones.
        let mut step = |next: &mut Vec<u32>| -> Result<()> {
            let items: Vec<BatchToken> = (0..b)
                .map(|s| BatchToken {
                    seq: s,
                    token: next[s as usize],
                    params: &greedy,
                    u: 0.0,
                    history: &histories[s as usize],
                })
                .collect();
            *next = pollster::block_on(model.sample_batch(&items))?;
            Ok(())
        };
        step(&mut next)?;
        let t = Instant::now();
        for _ in 0..gen_tokens {
            step(&mut next)?;
        }
        let secs = t.elapsed().as_secs_f64();
        let tps = (b as usize * gen_tokens) as f64 / secs;
        let ratio = tps / *base.get_or_insert(tps);
        println!(
            "{b:>5} {fork_ms:>10.2} {:>12.1} {tps:>12.1} {:>14.1} {ratio:>8.2}x",
            secs * 1e3 / gen_tokens as f64,
            tps / b as f64
        );
    }
    Ok(())
}
