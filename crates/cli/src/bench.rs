//! `lilypad bench`: kernel bandwidth against a copy kernel on the same adapter, the same
//! matrices in prefill (per token, over a prefill step's worth of tokens), then whole-model
//! prefill and decode speed. Wall-clock timing after a full device wait.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use lilypad_engine::kernels::Dispatch;
use lilypad_engine::ops::{self, Step};
use lilypad_engine::weights::GpuWeight;
use lilypad_engine::{BatchToken, GpuContext, KernelTimes, Logits, Model, SamplingParams};
use lilypad_gguf::{ByteSource, GgufFile};
use lilypad_tokenizer::TextTokenizer;
use serde::Serialize;

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
    fn row(&self, name: &str, w: &GpuWeight, bytes: u64, prefill: bool) -> Result<MatvecRow> {
        let (ctx, batch) = (self.ctx, self.batch as u64);
        let copy_gbs = self.copy_gbs()?;
        let x = ctx.storage_buffer("bench x", batch * w.cols * 4, wgpu::BufferUsages::empty())?;
        let y = ctx.storage_buffer("bench y", batch * w.rows * 4, wgpu::BufferUsages::empty())?;
        let rows = w.rows as u32;
        let ds = ops::matvec::matvec(ctx, w, &x, &y, rows, &self.step, 1, false)?;
        let secs = time(ctx, &ds, 1)?;
        let gbs = bytes as f64 / secs / 1e9;
        let mut figures = MatvecRow {
            name: name.to_string(),
            ty: w.ty.name().to_string(),
            shape: [w.rows, w.cols],
            copy_gbs,
            decode_us: secs * 1e6,
            decode_gbs: gbs,
            prefill_us_per_token: None,
            prefill_gbs: None,
        };
        let prefill = if prefill {
            let tile = ops::matvec::PREFILL_TILE;
            let ds = ops::matvec::matvec(ctx, w, &x, &y, rows, &self.prefill_step, tile, false)?;
            let secs = time(ctx, &ds, self.batch)?;
            let gbs = (bytes * batch.div_ceil(tile as u64)) as f64 / secs / 1e9;
            let us_per_token = secs * 1e6 / batch as f64;
            figures.prefill_us_per_token = Some(us_per_token);
            figures.prefill_gbs = Some(gbs);
            format!(
                "{us_per_token:>11.1} {gbs:>7.2} {:>6.0}%",
                100.0 * gbs / copy_gbs
            )
        } else {
            String::new()
        };
        println!(
            "{:<24} {:>6} {:>11} {copy_gbs:>6.2} {:>9.1} {gbs:>7.2} {:>6.0}% {prefill}",
            name,
            figures.ty,
            format!("{}x{}", w.rows, w.cols),
            figures.decode_us,
            100.0 * gbs / copy_gbs
        );
        Ok(figures)
    }
}

/// One matrix's figures in `--json`.
#[derive(Serialize)]
struct MatvecRow {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    shape: [u64; 2],
    copy_gbs: f64,
    decode_us: f64,
    decode_gbs: f64,
    prefill_us_per_token: Option<f64>,
    prefill_gbs: Option<f64>,
}

/// One depth of queued decode steps in `--json`.
#[derive(Serialize)]
struct DecodeRow {
    depth: u32,
    tokens: usize,
    ms_per_token: f64,
    tokens_per_s: f64,
    host_recording_ms_per_token: f64,
}

