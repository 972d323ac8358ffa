//! `train-native run --config run.toml`: GRPO on a LoRA adapter. Each update draws tasks in a
//! seeded order, samples a group of episodes per task with the current adapter, keeps the
//! groups whose rewards differ (dynamic sampling: a group that all failed or all succeeded is
//! skipped and another task drawn), and takes one AdamW step on them
//! ([`crate::train::Trainer::update`]). After every update it appends a metrics line and
//! writes a checkpoint; a rerun of the same command resumes from it and takes the steps the
//! uninterrupted run would have taken.
//!
//! Task families ([`crate::episodes`]): `reply`, single-turn questions with a verifiable
//! answer, and `agent`, the synthesized bug-fix tasks, each episode a sandboxed multi-turn
//! agent run graded by the project's tests. An episode whose environment fails (not the
//! policy) drops its group from the update; the error goes to episodes.jsonl. A skipped
//! group of agent tasks moves its task's hint level toward the band (online calibration:
//! [`Family::refine`]); the checkpoint keeps the levels.
//!
//! Asynchronous rollouts (`staleness = N`): a sampling thread with its own copy of the model
//! samples update u's groups with the adapter of update u − N while the trainer takes the
//! updates before it ([`Sampler`]); off-policy episodes carry the sampling adapter's
//! log-probabilities for the importance ratio.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use lilypad_chat::ChatSession;
use lilypad_engine::AdamWConfig;
use lilypad_gguf::peft::{LoraAdapter, LoraTensor};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::episodes::{Family, SamplingConfig, TasksConfig};
use crate::grpo::{AdvantageNorm, carries_signal};
use crate::task::{append_line, read_lines};
use crate::train::{Episode, RunState, Schedule, Trainer, UpdateStats, load_checkpoint};

