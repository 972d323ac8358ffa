//! `generate` and `chat`: the model as a [`ChatSession`], the path the agent, the browser and
//! the trainer take, so the command line renders, samples and reuses state exactly as they do.

use std::io::{BufRead, Write};

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use lilypad_chat::ChatSession;
use lilypad_cli::{Loaded, ModelArgs};
use lilypad_engine::{Model, ModelOptions};
use lilypad_lm::{Completion, Message, ModelError, PromptProgress, Request, Role, Sampling};

#[derive(Args, Clone)]
pub struct SamplingArgs {
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: u32,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// llama.cpp's repetition penalty over the last 64 tokens (1 = off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Subtracted once from the logit of each of the last 64 tokens (0 = off).
    #[arg(long, default_value_t = 0.0)]
    presence_penalty: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl SamplingArgs {
    fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            seed: self.seed,
            repeat_penalty: self.repeat_penalty,
            presence_penalty: self.presence_penalty,
        }
    }

    /// A request for `messages` with no tools.
    fn request<'a>(
        &self,
        messages: &'a [Message],
        max_tokens: usize,
        no_thinking: bool,
    ) -> Request<'a> {
        Request {
            messages,
            tools: &[],
            sampling: self.sampling(),
            max_tokens,
            enable_thinking: !no_thinking,
        }
    }
}

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, short)]
    prompt: String,
    /// Wrap the prompt in the model's chat template as one user message.
    #[arg(long)]
    chat: bool,
    /// System message for --chat (otherwise the template's default applies).
    #[arg(long)]
    system: Option<String>,
    /// With --chat, tell templates that know the switch (Qwen3) not to think first.
    #[arg(long)]
    no_thinking: bool,
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// Samples of the prompt, decoded together in one batch: the prompt is evaluated
    /// once and its state forked; sample i uses seed + i.
    #[arg(short = 'n', long = "samples", default_value_t = 1)]
    samples: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
}

#[derive(Args)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long)]
    system: Option<String>,
    /// Tell templates that know the switch (Qwen3) not to think before answering.
    #[arg(long)]
    no_thinking: bool,
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
}

fn open_session(args: &ModelArgs, sequences: u32) -> Result<ChatSession> {
    let lm = Loaded::open_with_progress(args, sequences, &mut |_| {})?;
    Ok(ChatSession::new(
        lm.model,
        lm.tok,
        &lilypad_cli::model_name(&args.model),
    )?)
}

/// The system message (when given) and the user's.
fn conversation(system: Option<&str>, user: &str) -> Vec<Message> {
    system
        .map(Message::system)
        .into_iter()
        .chain([Message::user(user)])
        .collect()
}

pub fn generate(args: &GenerateArgs) -> Result<()> {
    let max = ModelOptions::default().max_batch;
    let sequences = u32::try_from(args.samples)
        .ok()
        .filter(|n| (1..=max).contains(n))
        .with_context(|| format!("-n {}: between 1 and {max} samples", args.samples))?;
    if args.samples > 1 && args.model.draft.is_some() {
        bail!(
            "--draft speeds up one sample at a time; -n {} decodes them together",
            args.samples
        );
    }
    let mut session = open_session(&args.model, sequences)?;
    let messages = conversation(args.system.as_deref(), &args.prompt);
    let request = args
        .sampling
        .request(&messages, args.max_tokens, args.no_thinking);
    if args.samples > 1 {
        let samples = if args.chat {
            pollster::block_on(session.complete_many(&request, args.samples))?
        } else {
            pollster::block_on(session.complete_prompt_many(
                &args.prompt,
                request.sampling,
                args.max_tokens,
                args.samples,
            ))?
        };
        return print_samples(&samples, args.model.quiet);
    }
    let completion = stream_reply(args.model.quiet, |on_prompt, on_text| {
        if args.chat {
            pollster::block_on(session.complete_observed(&request, on_prompt, on_text))
        } else {
            pollster::block_on(session.complete_prompt(
                &args.prompt,
                request.sampling,
                args.max_tokens,
                on_prompt,
                on_text,
            ))
            .map(|(completion, _)| completion)
        }
    })?;
    report(&completion, session.model(), args.model.quiet);
    Ok(())
}