/// What `lilypad bench --json FILE` writes: every figure the run printed.
#[derive(Serialize, Default)]
struct Report {
    adapter: String,
    model: String,
    copy_gbs: f64,
    /// One small dispatch alone, in µs: the floor under every kernel of a step.
    dispatch_us: f64,
    matvec: Vec<MatvecRow>,
    prefill_tokens: usize,
    prefill_tokens_per_s: f64,
    prefill_in_steps_tokens_per_s: f64,
    decode: Vec<DecodeRow>,
    /// The depth generation uses on this adapter, whose decode speed is compared.
    default_depth: u32,
    gpu_memory_bytes: u64,
    context: u32,
    llama_cpp: Option<LlamaCpp>,
    /// lilypad over llama.cpp, both measured in this run.
    prefill_vs_llama_cpp: Option<f64>,
    decode_vs_llama_cpp: Option<f64>,
    /// llama.cpp's Vulkan backend, and lilypad over it.
    llama_cpp_vulkan: Option<LlamaCpp>,
    prefill_vs_llama_cpp_vulkan: Option<f64>,
    decode_vs_llama_cpp_vulkan: Option<f64>,
    /// Decode with `--draft`, from the same state as the plain rows.
    speculative: Option<SpeculativeRow>,
    /// Decode at the default depth sampling as the agent does (temperature 0.6, top-k 20,
    /// top-p 0.95), from the same state: what sampling adds to a greedy step.
    sampled_ms_per_token: f64,
}

/// Greedy decode with a draft (`--draft`), against plain decode at the default depth.
#[derive(Serialize)]
struct SpeculativeRow {
    draft: String,
    tokens: usize,
    tokens_per_s: f64,
    vs_plain: f64,
    steps: usize,
    drafted: usize,
    accepted: usize,
    /// Whether its tokens were plain decoding's (they must be, up to a near-tie of the
    /// logits, which a step of several tokens computes in another order).
    same_tokens: bool,
}

/// llama.cpp's `llama-bench` on the same file, in the same run.
#[derive(Serialize, Debug)]
pub struct LlamaCpp {
    build_commit: String,
    backends: String,
    threads: u32,
    prefill_tokens: usize,
    prefill_tokens_per_s: f64,
    decode_tokens: usize,
    /// Tokens in the context before the decoded ones (`llama-bench -d`).
    decode_after: usize,
    decode_tokens_per_s: f64,
    /// Whether llama.cpp's extra CPU buffer types (AMX, repacked weights) were on.
    repack: bool,
    /// The device a GPU backend ran on, as llama.cpp names it (empty on the CPU backend).
    gpu_info: String,
}

/// What `bench` measures, against what, and where it writes.
pub struct Options {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    /// Also time each kernel of one prefill step and one decode step.
    pub profile: bool,
    /// The model as given (`--llama-bench` needs a local file).
    pub model_path: String,
    pub llama_bench: Option<PathBuf>,
    /// llama.cpp's Vulkan build, run with every layer on the GPU (the same adapter as lilypad's
    /// where there is one Vulkan device, or a CPU one: lavapipe).
    pub llama_bench_vulkan: Option<PathBuf>,
    pub json: Option<PathBuf>,
}

impl Options {
    /// What `--llama-bench` needs, checked before minutes of measuring rather than after.
    fn check(&self) -> Result<()> {
        let runs = [
            ("--llama-bench", &self.llama_bench),
            ("--llama-bench-vulkan", &self.llama_bench_vulkan),
        ];
        for (flag, bin) in runs {
            let Some(bin) = bin else { continue };
            if !Path::new(&self.model_path).is_file() {
                bail!(
                    "{flag} needs the model as a local GGUF file (got {})",
                    self.model_path
                );
            }
            if !bin.is_file() {
                bail!("{flag}: no llama-bench at {}", bin.display());
            }
        }
        Ok(())
    }
}

/// Which of llama.cpp's backends a `llama-bench` build runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LlamaBackend {
    Cpu,
    /// Every layer offloaded. `cpu_device`: lilypad runs on a CPU adapter, which llama.cpp's
    /// Vulkan backend skips unless told to take device 0 (GGML_VK_VISIBLE_DEVICES).
    Vulkan {
        cpu_device: bool,
    },
}