#[derive(Args)]
pub struct RunArgs {
    /// The run's configuration (TOML; see train-native/README.md).
    #[arg(long)]
    config: PathBuf,
    /// Stop after this many updates in all (for a bounded session; a rerun goes on).
    #[arg(long)]
    stop_after: Option<u32>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// The base model (GGUF).
    pub model: PathBuf,
    /// Where checkpoints, metrics and episodes go (relative paths: to the config's folder;
    /// default: `runs/<config name>` in the --dir folder).
    #[serde(default)]
    pub out: Option<PathBuf>,
    pub steps: u32,
    /// Episodes per task (GRPO's G).
    #[serde(default = "default_group")]
    pub group: usize,
    /// Groups with signal per update.
    #[serde(default = "default_groups_per_step")]
    pub groups_per_step: usize,
    /// Tasks drawn per wanted group at most, before an update goes ahead with fewer.
    #[serde(default = "default_max_draws")]
    pub max_draws: usize,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_context")]
    pub context: u32,
    pub adapter: AdapterConfig,
    pub optimizer: OptimizerConfig,
    #[serde(default)]
    pub sampling: SamplingConfig,
    pub tasks: TasksConfig,
    /// Held-out evaluation: the mean reward of `k` seeded samples per task, before the first
    /// update, every `every` updates and after the last.
    #[serde(default)]
    pub eval: Option<EvalConfig>,
    #[serde(default = "default_norm")]
    pub advantage: String,
    /// β of a KL penalty to the adapter-free base model, per trained token (0: none, the
    /// default, as FrogNano was trained).
    #[serde(default)]
    pub kl: f64,
    /// Asynchronous rollouts: 0 (the default) samples each update's groups with the adapter
    /// being trained; N ≥ 1 samples them on a second copy of the model in its own thread with
    /// the adapter of N updates before, while the trainer updates (the importance ratio
    /// against that adapter's log-probabilities corrects for the lag).
    #[serde(default)]
    pub staleness: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalConfig {
    pub file: PathBuf,
    #[serde(default = "default_eval_k")]
    pub k: usize,
    #[serde(default = "default_eval_every")]
    pub every: u32,
}

fn default_eval_k() -> usize {
    4
}
fn default_eval_every() -> u32 {
    10
}

fn default_group() -> usize {
    8
}
fn default_groups_per_step() -> usize {
    1
}
fn default_max_draws() -> usize {
    4
}
fn default_context() -> u32 {
    2048
}
fn default_norm() -> String {
    "group-std".into()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterConfig {
    pub rank: usize,
    pub alpha: f32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    pub lr: f32,
    #[serde(default)]
    pub warmup: u32,
    #[serde(default)]
    pub cosine: bool,
    #[serde(default = "default_min_ratio")]
    pub min_ratio: f32,
    #[serde(default = "default_clip")]
    pub max_grad_norm: f32,
    #[serde(default)]
    pub weight_decay: f32,
}

fn default_min_ratio() -> f32 {
    0.1
}
fn default_clip() -> f32 {
    1.0
}

/// The metrics line of one update.
#[derive(Serialize)]
struct Metrics<'a> {
    #[serde(flatten)]
    update: &'a UpdateStats,
    groups: usize,
    groups_skipped: usize,
    /// Groups an episode of which could not be sampled (see episodes.jsonl's `error`).
    groups_failed: usize,
    /// Tasks whose group carried signal, of those drawn: the in-band fraction.
    in_band: f64,
    /// Online calibration's moves this update: `{"task", "from", "to"}` (instance ids).
    refined: &'a [serde_json::Value],
    /// Time spent sampling this update's groups (in the sampling thread when asynchronous).
    sample_ms: f64,
    /// Time the trainer waited for them (all of sampling when synchronous).
    wait_ms: f64,
    /// Updates the sampling adapter lagged behind the one trained (0 on-policy).
    behind: u32,
    step_ms: f64,
}

impl RunConfig {
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut config: Self = toml::from_str(&text)
            .with_context(|| format!("{} is not a run config", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        resolve(&mut config.model);
        if let Some(out) = &mut config.out {
            resolve(out);
        }
        config.tasks.resolve_paths(base);
        if let Some(eval) = &mut config.eval {
            resolve(&mut eval.file);
        }
        if config.group < 2 {
            bail!("group must be at least 2: advantages are relative to the group");
        }
        if config.adapter.rank == 0 || config.steps == 0 || config.groups_per_step == 0 {
            bail!("adapter.rank, steps and groups_per_step must be at least 1");
        }
        if config.staleness >= config.steps {
            bail!(
                "staleness {} must be below steps ({}): update u samples with the adapter of update u − staleness",
                config.staleness,
                config.steps
            );
        }
        if !(config.kl.is_finite() && config.kl >= 0.0) {
            bail!("kl must be a coefficient of 0 or more, not {}", config.kl);
        }
        Ok(config)
    }

    fn norm(&self) -> Result<AdvantageNorm> {
        match self.advantage.as_str() {
            "group-std" => Ok(AdvantageNorm::GroupStd),
            "none" => Ok(AdvantageNorm::None),
            other => bail!("advantage {other:?}: group-std or none"),
        }
    }

    fn schedule(&self) -> Schedule {
        Schedule {
            lr: self.optimizer.lr,
            warmup: self.optimizer.warmup,
            total: self.steps,
            cosine: self.optimizer.cosine,
            min_ratio: self.optimizer.min_ratio,
        }
    }

    fn adamw(&self) -> AdamWConfig {
        AdamWConfig {
            weight_decay: self.optimizer.weight_decay,
            max_grad_norm: Some(self.optimizer.max_grad_norm),
            ..AdamWConfig::default()
        }
    }
}

/// PEFT's initialisation: A uniform in ±1/√n_in (kaiming-uniform with a = √5), B zero, so the
/// adapted model starts as the base model. Seeded.
pub fn initial_adapter(
    targets: &[(String, usize, usize)],
    rank: usize,
    alpha: f32,
    seed: u64,
) -> LoraAdapter {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tensors = targets
        .iter()
        .map(|(target, n_out, n_in)| {
            let bound = 1.0 / (*n_in as f32).sqrt();
            LoraTensor {
                target: target.clone(),
                rank,
                n_in: *n_in,
                n_out: *n_out,
                a: (0..rank * n_in)
                    .map(|_| rng.random_range(-bound..bound))
                    .collect(),
                b: vec![0.0; n_out * rank],
            }
        })
        .collect();
    LoraAdapter {
        rank,
        alpha,
        scale: alpha / rank as f32,
        base_model: None,
        tensors,
    }
}

/// `s` seconds as `1 h 05 min`, `12 min 30 s` or `45 s`.
fn duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

/// The first seed of held-out evaluation's episodes, far from training's (the run's seed
/// times 1,000,003 plus the episode count).
const EVAL_SEEDS: u64 = 1 << 63;

/// The order tasks are drawn in: a seeded shuffle, repeated with a new shuffle each pass.
fn task_at(cursor: u64, n: usize, seed: u64) -> usize {
    let pass = cursor / n as u64;
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng =
        rand::rngs::StdRng::seed_from_u64(seed ^ pass.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for i in (1..n).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    order[(cursor % n as u64) as usize]
}

pub fn run_command(ws: &crate::workspace::Workspace, args: &RunArgs) -> Result<()> {
    let mut config = RunConfig::read(&args.config)?;
    let name = args
        .config
        .file_stem()
        .map_or("run".into(), |n| n.to_string_lossy().into_owned());
    let out = config
        .out
        .take()
        .unwrap_or_else(|| ws.root.join("runs").join(name));
    eprintln!("run folder: {}", out.display());
    let norm = config.norm()?;
    let mut tasks = Family::load(ws, &config.tasks, config.tasks.file())?;
    std::fs::create_dir_all(&out)?;
    let model_args = lilypad_cli::ModelArgs {
        model: config.model.display().to_string(),
        quantize: Default::default(),
        sha256: None,
        lora: None,
        context: Some(config.context),
        kv_cache: lilypad_engine::ModelOptions::default().kv_cache,
        draft: None,
        adapter: None,
        quiet: true,
    };
    // Reply groups (and evaluations) are decoded together: a sequence slot per episode.
    let eval_k = config.eval.as_ref().map_or(1, |e| e.k);
    let sequences = tasks.sequences(config.group.max(eval_k));
    let loaded = lilypad_cli::Loaded::open_with_progress(&model_args, sequences, &mut |_| {})?;
    let base = loaded.file.clone();
    let mut model = loaded.model;
    let targets = model.lora_targets();
    model.set_lora(Some(&initial_adapter(
        &targets,
        config.adapter.rank,
        config.adapter.alpha,
        config.seed,
    )))?;
    let (mut trainer, mut run) = match load_checkpoint(&out)? {
        Some((state, run, path)) => {
            eprintln!("resuming from {} (update {})", path.display(), run.step);
            tasks.set_hint_levels(&run.hint_levels)?;
            let trainer = Trainer::resume(&mut model, config.adamw(), norm, &state)?;
            (trainer, run)
        }
        None => (
            Trainer::new(&mut model, config.adamw(), norm)?,
            RunState {
                step: 0,
                cursor: 0,
                episodes: 0,
                hint_levels: Vec::new(),
            },
        ),
    };
    trainer.kl = config.kl;
    let name = config
        .model
        .file_name()
        .map_or("model".into(), |n| n.to_string_lossy().into_owned());
    let mut session = ChatSession::new(model, loaded.tok, &name)?;
    if let Family::Agent(_) = tasks {
        crate::rollout::keep_openings(&mut session);
    }
    let schedule = config.schedule();
    let last = args
        .stop_after
        .map_or(config.steps, |s| s.min(config.steps));
    let metrics_path = out.join("metrics.jsonl");
    // Lines of updates the checkpoint does not hold (a kill came between the line and the
    // checkpoint) are dropped: those updates run again.
    for log in [&metrics_path, &out.join("episodes.jsonl")] {
        keep_steps_before(log, run.step)?;
    }
    let eval_tasks = match &config.eval {
        Some(eval) => Some(Family::load(ws, &config.tasks, &eval.file)?),
        None => None,
    };
    let eval_path = out.join("eval.jsonl");
    let eval_episodes_log = out.join("eval-episodes.jsonl");
    keep_steps_before(&eval_path, run.step + 1)?;
    let evaluate = |session: &mut ChatSession, step: u32| -> Result<()> {
        let (Some(eval), Some(eval_tasks)) = (&config.eval, &eval_tasks) else {
            return Ok(());
        };
        let t0 = Instant::now();
        // Lines of an evaluation a kill interrupted go: it runs again whole.
        keep_steps_before(&eval_episodes_log, step)?;
        let mut total = 0.0;
        for i in 0..eval_tasks.len() {
            // Seeds of their own (training's count up from the run's seed), the same at every
            // evaluation.
            let seed = EVAL_SEEDS + (i * eval.k) as u64;
            let trajectory =
                |sample: usize| out.join(format!("eval/{step:04}/{i:04}-{sample}.json"));
            let (group, error) =
                eval_tasks.group(session, i, &config.sampling, seed, eval.k, &trajectory);
            if let Some(e) = error {
                return Err(e.context(format!("evaluating task {i}")));
            }
            for (episode, mut record) in group {
                total += episode.reward;
                record["step"] = step.into();
                append_line(&eval_episodes_log, &record)?;
            }
        }
        let episodes = eval_tasks.len() * eval.k;
        let reward = total / episodes.max(1) as f64;
        let line = serde_json::json!({
            "step": step, "reward": reward, "episodes": episodes,
            "ms": t0.elapsed().as_secs_f64() * 1e3,
        });
        append_line(&eval_path, &line)?;
        eprintln!("eval after {step} updates: reward {reward:.3} over {episodes} episodes");
        Ok(())
    };
    let evaluated = |step: u32| -> Result<bool> {
        Ok(read_lines::<serde_json::Value>(&eval_path)?
            .iter()
            .any(|v| v["step"].as_u64() == Some(u64::from(step))))
    };
    let eval_step = |step: u32| {
        config.eval.as_ref().is_some_and(|e| {
            step == 0 || step.is_multiple_of(e.every.max(1)) || step == config.steps
        })
    };
    // Before the first update, or the evaluation a kill interrupted.
    if eval_step(run.step) && !evaluated(run.step)? {
        evaluate(&mut session, run.step)?;
    }
    // Asynchronous rollouts: a second copy of the model samples in its own thread, each
    // update's groups with the adapter of `staleness` updates before, while this thread
    // trains. It is sent every adapter the trainer makes; the checkpoint keeps those it
    // still needs.
    let staleness = config.staleness;
    let asynchronous = staleness > 0 && run.step < last;
    let mut sampling_adapters: std::collections::BTreeMap<u32, LoraAdapter> = Default::default();
    if asynchronous {
        let current = pollster::block_on(session.model_mut().lora_adapter())?
            .context("the model carries no adapter")?;
        let checkpoint = load_checkpoint(&out)?.map(|(_, _, path)| path);
        for updates in run.step.saturating_sub(staleness)..run.step {
            let checkpoint = checkpoint.as_deref().context("no checkpoint")?;
            let adapter = crate::train::sampling_adapter(checkpoint, updates, &base)?;
            sampling_adapters.insert(updates, adapter);
        }
        sampling_adapters.insert(run.step, current);
    }
    let (started, first_step) = (Instant::now(), run.step);
    // Set however the training loop ends, so the sampler stops instead of finishing an update
    // nobody will train.
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| -> Result<()> {
        let _stop_sampler = StopOnDrop(&stop);
        let mut sampler_thread = None;
        let mut source = if asynchronous {
            let (groups_tx, groups_rx) = std::sync::mpsc::channel();
            let (adapters_tx, adapters_rx) = std::sync::mpsc::channel();
            for (&updates, adapter) in &sampling_adapters {
                let _ = adapters_tx.send((updates, adapter.clone()));
            }
            let sampler = Sampler {
                model_args: &model_args,
                name: &name,
                sequences,
                config: &config,
                out: &out,
                start: run.clone(),
                last,
            };
            let stop = &stop;
            sampler_thread =
                Some(scope.spawn(move || sampler.run(tasks, stop, adapters_rx, groups_tx)));
            Source::Thread {
                groups: groups_rx,
                adapters: adapters_tx,
            }
        } else {
            Source::Inline(tasks)
        };
        while run.step < last {
            let t0 = Instant::now();
            let sampled = match &mut source {
                Source::Inline(tasks) => sample_update(
                    &mut session,
                    tasks,
                    &config,
                    &out,
                    (run.step, run.step),
                    &run,
                    &stop,
                )?,
                Source::Thread { groups, .. } => match groups.recv() {
                    Ok(sampled) => sampled?,
                    // It ended without a word: it panicked.
                    Err(_) => {
                        let panic = sampler_thread.take().map(|t| t.join());
                        let why = match &panic {
                            Some(Err(payload)) => payload
                                .downcast_ref::<String>()
                                .map(String::as_str)
                                .or_else(|| payload.downcast_ref::<&str>().copied())
                                .unwrap_or("a panic"),
                            _ => "it ended early",
                        };
                        bail!("the sampling thread stopped: {why}");
                    }
                },
            };
            let wait_ms = t0.elapsed().as_secs_f64() * 1e3;
            let groups = &sampled.groups;
            let lr = schedule.lr(run.step);
            let stats = if groups.is_empty() {
                // Nothing to learn from this draw: the step still counts, with no update.
                UpdateStats {
                    step: run.step,
                    lr,
                    ..Default::default()
                }
            } else {
                let model = session.model_mut();
                let mut stats = pollster::block_on(trainer.update(model, groups, lr))?;
                if stats.nonfinite {
                    eprintln!(
                        "update {}: the gradient's norm is {}: no optimizer step (nonfinite in the metrics)",
                        run.step + 1,
                        stats.grad_norm
                    );
                }
                // The run's count: updates that found no group took no optimizer step.
                stats.step = run.step;
                stats
            };
            let behind = run.step - sampled.version;
            run = RunState {
                step: run.step + 1,
                ..sampled.after
            };
            let line = Metrics {
                update: &stats,
                groups: groups.len(),
                groups_skipped: sampled.skipped,
                groups_failed: sampled.failed,
                refined: &sampled.refined,
                in_band: groups.len() as f64 / sampled.drawn.max(1) as f64,
                sample_ms: sampled.ms,
                wait_ms,
                behind,
                step_ms: t0.elapsed().as_secs_f64() * 1e3,
            };
            append_line(&metrics_path, &line)?;
            let adapter = pollster::block_on(session.model_mut().lora_adapter())?
                .context("the model carries no adapter")?;
            if let Source::Thread { adapters, .. } = &source {
                // A sampler that has stopped reports why on the groups channel.
                let _ = adapters.send((run.step, adapter.clone()));
                sampling_adapters.insert(run.step, adapter.clone());
                sampling_adapters.retain(|&u, _| u.saturating_add(staleness) >= run.step);
            }
            // The adapters a resumed run samples its next updates with (not the current one,
            // which is the checkpoint's own).
            let behind_adapters: Vec<(u32, &LoraAdapter)> = sampling_adapters
                .range(..run.step)
                .map(|(&u, a)| (u, a))
                .collect();
            pollster::block_on(crate::train::save_checkpoint(
                &out,
                session.model_mut(),
                &adapter,
                &base,
                &trainer,
                &run,
                &behind_adapters,
            ))?;
            if eval_step(run.step) {
                evaluate(&mut session, run.step)?;
            }
            draw_curve(&out);
            // The time left, at this session's mean time per update (evaluations included).
            let elapsed = started.elapsed().as_secs_f64();
            let eta = elapsed / f64::from(run.step - first_step) * f64::from(last - run.step);
            eprintln!(
                "update {}/{}: reward {:.3}, loss {:+.4}, {} groups ({} skipped), grad norm {:.3}, lr {:.2e}, {:.1} s ({:.0} s in all, about {} left)",
                run.step,
                config.steps,
                stats.mean_reward,
                stats.loss,
                groups.len(),
                sampled.skipped,
                stats.grad_norm,
                lr,
                t0.elapsed().as_secs_f64(),
                elapsed,
                duration(eta),
            );
        }
        Ok(())
    })?;
    // Drawn again at the end, so rerunning a finished run brings the chart up to date.
    draw_curve(&out);
    eprintln!(
        "{} updates of {}; curve: {}",
        run.step,
        config.steps,
        out.join("curve.svg").display()
    );
    Ok(())
}

/// Where an update's groups come from: this thread, or the sampling thread of an
/// asynchronous run (and where the trainer's adapters go to it).
enum Source {
    Inline(Family),
    Thread {
        groups: Receiver<Result<Sampled>>,
        adapters: Sender<(u32, LoraAdapter)>,
    },
}

/// One update's groups with signal, and how sampling went.
struct Sampled {
    /// Updates the sampling adapter had taken: the update's own index on-policy, fewer when
    /// asynchronous.
    version: u32,
    groups: Vec<Vec<Episode>>,
    drawn: usize,
    skipped: usize,
    failed: usize,
    refined: Vec<serde_json::Value>,
    ms: f64,
    /// The run's state after this update's draws (its task cursor, episode count and hint
    /// levels; `step` as it was).
    after: RunState,
}

/// Draws tasks from `from`'s place in the run's order and samples a group of each with the
/// session's adapter (which has taken `version` updates; `stop` ends it early) until `groups_per_step` groups carry
/// signal or `max_draws` per group were drawn; every episode goes to episodes.jsonl as
/// update `step`'s. Off-policy groups (`version < step`) carry the sampling adapter's
/// log-probabilities for the importance ratio.
fn sample_update(
    session: &mut ChatSession,
    tasks: &mut Family,
    config: &RunConfig,
    out: &Path,
    (step, version): (u32, u32),
    from: &RunState,
    stop: &AtomicBool,
) -> Result<Sampled> {
    let t0 = Instant::now();
    // Every episode's reply and reward, for reading what the policy does.
    let episodes_log = out.join("episodes.jsonl");
    let mut s = Sampled {
        version,
        groups: Vec::new(),
        drawn: 0,
        skipped: 0,
        failed: 0,
        refined: Vec::new(),
        ms: 0.0,
        after: from.clone(),
    };
    while s.groups.len() < config.groups_per_step
        && s.drawn < config.groups_per_step * config.max_draws
    {
        if stop.load(Ordering::Relaxed) {
            bail!("stopped: training has ended");
        }
        let task = task_at(s.after.cursor, tasks.len(), config.seed);
        s.after.cursor += 1;
        s.drawn += 1;
        let seed = config
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(s.after.episodes);
        let first = s.after.episodes;
        s.after.episodes += config.group as u64;
        let trajectory = |i: usize| out.join(format!("trajectories/{:06}.json", first + i as u64));
        let (sampled, error) = tasks.group(
            session,
            task,
            &config.sampling,
            seed,
            config.group,
            &trajectory,
        );
        let mut group = Vec::with_capacity(config.group);
        for (episode, mut record) in sampled {
            record["step"] = step.into();
            append_line(&episodes_log, &record)?;
            group.push(episode);
        }
        if let Some(e) = error {
            // The environment failed, not the policy (a sandbox that would not start, a
            // copy that could not be made): the group is not trained on, and the run goes
            // on with the next task.
            let error = format!("{e:#}");
            eprintln!("task {task}: {error}");
            let record = serde_json::json!({
                "step": step, "seed": seed.wrapping_add(group.len() as u64), "error": error,
            });
            append_line(&episodes_log, &record)?;
        }
        let rewards: Vec<f64> = group.iter().map(|e: &Episode| e.reward).collect();
        if group.len() < config.group {
            s.failed += 1;
        } else if carries_signal(&rewards) {
            if version < step {
                let model = session.model_mut();
                for episode in &mut group {
                    model.truncate(0);
                    let tokens = &episode.transcript.tokens;
                    episode.logp_old = Some(pollster::block_on(model.log_probs(
                        0,
                        tokens,
                        &episode.targets(),
                    ))?);
                }
            }
            s.groups.push(group);
        } else {
            s.skipped += 1;
            if let Some((from, to)) = tasks.refine(task, rewards[0]) {
                eprintln!(
                    "task {task}: every episode scored {}: {from} -> {to}",
                    rewards[0]
                );
                s.refined
                    .push(serde_json::json!({"task": task, "from": from, "to": to}));
                s.after.hint_levels = tasks.hint_levels();
            }
        }
    }
    s.ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(s)
}

/// The sampling thread of an asynchronous run: its own copy of the model, which samples
/// update u's groups with the adapter of u − staleness updates (waiting for the trainer to
/// send it), from `start` until `last`.
struct Sampler<'a> {
    model_args: &'a lilypad_cli::ModelArgs,
    /// The model's name in the session (its file name, as the trainer's session has it).
    name: &'a str,
    sequences: u32,
    config: &'a RunConfig,
    out: &'a Path,
    start: RunState,
    last: u32,
}

impl Sampler<'_> {
    fn run(
        self,
        mut tasks: Family,
        stop: &AtomicBool,
        adapters: Receiver<(u32, LoraAdapter)>,
        groups: Sender<Result<Sampled>>,
    ) {
        if let Err(e) = self.sample(&mut tasks, stop, &adapters, &groups) {
            let _ = groups.send(Err(e.context("sampling")));
        }
    }

