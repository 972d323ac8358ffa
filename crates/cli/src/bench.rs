//! `lilypad bench`: kernel bandwidth against a copy kernel on the same adapter, the same
//! matrices in prefill (per token, over a prefill step's worth of tokens), then whole-model
//! prefill and decode speed. Wall-clock timing after a full device wait.

use std::time::Instant;

use anyhow::Result;
use lilypad_engine::kernels::Dispatch;
use lilypad_engine::ops::{self, Step};
use lilypad_engine::weights::GpuWeight;
use lilypad_engine::{GpuContext, Logits, Model, SamplingParams};
use lilypad_gguf::{ByteSource, GgufFile};
use lilypad_tokenizer::TextTokenizer;

const REPS: usize = 20;

/// Seconds per run of `ds` for `tokens` tokens, recorded `REPS` times into one pass (after one
/// warm-up).
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
    Ok(once(REPS)? / REPS as f64)
}

pub fn run(
    model: &mut Model,
    file: &GgufFile,
    src: &dyn ByteSource,
    tok: &TextTokenizer,
    prompt_tokens: usize,
    gen_tokens: usize,
) -> Result<()> {
    let ctx = model.gpu().clone();
    println!("adapter: {}", ctx.adapter);

    let bytes = (64u64 << 20).min(ctx.limits.max_storage_buffer_binding_size / 2);
    let copy_src = ctx.storage_buffer("bench src", bytes, wgpu::BufferUsages::empty())?;
    let dst = ctx.storage_buffer("bench dst", bytes, wgpu::BufferUsages::empty())?;
    let copy = ops::copy::copy(&ctx, &copy_src, &dst, (bytes / 16) as u32)?;
    let copy_gbs = 2.0 * bytes as f64 / time(&ctx, std::slice::from_ref(&copy), 1)? / 1e9;
    println!(
        "copy kernel: {copy_gbs:.2} GB/s (read + write of {} MiB)",
        bytes >> 20
    );

    // Prefill: one step of the model's batch size, each weight reused across the tile.
    let batch = model.max_batch;
    println!(
        "{:<24} {:>6} {:>13} {:>9} {:>9} {:>8} {:>13} {:>8}",
        "matvec (decode: 1 token)",
        "type",
        "shape",
        "µs",
        "GB/s",
        "vs copy",
        "prefill µs/t",
        "speedup"
    );
    println!("(prefill: {batch} tokens per step, time per token; speedup over decode)");
    let step = ops::step_buffer(&ctx);
    ops::write_step(&ctx, &step, Step::new(1, 0));
    let prefill_step = ops::step_buffer(&ctx);
    ops::write_step(&ctx, &prefill_step, Step::new(batch, 0));
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
        let n = batch as u64;
        let x = ctx.storage_buffer("bench x", n * t.cols() * 4, wgpu::BufferUsages::empty())?;
        let y = ctx.storage_buffer("bench y", n * t.rows() * 4, wgpu::BufferUsages::empty())?;
        let rows = t.rows() as u32;
        let ds = ops::matvec::matvec(&ctx, &w, &x, &y, rows, &step, 1, false, false)?;
        let secs = time(&ctx, &ds, 1)?;
        let gbs = t.n_bytes() as f64 / secs / 1e9;
        // The output head only runs for the last token, so its prefill is not timed.
        let prefill = if name.starts_with("blk.") {
            let tile = ops::matvec::PREFILL_TILE;
            let ds =
                ops::matvec::matvec(&ctx, &w, &x, &y, rows, &prefill_step, tile, false, false)?;
            let per_token = time(&ctx, &ds, batch)? / batch as f64;
            format!("{:>13.1} {:>7.1}x", per_token * 1e6, secs / per_token)
        } else {
            String::new()
        };
        println!(
            "{:<24} {:>6} {:>13} {:>9.1} {:>9.2} {:>7.0}% {prefill}",
            name.trim_end_matches(".weight"),
            t.ty.name(),
            format!("{}x{}", t.rows(), t.cols()),
            secs * 1e6,
            gbs,
            100.0 * gbs / copy_gbs
        );
    }

    // Whole model: a real-text prompt of the requested length.
    let seed_text = "The quick brown fox jumps over the lazy dog. ";
    let mut prompt = tok.encode(&seed_text.repeat(prompt_tokens / 8 + 1), true)?;
    prompt.truncate(
        prompt_tokens
            .min(model.context as usize - gen_tokens - 1)
            .max(1),
    );
    model.reset();
    let t = Instant::now();
    pollster::block_on(model.eval(&prompt, Logits::Last))?;
    let prefill = t.elapsed().as_secs_f64();
    let mut stamps = Vec::new();
    let greedy = SamplingParams::greedy();
    pollster::block_on(
        model.generate(&prompt, &greedy, gen_tokens + 1, &|_| false, &mut |_| {
            stamps.push(Instant::now());
            true
        }),
    )?;
    let decode = if stamps.len() > 1 {
        (stamps[stamps.len() - 1] - stamps[0]).as_secs_f64() / (stamps.len() - 1) as f64
    } else {
        f64::NAN
    };
    println!(
        "prefill: {} tokens in {:.2} s = {:.1} tok/s",
        prompt.len(),
        prefill,
        prompt.len() as f64 / prefill
    );
    println!(
        "decode:  {} tokens, {:.1} ms/token = {:.1} tok/s",
        stamps.len().saturating_sub(1),
        decode * 1e3,
        1.0 / decode
    );
    println!("GPU memory: {} at context {}", model.plan, model.context);
    Ok(())
}