/// Runs `llama-bench` (all cores) on `model` with the same prompt and generation lengths,
/// three repetitions, and reads its JSON.
fn llama_bench(
    bin: &Path,
    backend: LlamaBackend,
    model: &str,
    prompt: usize,
    gen_tokens: usize,
) -> Result<LlamaCpp> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run = |args: &[&str], repack: bool| {
        let mut command = Command::new(bin);
        command
            .args(["-m", model, "-o", "json", "-r", "3"])
            .args(["-t", &threads.to_string()])
            .args(args)
            .args(if repack {
                &[][..]
            } else {
                &["--repack", "0"][..]
            });
        if let LlamaBackend::Vulkan { cpu_device } = backend {
            command.args(["-ngl", "99"]);
            if cpu_device && std::env::var_os("GGML_VK_VISIBLE_DEVICES").is_none() {
                command.env("GGML_VK_VISIBLE_DEVICES", "0");
            }
        }
        command
            .output()
            .with_context(|| format!("could not run llama-bench at {}", bin.display()))
    };
    let (p, g) = (prompt.to_string(), gen_tokens.to_string());
    // The prompt from an empty context, then decode after a context of the prompt's length,
    // as lilypad's decode runs after its prompt.
    let tests: [&[&str]; 2] = [&["-p", &p, "-n", "0"], &["-p", "0", "-n", &g, "-d", &p]];
    let mut repack = true;
    let mut outputs = Vec::new();
    for args in tests {
        let mut out = run(args, repack)?;
        if !out.status.success()
            && out.status.code().is_none()
            && repack
            && backend == LlamaBackend::Cpu
        {
            // Killed by a signal: on some VMs the CPU reports AMX but the kernel does not let
            // a process use it, and llama.cpp's AMX buffer type crashes. Its extra buffer
            // types (AMX, repacked weights) off, the plain CPU kernels run.
            repack = false;
            out = run(args, repack)?;
        }
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!("llama-bench failed ({}): {}", out.status, tail.join(" / "));
        }
        outputs.push(out.stdout);
    }
    let outputs: Vec<&[u8]> = outputs.iter().map(Vec::as_slice).collect();
    let mut figures = parse_llama_bench(&outputs)?;
    figures.repack = repack;
    Ok(figures)
}