    fn sample(
        &self,
        tasks: &mut Family,
        stop: &AtomicBool,
        adapters: &Receiver<(u32, LoraAdapter)>,
        groups: &Sender<Result<Sampled>>,
    ) -> Result<()> {
        let loaded =
            lilypad_cli::Loaded::open_with_progress(self.model_args, self.sequences, &mut |_| {})?;
        let mut session = ChatSession::new(loaded.model, loaded.tok, self.name)?;
        if let Family::Agent(_) = tasks {
            crate::rollout::keep_openings(&mut session);
        }
        let mut received = std::collections::BTreeMap::new();
        let mut current = None;
        let mut state = self.start.clone();
        for step in self.start.step..self.last {
            let version = step.saturating_sub(self.config.staleness);
            while !received.contains_key(&version) {
                // Until the trainer stops (done, or failed: it reports that itself).
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                match adapters.recv_timeout(Duration::from_millis(100)) {
                    Ok((updates, adapter)) => {
                        received.insert(updates, adapter);
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                }
            }
            received.retain(|&u, _| u >= version);
            if current != Some(version) {
                session.model_mut().set_lora(Some(&received[&version]))?;
                current = Some(version);
            }
            let sampled = sample_update(
                &mut session,
                tasks,
                self.config,
                self.out,
                (step, version),
                &state,
                stop,
            )?;
            state = sampled.after.clone();
            if groups.send(Ok(sampled)).is_err() {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn draw_curve(out: &Path) {
    if let Err(e) = plot_curve(out) {
        eprintln!("warning: the learning curve was not drawn: {e:#}");
    }
    if let Err(e) = write_report(out) {
        eprintln!("warning: the run report was not written: {e:#}");
    }
}

/// `report.md`: the run so far from its own logs, for reading at a glance.
fn write_report(out: &Path) -> Result<()> {
    let metrics = read_lines::<serde_json::Value>(&out.join("metrics.jsonl"))?;
    let evals = read_lines::<serde_json::Value>(&out.join("eval.jsonl"))?;
    std::fs::write(out.join("report.md"), report(&metrics, &evals))?;
    Ok(())
}

/// The report of a run whose metrics and evaluation lines are these.
fn report(metrics: &[serde_json::Value], evals: &[serde_json::Value]) -> String {
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    // (An empty float sum is −0.)
    let n = |k: &str| 0.0 + metrics.iter().map(|v| f(v, k)).sum::<f64>();
    let count = |k: &str| {
        metrics
            .iter()
            .filter(|v| v[k].as_bool() == Some(true))
            .count()
    };
    let refined: usize = metrics
        .iter()
        .map(|v| v["refined"].as_array().map_or(0, Vec::len))
        .sum();
    let updated = metrics.iter().filter(|v| f(v, "groups") > 0.0).count();
    let mean = |vs: &[serde_json::Value]| {
        let kept: Vec<f64> = vs
            .iter()
            .filter(|v| f(v, "groups") > 0.0)
            .map(|v| f(v, "mean_reward"))
            .collect();
        (!kept.is_empty()).then(|| kept.iter().sum::<f64>() / kept.len() as f64)
    };
    let fmt = |m: Option<f64>| m.map_or("—".to_string(), |m| format!("{m:.3}"));
    let tenth = (metrics.len() / 10).max(1);
    let mut r = String::from("# Run report\n\n");
    r += &format!(
        "{} updates, {} of them with groups to learn from; {} groups kept, {} skipped (all \
         rewards equal), {} failed (the environment); {} tasks refined online; {} updates \
         skipped for a gradient that was not finite.\n\n",
        metrics.len(),
        updated,
        n("groups"),
        n("groups_skipped"),
        n("groups_failed"),
        refined,
        count("nonfinite"),
    );
    r += &format!(
        "Training reward of the kept groups: {} over the first {tenth} updates, {} over the \
         last {tenth}.\n\n",
        fmt(mean(&metrics[..tenth.min(metrics.len())])),
        fmt(mean(&metrics[metrics.len().saturating_sub(tenth)..])),
    );
    if !evals.is_empty() {
        r += "| after update | held-out reward | episodes |\n|---:|---:|---:|\n";
        for e in evals {
            r += &format!(
                "| {} | {:.3} | {} |\n",
                e["step"],
                f(e, "reward"),
                e["episodes"]
            );
        }
        r += "\n";
    }
    let (sample, train, opt) = (
        n("sample_ms") / 1e3,
        n("forward_backward_ms") / 1e3,
        n("optimizer_ms") / 1e3,
    );
    let eval = 0.0 + evals.iter().map(|e| f(e, "ms")).sum::<f64>() / 1e3;
    // Asynchronous runs sample in their own thread: what counts is how long training waited.
    let sampling = if metrics.iter().any(|m| f(m, "behind") > 0.0) {
        format!(
            "sampling {sample:.0} s in the sampling thread (the trainer waited {:.0} s for it)",
            n("wait_ms") / 1e3
        )
    } else {
        format!("sampling {sample:.0} s")
    };
    r += &format!(
        "Time: {sampling}, forward and backward {train:.0} s, optimizer {opt:.1} s, \
         evaluation {eval:.0} s. The curve: curve.svg; every update: metrics.jsonl.\n"
    );
    r
}

/// `curve.svg`: the training reward per update (each update's groups) and the held-out
/// reward at each evaluation.
fn plot_curve(out: &Path) -> Result<()> {
    let points = |file: &str, x: fn(&serde_json::Value) -> Option<f64>, y: &str| {
        Ok::<_, anyhow::Error>(
            read_lines::<serde_json::Value>(&out.join(file))?
                .iter()
                .filter_map(|v| Some((x(v)?, v[y].as_f64()?)))
                .collect::<Vec<_>>(),
        )
    };
    // An update's line has the step it started from; it ends at step + 1.
    let train = points(
        "metrics.jsonl",
        |v| Some(v["step"].as_f64()? + 1.0),
        "mean_reward",
    )?;
    let eval = points("eval.jsonl", |v| v["step"].as_f64(), "reward")?;
    crate::plot::line_chart(
        &out.join("curve.svg"),
        "GRPO: reward by update",
        "updates",
        "mean reward",
        &[
            crate::plot::Series {
                name: "training groups (kept)",
                points: train,
                color: plotters::style::RGBColor(120, 160, 220),
            },
            crate::plot::Series {
                name: "held-out evaluation",
                points: eval,
                color: plotters::style::RGBColor(200, 60, 40),
            },
        ],
        1.0,
    )
}

/// Keeps the JSON lines of `path` whose `step` is below `step`.
fn keep_steps_before(path: &Path, step: u32) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let kept: String = text
        .lines()
        .filter(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .is_some_and(|s| s < u64::from(step))
        })
        .map(|line| format!("{line}\n"))
        .collect();
    if kept.len() != text.len() {
        crate::workspace::write_atomic(path, kept.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_sums_up_the_logs() {
        let line = |step: u32, groups: u32, reward: f64| {
            serde_json::json!({
                "step": step, "groups": groups, "groups_skipped": 1, "groups_failed": 0,
                "mean_reward": reward, "sample_ms": 1000.0, "forward_backward_ms": 2000.0,
                "optimizer_ms": 100.0, "nonfinite": step == 3,
                "refined": if step == 1 { serde_json::json!([{"task": 0}]) } else { serde_json::json!([]) },
            })
        };
        let metrics: Vec<_> = (0..20)
            .map(|s| line(s, u32::from(s != 5), f64::from(s) / 20.0))
            .collect();
        let evals = [serde_json::json!({"step": 0, "reward": 0.25, "episodes": 8, "ms": 5000.0})];
        let r = report(&metrics, &evals);
        assert!(r.contains("20 updates, 19 of them"), "{r}");
        assert!(r.contains("19 groups kept, 20 skipped"), "{r}");
        assert!(
            r.contains("1 tasks refined online; 1 updates skipped"),
            "{r}"
        );
        // The first two updates (rewards 0 and 0.05) and the last two (0.9, 0.95).
        assert!(
            r.contains("0.025 over the first 2 updates, 0.925 over the last 2"),
            "{r}"
        );
        assert!(r.contains("| 0 | 0.250 | 8 |"), "{r}");
        assert!(
            r.contains("sampling 20 s, forward and backward 40 s, optimizer 2.0 s, evaluation 5 s"),
            "{r}"
        );
        // An asynchronous run's sampling overlaps training: the report gives the wait too.
        let behind: Vec<_> = metrics
            .iter()
            .map(|m| {
                let mut m = m.clone();
                m["behind"] = 1.into();
                m["wait_ms"] = 250.0.into();
                m
            })
            .collect();
        let r = report(&behind, &evals);
        assert!(
            r.contains("sampling 20 s in the sampling thread (the trainer waited 5 s for it)"),
            "{r}"
        );
        let empty = report(&[], &[]);
        assert!(
            empty.contains("0 updates") && !empty.contains("-0"),
            "{empty}"
        );
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(0.4), "0 s");
        assert_eq!(duration(59.6), "1 min 00 s");
        assert_eq!(duration(750.0), "12 min 30 s");
        assert_eq!(duration(3900.0), "1 h 05 min");
        assert_eq!(duration(-3.0), "0 s");
    }

    #[test]
    fn every_task_is_drawn_once_per_pass_in_a_seeded_order() {
        let pass: Vec<usize> = (0..5).map(|c| task_at(c, 5, 7)).collect();
        let mut sorted = pass.clone();
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2, 3, 4]);
        let again: Vec<usize> = (0..5).map(|c| task_at(c, 5, 7)).collect();
        assert_eq!(pass, again);
        let next: Vec<usize> = (5..10).map(|c| task_at(c, 5, 7)).collect();
        assert_ne!(pass, next, "a new pass, a new order (with these seeds)");
    }
}