/// `generate -n N`: each sample's text under a numbered header.
fn print_samples(samples: &[(Completion, Vec<u32>)], quiet: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    for (i, (completion, _)) in samples.iter().enumerate() {
        writeln!(out, "--- sample {} ({:?}) ---", i + 1, completion.finish)?;
        writeln!(out, "{}", completion.text)?;
    }
    if let (false, Some((first, _))) = (quiet, samples.first()) {
        let generated: usize = samples.iter().map(|(c, _)| c.generated_tokens).sum();
        let seconds = (first.prefill_ms + first.decode_ms) / 1e3;
        eprintln!(
            "[prompt {} tokens once, forked {} times; {} samples, {generated} tokens, {:.1} tok/s]",
            first.prompt_tokens,
            samples.len() - 1,
            samples.len(),
            generated as f64 / seconds.max(1e-9)
        );
    }
    Ok(())
}

pub fn chat(args: &ChatArgs) -> Result<()> {
    let mut session = open_session(&args.model, 1)?;
    let opening: Vec<Message> = args.system.iter().map(Message::system).collect();
    let mut messages = opening.clone();
    eprintln!("chat: type a message; /reset starts over, /exit or Ctrl-D quits");
    let mut lines = std::io::stdin().lock().lines();
    loop {
        eprint!("> ");
        let Some(line) = lines.next() else { break };
        let line = line?;
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                messages.clone_from(&opening);
                session.reset();
                continue;
            }
            _ => {}
        }
        messages.push(Message::user(line));
        let request = args
            .sampling
            .request(&messages, args.max_tokens, args.no_thinking);
        let reply = stream_reply(args.model.quiet, |on_prompt, on_text| {
            pollster::block_on(session.complete_observed(&request, on_prompt, on_text))
        });
        match reply {
            Ok(completion) => {
                report(&completion, session.model(), args.model.quiet);
                messages.push(Message::new(Role::Assistant, completion.text));
            }
            Err(e) => match e.downcast_ref::<ModelError>() {
                // The conversation goes on without the message that did not fit.
                Some(ModelError::ContextFull { .. } | ModelError::PromptTooLong { .. }) => {
                    eprintln!("error: {e}; /reset starts over");
                    messages.pop();
                }
                _ => return Err(e),
            },
        }
    }
    Ok(())
}

/// Runs one reply with its text streamed to stdout and, while a long prompt is read, a
/// progress bar on stderr. Stops generating when stdout is closed (`| head`).
fn stream_reply(
    quiet: bool,
    run: impl FnOnce(
        &mut dyn FnMut(PromptProgress) -> bool,
        &mut dyn FnMut(&str) -> bool,
    ) -> Result<Completion, ModelError>,
) -> Result<Completion> {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("reading the prompt {bar:30} {pos}/{len} tokens")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut out = std::io::stdout().lock();
    let completion = run(
        &mut |p| {
            bar.set_length(p.total as u64);
            bar.set_position(p.done as u64);
            true
        },
        &mut |piece| {
            if !bar.is_finished() {
                bar.finish_and_clear();
            }
            out.write_all(piece.as_bytes()).is_ok() && out.flush().is_ok()
        },
    )?;
    bar.finish_and_clear();
    let _ = writeln!(out);
    Ok(completion)
}

/// Timings on stderr, as prompt and generation speeds.
fn report(c: &Completion, model: &Model, quiet: bool) {
    if quiet {
        return;
    }
    if let Some(draft) = model.draft() {
        let s = model.speculative_stats();
        eprintln!(
            "[draft {draft}: {} of {} drafted tokens kept ({:.0} %), {:.2} tokens per step]",
            s.accepted,
            s.drafted,
            100.0 * s.acceptance(),
            s.tokens as f64 / s.steps.max(1) as f64
        );
    }
    let (prefill, decode) = (c.prefill_ms / 1e3, c.decode_ms / 1e3);
    // The first token comes out of the prompt's last step.
    let decoded = c.generated_tokens.saturating_sub(1);
    eprintln!(
        "[prompt {} tokens ({} reused) in {prefill:.2}s = {:.1} tok/s; generated {} tokens, {:.1} tok/s]",
        c.prefilled_tokens,
        c.prompt_tokens - c.prefilled_tokens,
        c.prefilled_tokens as f64 / prefill.max(1e-9),
        c.generated_tokens,
        decoded as f64 / decode.max(1e-9)
    );
}