/// The prefill (`pp`) and decode (`tg`) tests of `llama-bench -o json`'s outputs.
fn parse_llama_bench(outputs: &[&[u8]]) -> Result<LlamaCpp> {
    #[derive(serde::Deserialize)]
    struct Test {
        build_commit: String,
        #[serde(default)]
        backends: String,
        n_threads: u32,
        n_prompt: usize,
        n_gen: usize,
        #[serde(default)]
        n_depth: usize,
        avg_ts: f64,
        #[serde(default)]
        gpu_info: String,
    }
    let mut tests: Vec<Test> = Vec::new();
    for json in outputs {
        let more: Vec<Test> =
            serde_json::from_slice(json).context("llama-bench's JSON output did not parse")?;
        tests.extend(more);
    }
    let pick = |prefill: bool| {
        tests
            .iter()
            .find(|t| {
                if prefill {
                    t.n_prompt > 0 && t.n_gen == 0
                } else {
                    t.n_prompt == 0 && t.n_gen > 0
                }
            })
            .with_context(|| {
                format!(
                    "llama-bench reported no {} test",
                    if prefill { "prompt" } else { "generation" }
                )
            })
    };
    let (pp, tg) = (pick(true)?, pick(false)?);
    Ok(LlamaCpp {
        build_commit: pp.build_commit.clone(),
        backends: pp.backends.clone(),
        threads: pp.n_threads,
        prefill_tokens: pp.n_prompt,
        prefill_tokens_per_s: pp.avg_ts,
        decode_tokens: tg.n_gen,
        decode_after: tg.n_depth,
        decode_tokens_per_s: tg.avg_ts,
        repack: true,
        gpu_info: pp.gpu_info.clone(),
    })
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
    options: &Options,
) -> Result<()> {
    options.check()?;
    let (prompt_tokens, gen_tokens) = (options.prompt_tokens, options.gen_tokens);
    let ctx = model.gpu().clone();
    println!("adapter: {}", ctx.adapter);
    let mut report = Report {
        adapter: ctx.adapter.to_string(),
        model: options.model_path.clone(),
        context: model.context,
        ..Default::default()
    };

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
    report.copy_gbs = bench.copy_gbs()?;
    println!(
        "copy kernel: {:.2} GB/s (read + write of {} MiB; timed again before each matrix)",
        report.copy_gbs,
        bytes >> 20
    );
    // What a dispatch costs by itself: one workgroup copying 4 KiB, many times in one pass.
    const TINY: usize = 20;
    let tiny = (0..TINY)
        .map(|_| ops::copy::copy(&ctx, &copy_src, &dst, 256))
        .collect::<lilypad_engine::Result<Vec<_>>>()?;
    report.dispatch_us = time(&ctx, &tiny, 1)? / TINY as f64 * 1e6;
    println!(
        "dispatch: {:.1} µs each (one workgroup copying 4 KiB, {} in one pass)",
        report.dispatch_us,
        TINY * REPS
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
        report
            .matvec
            .push(bench.row(short, &w, t.n_bytes(), name.starts_with("blk."))?);
    }

    // Every weight type on one synthetic shape (columns in whole K-quant super-blocks).
    let (rows, cols) = (1536u64, 1536u64);
    bench.header("matvec (synthetic)");
    let data = synthetic((rows * cols) as usize);
    for &ty in lilypad_engine::weights::SUPPORTED {
        let raw = lilypad_gguf::quantize(ty, &data)?;
        let w = GpuWeight::upload(&ctx, "synthetic", ty, rows, cols, &raw, None)?;
        report
            .matvec
            .push(bench.row("synthetic", &w, raw.len() as u64, true)?);
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
    // One untimed pass first: the prompt's steps create their pipelines on first use.
    model.reset();
    pollster::block_on(model.eval(prefilled, Logits::Last))?;
    model.reset();
    let t = Instant::now();
    pollster::block_on(model.eval(prefilled, Logits::Last))?;
    let prefill = t.elapsed().as_secs_f64();
    let prefilled = prefilled.len();
    report.prefill_tokens = prefilled;
    report.prefill_tokens_per_s = prefilled as f64 / prefill;
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
    report.prefill_in_steps_tokens_per_s = prefilled as f64 / stoppable;
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
    report.default_depth = default_depth;
    // The plain rows decode without the draft; it gets a row of its own after them.
    let draft = model.draft();
    model.set_draft(None)?;
    // A greedy generation from the prefilled state: its tokens, how many came after the
    // first, and the seconds per token after the first (what the prompt's step does not
    // include).
    let timed = |model: &mut Model, sampling: &SamplingParams| -> Result<(Vec<u32>, usize, f64)> {
        model.restore(&state)?;
        let mut stamps = Vec::new();
        let generation = pollster::block_on(model.generate(
            &prompt,
            sampling,
            gen_tokens + 1,
            &|_| false,
            &mut |_| {
                stamps.push(Instant::now());
                true
            },
        ))?;
        let decoded = stamps.len().saturating_sub(1);
        let per_token = match (stamps.first(), stamps.last()) {
            (Some(first), Some(last)) if decoded > 0 => {
                (*last - *first).as_secs_f64() / decoded as f64
            }
            _ => f64::NAN,
        };
        Ok((generation.tokens, decoded, per_token))
    };
    for depth in [1, 2, 4] {
        model.set_decode_depth(depth)?;
        let (tokens, decoded, decode) = timed(model, &greedy)?;
        texts.push(tokens);
        walls.push((depth, decode));
        let ratio = *base.get_or_insert(decode) / decode;
        let stats = model.decode_stats();
        let per_step = |s: f64| s * 1e3 / stats.steps.max(1) as f64;
        report.decode.push(DecodeRow {
            depth,
            tokens: decoded,
            ms_per_token: decode * 1e3,
            tokens_per_s: 1.0 / decode,
            host_recording_ms_per_token: per_step(stats.recording),
        });
        println!(
            "decode:  {} tokens, {:.1} ms/token = {:.1} tok/s (depth {depth}: {ratio:.2}x depth 1; \
             host recording {:.2} ms/token = {:.1} %, waiting {:.1} ms/token)",
            decoded,
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
    let agent = SamplingParams {
        temperature: 0.6,
        top_k: 20,
        top_p: 0.95,
        seed: 1,
        ..SamplingParams::greedy()
    };
    let (_, decoded, sampled) = timed(model, &agent)?;
    let greedy_ms = walls
        .iter()
        .find(|(d, _)| *d == default_depth)
        .map_or(f64::NAN, |(_, s)| s * 1e3);
    report.sampled_ms_per_token = sampled * 1e3;
    println!(
        "decode sampled (temperature 0.6, top-k 20, top-p 0.95; depth {default_depth}): {decoded} tokens, \
         {:.1} ms/token ({:+.1} ms/token against greedy)",
        sampled * 1e3,
        sampled * 1e3 - greedy_ms,
    );
    if let Some(draft) = draft {
        model.set_draft(Some(draft))?;
        let (tokens, decoded, per_token) = timed(model, &greedy)?;
        let plain = report.decode.iter().find(|d| d.depth == default_depth);
        let tokens_per_s = 1.0 / per_token;
        let s = model.speculative_stats();
        let row = SpeculativeRow {
            draft: draft.to_string(),
            tokens: decoded,
            tokens_per_s,
            vs_plain: plain.map_or(f64::NAN, |p| tokens_per_s / p.tokens_per_s),
            steps: s.steps,
            drafted: s.drafted,
            accepted: s.accepted,
            same_tokens: tokens == texts[0],
        };
        println!(
            "decode with draft {}: {} tokens, {:.1} tok/s ({:.2}x plain at depth {default_depth}); \
             {} of {} drafted tokens kept, {:.2} tokens per step{}",
            row.draft,
            row.tokens,
            row.tokens_per_s,
            row.vs_plain,
            row.accepted,
            row.drafted,
            s.tokens as f64 / s.steps.max(1) as f64,
            if row.same_tokens {
                ""
            } else {
                "; warning: other tokens than plain decoding"
            },
        );
        report.speculative = Some(row);
    }
    println!("GPU memory: {} at context {}", model.plan, model.context);
    report.gpu_memory_bytes = model.plan.total();
    let runs = [
        (&options.llama_bench, LlamaBackend::Cpu),
        (
            &options.llama_bench_vulkan,
            LlamaBackend::Vulkan {
                cpu_device: ctx.adapter.device_type == "Cpu",
            },
        ),
    ];
    for (bin, backend) in runs {
        let Some(bin) = bin else { continue };
        let l = llama_bench(bin, backend, &options.model_path, prefilled, gen_tokens)?;
        let ours = report.decode.iter().find(|d| d.depth == default_depth);
        let decode_ratio = ours.map(|d| d.tokens_per_s / l.decode_tokens_per_s);
        let prefill_ratio = report.prefill_tokens_per_s / l.prefill_tokens_per_s;
        let device = if l.gpu_info.is_empty() {
            String::new()
        } else {
            format!(" on {}", l.gpu_info)
        };
        println!(
            "llama.cpp {} ({}{device}, {} threads{}), same file: prefill {} tokens {:.1} tok/s, decode {} tokens after {} {:.1} tok/s",
            l.build_commit,
            l.backends,
            l.threads,
            if l.repack {
                ""
            } else {
                ", without AMX and repacked weights, which crashed here"
            },
            l.prefill_tokens,
            l.prefill_tokens_per_s,
            l.decode_tokens,
            l.decode_after,
            l.decode_tokens_per_s
        );
        println!(
            "lilypad / llama.cpp {}: prefill {prefill_ratio:.2}x, decode {}x (depth {default_depth})",
            l.backends,
            decode_ratio.map_or("–".into(), |r| format!("{r:.2}"))
        );
        if backend == LlamaBackend::Cpu {
            report.prefill_vs_llama_cpp = Some(prefill_ratio);
            report.decode_vs_llama_cpp = decode_ratio;
            report.llama_cpp = Some(l);
        } else {
            report.prefill_vs_llama_cpp_vulkan = Some(prefill_ratio);
            report.decode_vs_llama_cpp_vulkan = decode_ratio;
            report.llama_cpp_vulkan = Some(l);
        }
    }
    if options.profile {
        // A decode step where the last generation ended, then a prefill step from the start.
        let decode = pollster::block_on(model.profile_step(&prompt[..1]))?;
        let batch = (model.max_batch as usize).min(prompt.len() - 1);
        model.reset();
        let prefill = pollster::block_on(model.profile_step(&prompt[..batch]))?;
        print_profile(&format!("prefill step ({batch} tokens)"), &prefill);
        // The prompt's last step, where its attention reads every earlier position.
        let depth = prompt.len() - batch;
        if depth > batch {
            model.reset();
            pollster::block_on(model.prefill(&prompt[..depth], &mut |_| true))?;
            let last = pollster::block_on(model.profile_step(&prompt[depth..]))?;
            print_profile(
                &format!("prefill step ({batch} tokens after {depth})"),
                &last,
            );
        }
        print_profile("decode step (1 token)", &decode);
        let dispatches = decode.dispatches();
        println!(
            "decode step: {dispatches} dispatches, {:.1} ms of them at {:.1} µs each before any work",
            dispatches as f64 * report.dispatch_us / 1e3,
            report.dispatch_us
        );
        if decode.timestamps {
            for (depth, wall) in walls {
                println!(
                    "decode at depth {depth}: kernels {:.1} ms of {:.1} ms per token, host overhead {:.1} %",
                    decode.total() * 1e3,
                    wall * 1e3,
                    100.0 * (1.0 - decode.total() / wall)
                );
            }
        }
    }
    if let Some(path) = &options.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("could not write {}", path.display()))?;
        println!("figures written to {}", path.display());
    }
    Ok(())
}

/// Per-kernel times of one step.
fn print_profile(what: &str, p: &KernelTimes) {
    print!("profile of a {what}: {p}");
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
    profile: bool,
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
        let step = |model: &mut Model, next: &mut Vec<u32>| -> Result<()> {
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
        step(model, &mut next)?;
        let t = Instant::now();
        for _ in 0..gen_tokens {
            step(model, &mut next)?;
        }
        let secs = t.elapsed().as_secs_f64();
        let tps = (b as usize * gen_tokens) as f64 / secs;
        let ratio = tps / *base.get_or_insert(tps);
        println!(
            "{b:>5} {fork_ms:>10.2} {:>12.1} {tps:>12.1} {:>14.1} {ratio:>8.2}x",
            secs * 1e3 / gen_tokens as f64,
            tps / b as f64
        );
        if profile {
            // One more step, each kernel timed (the samplers are not).
            model.profile_kernels(true);
            step(model, &mut next)?;
            let times = model.take_kernel_times().unwrap_or_default();
            model.profile_kernels(false);
            print_profile(&format!("step of {b} sequences"), &times);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `llama-bench -p 16 -n 8 -r 1 -t 2 --repack 0 -o json` of llama.cpp 0c1e570 on SmolLM2.
    const OUTPUT: &[u8] = include_bytes!("testdata/llama-bench.json");

    #[test]
    fn reads_llama_bench_json() {
        let l = parse_llama_bench(&[OUTPUT]).unwrap();
        assert_eq!(l.build_commit, "0c1e570");
        assert_eq!(l.backends, "CPU");
        assert_eq!(l.threads, 2);
        assert_eq!(
            (l.prefill_tokens, l.decode_tokens, l.decode_after),
            (16, 8, 0)
        );
        assert_eq!(l.prefill_tokens_per_s, 5.454795);
        assert_eq!(l.decode_tokens_per_s, 2.047708);
        assert_eq!(l.gpu_info, "", "the CPU backend names no GPU");
    }

    #[test]
    fn llama_bench_output_without_both_tests_is_an_error() {
        let only_prompt: Vec<serde_json::Value> = serde_json::from_slice(OUTPUT).unwrap();
        let only_prompt = serde_json::to_vec(&only_prompt[..1]).unwrap();
        let err = parse_llama_bench(&[&only_prompt]).unwrap_err().to_string();
        assert!(err.contains("no generation test"), "{err}");
        let err = parse_llama_bench(&[b"llama-bench: error"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("did not parse"), "{err}");
    }
}
