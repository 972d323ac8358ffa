//! `train-native`: the environments, tasks, calibration and evaluation that reinforcement
//! learning of lilypad's coding agent runs on, natively on one machine.

mod bench;
mod calibrate;
mod envs;
mod episodes;
mod eval;
mod export;
mod featadd;
// GRPO's objective: tested here, read by the training loop that comes next.
#[cfg_attr(not(test), allow(dead_code))]
mod grpo;
mod manifest;
mod mutate;
mod plan;
mod plot;
mod pytest;
mod rollout;
mod run;
mod synth;
mod task;
#[cfg(test)]
mod testing;
mod train;
mod workspace;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use manifest::Manifest;
use workspace::Workspace;

#[derive(Parser)]
#[command(
    name = "train-native",
    version,
    about = "Environments, bug-fix tasks, calibration and evaluation for training lilypad's coding agent"
)]
struct Cli {
    /// Folder for sdists, environments, tasks and runs (default ~/.cache/lilypad/train).
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Real Python projects as environments: build, list and check them.
    Envs {
        #[command(subcommand)]
        command: EnvsCommand,
    },
    /// Plant procedural bugs in the usable environments and keep those the tests catch.
    Synth(SynthArgs),
    /// Run the agent k times on each task and grade it with the tests: resolve rate (Avg@k),
    /// pass@k, per project and per kind of bug.
    Eval(EvalArgs),
    /// Measure each task's solve rate p̂ with k rollouts, refine out-of-band tasks (more or
    /// fewer hints, a second bug) and measure again; write the pool weighted by p̂(1 − p̂).
    Calibrate(CalibrateArgs),
    /// Ask the model, through the agent, for small features and changes in each project, and
    /// keep what its edits break in the tests as tasks ("FeatAdd" bugs).
    Featadd(FeatAddArgs),
    /// Time one training step by part (forward, log-probabilities, backward, optimizer) with
    /// a random LoRA adapter on every linear and random tokens.
    BenchStep(bench::BenchStepArgs),
    /// The GPU memory a training configuration needs (model, kept activations, adapter with
    /// gradient and AdamW moments, backward buffers), from the GGUF header alone.
    Plan(plan::PlanArgs),
    /// Merge a trained LoRA adapter into its base model: one GGUF that the browser, the VS
    /// Code view and the CLI load like any other model.
    Export(export::ExportArgs),
    /// Train a LoRA adapter with GRPO (run.toml: model, tasks, group size, adapter,
    /// optimizer); checkpoints after every update, and a rerun resumes.
    Run(run::RunArgs),
}

#[derive(Args)]
struct FeatAddArgs {
    #[command(flatten)]
    model: lilypad_cli::ModelArgs,
    #[command(flatten)]
    selection: Selection,
    /// Which projects: train, eval or all.
    #[arg(long, value_enum, default_value_t = SplitChoice::Train)]
    split: SplitChoice,
    /// Requests per project (counting earlier runs').
    #[arg(long, default_value_t = 4)]
    tries: usize,
    /// How much the problem statements say (0–3, as for synth).
    #[arg(long, default_value_t = 1)]
    hint_level: u8,
    #[command(flatten)]
    agent: lilypad_cli::AgentArgs,
    /// Folder for tasks.jsonl, attempts.jsonl and the runs' trajectories (default: tasks/ in
    /// the --dir folder).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct CalibrateArgs {
    #[command(flatten)]
    model: lilypad_cli::ModelArgs,
    #[command(flatten)]
    selection: Selection,
    /// The tasks (JSONL; default: tasks/tasks.jsonl in the --dir folder).
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Which tasks: train, eval or all.
    #[arg(long, value_enum, default_value_t = SplitChoice::Train)]
    split: SplitChoice,
    /// Rollouts per measurement.
    #[arg(short, long, default_value_t = 4)]
    k: usize,
    /// At most this many tasks, taken in turn from each project.
    #[arg(long)]
    limit: Option<usize>,
    /// Refinements of one task at most.
    #[arg(long, default_value_t = 3)]
    max_rounds: usize,
    /// Tasks in the iteration's pool, sampled by weight p̂(1 − p̂) from the in-band tasks.
    #[arg(long, default_value_t = 300)]
    pool_size: usize,
    /// The training iteration the pool is for (seeds its sampling).
    #[arg(long, default_value_t = 0)]
    iteration: usize,
    #[command(flatten)]
    agent: lilypad_cli::AgentArgs,
    /// Folder for the rollouts, refined tasks, pool and summary (default:
    /// runs/calibrate-<model> in the --dir folder). An existing one is resumed.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct EvalArgs {
    #[command(flatten)]
    model: lilypad_cli::ModelArgs,
    #[command(flatten)]
    selection: Selection,
    /// The tasks (JSONL; default: tasks/tasks.jsonl in the --dir folder).
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Which tasks: train, eval or all.
    #[arg(long, value_enum, default_value_t = SplitChoice::Eval)]
    split: SplitChoice,
    /// Rollouts per task.
    #[arg(short, long, default_value_t = 3)]
    k: usize,
    /// At most this many tasks, taken in turn from each project.
    #[arg(long)]
    limit: Option<usize>,
    /// Give the problem statements at this hint level instead of each task's own (0–3).
    #[arg(long)]
    hint_level: Option<u8>,
    #[command(flatten)]
    agent: lilypad_cli::AgentArgs,
    /// Folder for rollouts.jsonl, trajectories, predictions.jsonl and the report (default:
    /// runs/eval-<model>-k<k> in the --dir folder). An existing one is resumed.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct SynthArgs {
    #[command(flatten)]
    selection: Selection,
    /// Which projects: train, eval or all.
    #[arg(long, value_enum, default_value_t = SplitChoice::All)]
    split: SplitChoice,
    /// Valid tasks wanted per project (counting earlier runs').
    #[arg(long, default_value_t = 10)]
    per_project: usize,
    /// Candidates tried per project in this run at most.
    #[arg(long, default_value_t = 60)]
    max_tries: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How much the problem statements say (0: failing tests; 1: + traceback; 2: + file and
    /// function; 3: + line and kind of mistake).
    #[arg(long, default_value_t = 1)]
    hint_level: u8,
    /// Folder for tasks.jsonl and attempts.jsonl (default: tasks/ in the --dir folder).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Which split's projects or tasks a command takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SplitChoice {
    Train,
    Eval,
    All,
}

impl SplitChoice {
    fn includes(self, split: manifest::Split) -> bool {
        match self {
            SplitChoice::Train => split == manifest::Split::Train,
            SplitChoice::Eval => split == manifest::Split::Eval,
            SplitChoice::All => true,
        }
    }
}

#[derive(Args, Clone)]
struct Selection {
    /// A manifest other than the built-in projects.toml.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Only these projects (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

#[derive(Subcommand)]
enum EnvsCommand {
    /// Fetch, unpack, install and run each project's baseline tests (skips what is built).
    Build {
        #[command(flatten)]
        selection: Selection,
        /// The package index's simple API.
        #[arg(long, default_value = "https://pypi.org/simple")]
        index: String,
        /// The Python venvs are made with.
        #[arg(long, default_value = "python3")]
        python: String,
        /// A suite slower than this many seconds makes the project unusable.
        #[arg(long, default_value_t = 120)]
        max_suite_s: u64,
        /// Rebuild even what is built.
        #[arg(long)]
        force: bool,
    },
    /// The built environments: status, tests, suite time, why unusable.
    List {
        #[command(flatten)]
        selection: Selection,
    },
    /// Run each built environment's suite again and compare with its baseline.
    Check {
        #[command(flatten)]
        selection: Selection,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {}", lilypad_cli::error_message(&e));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let ws = Workspace::new(cli.dir)?;
    match cli.command {
        Command::Envs { command } => envs_command(&ws, command),
        Command::Synth(args) => synth_command(&ws, &args),
        Command::Eval(args) => eval_command(&ws, &args),
        Command::Calibrate(args) => calibrate_command(&ws, &args),
        Command::Featadd(args) => featadd_command(&ws, &args),
        Command::BenchStep(args) => bench::bench_step(&args),
        Command::Plan(args) => plan::plan_command(&args),
        Command::Export(args) => export::export_command(&args),
        Command::Run(args) => run::run_command(&ws, &args),
    }
}

fn bar(len: u64, template: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

fn envs_command(ws: &Workspace, command: EnvsCommand) -> Result<()> {
    match command {
        EnvsCommand::Build {
            selection,
            index,
            python,
            max_suite_s,
            force,
        } => {
            let manifest = Manifest::load(selection.manifest.as_deref())?;
            let projects = manifest.select(&selection.only)?;
            let opts = envs::BuildOptions {
                index,
                python,
                pytest: manifest.pytest.clone(),
                max_suite: Duration::from_secs(max_suite_s),
                force,
            };
            let progress = bar(
                projects.len() as u64,
                "{spinner} [{elapsed}] {pos}/{len} {wide_msg}",
            );
            let mut built = Vec::new();
            let mut failed = 0;
            for p in projects {
                let result = envs::build(ws, p, &opts, &mut |stage| {
                    progress.set_message(format!("{}: {stage}", p.name));
                });
                match result {
                    Ok(env) => {
                        progress.suspend(|| println!("{}", envs::summary_row(&env)));
                        built.push(env);
                    }
                    Err(e) => {
                        failed += 1;
                        progress.suspend(|| println!("{:<16} error: {e:#}", p.name));
                    }
                }
                progress.inc(1);
            }
            progress.finish_and_clear();
            print_summary(&built);
            if failed > 0 {
                bail!("{failed} environments could not be built (see above)");
            }
            Ok(())
        }
        EnvsCommand::List { selection } => {
            let manifest = Manifest::load(selection.manifest.as_deref())?;
            println!("{}", envs::summary_header());
            let mut built = Vec::new();
            for p in manifest.select(&selection.only)? {
                match ws.load_env(p) {
                    Ok(env) => {
                        println!("{}", envs::summary_row(&env));
                        built.push(env);
                    }
                    Err(_) => println!("{:<16} {:<10} {:<5} not built", p.name, p.version, p.split),
                }
            }
            print_summary(&built);
            Ok(())
        }
        EnvsCommand::Check { selection } => {
            let manifest = Manifest::load(selection.manifest.as_deref())?;
            let mut drifted = 0;
            for p in manifest.select(&selection.only)? {
                let Ok(env) = ws.load_env(p) else { continue };
                if !env.usable {
                    continue;
                }
                let sandbox = ws.sandbox(p)?;
                let work = ws.scratch_copy(p, "check")?;
                let cmd = env.test_command(ws, Duration::from_secs_f64(env.suite_s * 3.0 + 60.0));
                let report = cmd.run(&work, &sandbox, None);
                let _ = std::fs::remove_dir_all(&work);
                let report = report?;
                let changed: Vec<&String> = env
                    .baseline
                    .iter()
                    .filter(|(id, o)| report.tests.get(*id).map(|r| r.outcome) != Some(**o))
                    .map(|(id, _)| id)
                    .collect();
                if changed.is_empty() && report.completed() {
                    println!(
                        "{:<16} ok ({} tests, {:.1} s)",
                        p.name,
                        env.baseline.len(),
                        report.wall_s
                    );
                } else {
                    drifted += 1;
                    println!(
                        "{:<16} drift: {} tests changed outcome (first: {})",
                        p.name,
                        changed.len(),
                        changed.first().map_or("-", |s| s.as_str())
                    );
                }
            }
            if drifted > 0 {
                bail!("{drifted} environments no longer match their baseline");
            }
            Ok(())
        }
    }
}

/// The usable environments of `selection` in `split`.
fn usable_envs(
    ws: &Workspace,
    selection: &Selection,
    split: SplitChoice,
) -> Result<Vec<envs::Environment>> {
    let manifest = Manifest::load(selection.manifest.as_deref())?;
    let mut out = Vec::new();
    for p in manifest.select(&selection.only)? {
        if !split.includes(p.split) {
            continue;
        }
        match ws.load_env(p) {
            Ok(env) if env.usable => out.push(env),
            Ok(env) if !selection.only.is_empty() => {
                bail!("{} is unusable: {}", p.name, env.reason)
            }
            Ok(_) => {}
            Err(e) if !selection.only.is_empty() => return Err(e),
            Err(_) => {}
        }
    }
    if out.is_empty() {
        bail!("no usable environments (build them with `train-native envs build`)");
    }
    Ok(out)
}

fn synth_command(ws: &Workspace, args: &SynthArgs) -> Result<()> {
    let envs = usable_envs(ws, &args.selection, args.split)?;
    let dir = args.out.clone().unwrap_or_else(|| ws.root.join("tasks"));
    let files = synth::SynthFiles::in_dir(&dir);
    let opts = synth::SynthOptions {
        per_project: args.per_project,
        max_tries: args.max_tries,
        seed: args.seed,
        hint_level: args.hint_level.min(task::MAX_HINT_LEVEL),
    };
    let progress = bar(
        (envs.len() * args.per_project) as u64,
        "{spinner} [{elapsed}] {pos}/{len} tasks {wide_msg}",
    );
    for env in &envs {
        let before = task::read_lines::<task::Task>(&files.tasks)?
            .iter()
            .filter(|t| t.repo == env.project.name)
            .count();
        progress.inc(before.min(args.per_project) as u64);
        let mut valid = before;
        let attempts = synth::synthesize(ws, env, &opts, &files, &mut |a, have| {
            if have > valid {
                progress.inc((have - valid) as u64);
                valid = have;
            }
            progress.set_message(format!(
                "{}: {} {}:{} {:?} ({:.1} s)",
                env.project.name, a.operator, a.file, a.line, a.verdict, a.seconds
            ));
        })?;
        progress.suspend(|| {
            println!(
                "{:<16} {} tasks ({} tried in this run)",
                env.project.name,
                valid,
                attempts.len()
            )
        });
    }
    progress.finish_and_clear();
    let attempts: Vec<synth::Attempt> = task::read_lines(&files.attempts)?;
    let tasks: Vec<task::Task> = task::read_lines(&files.tasks)?;
    println!(
        "\nyield per operator:\n{}",
        synth::yield_table(&attempts, |a| a.operator.clone())
    );
    println!(
        "yield per project:\n{}",
        synth::yield_table(&attempts, |a| a.project.clone())
    );
    let validated: Vec<f64> = attempts
        .iter()
        .filter(|a| a.verdict != synth::Verdict::Duplicate)
        .map(|a| a.seconds)
        .collect();
    println!(
        "{} tasks in {}; {} candidates validated, {:.1} s each on average",
        tasks.len(),
        files.tasks.display(),
        validated.len(),
        validated.iter().sum::<f64>() / validated.len().max(1) as f64
    );
    Ok(())
}

fn print_summary(built: &[envs::Environment]) {
    let usable: Vec<_> = built.iter().filter(|e| e.usable).collect();
    let tests: usize = usable.iter().map(|e| e.passing().count()).sum();
    let train = usable
        .iter()
        .filter(|e| e.project.split == manifest::Split::Train)
        .count();
    println!(
        "{} of {} environments usable ({} train, {} eval), {} passing tests in all",
        usable.len(),
        built.len(),
        train,
        usable.len() - train,
        tests
    );
}

/// The tasks of `split` whose environments are usable, at most `limit` of them taken in turn
/// from each project (in a fixed order that mixes the kinds of bug). `from` names the file
/// `all` was read from, for the error.
fn select_tasks(
    from: &std::path::Path,
    all: &[task::Task],
    envs: &[envs::Environment],
    split: SplitChoice,
    limit: Option<usize>,
) -> Result<Vec<task::Task>> {
    let mut by_project: std::collections::BTreeMap<&str, Vec<&task::Task>> = Default::default();
    for t in all {
        let known = envs
            .iter()
            .any(|e| e.project.name == t.repo && e.project.version == t.version);
        if known && split.includes(t.split) {
            by_project.entry(&t.repo).or_default().push(t);
        }
    }
    // By the candidate hash that ends each id, not the whole id: the id starts with the
    // operator's name, and alphabetical order would take one operator's tasks first.
    let key = |t: &task::Task| t.instance_id.rsplit('.').next().unwrap_or("").to_string();
    for v in by_project.values_mut() {
        v.sort_by(|a, b| {
            key(a)
                .cmp(&key(b))
                .then_with(|| a.instance_id.cmp(&b.instance_id))
        });
    }
    let out: Vec<task::Task> = synth::round_robin(by_project.into_values().collect())
        .take(limit.unwrap_or(usize::MAX))
        .cloned()
        .collect();
    if out.is_empty() {
        bail!(
            "{} holds no {split:?} tasks of usable environments",
            from.display()
        );
    }
    Ok(out)
}

fn eval_command(ws: &Workspace, args: &EvalArgs) -> Result<()> {
    if args.k == 0 {
        bail!("-k must be at least 1");
    }
    let envs = usable_envs(ws, &args.selection, SplitChoice::All)?;
    let tasks_path = args
        .tasks
        .clone()
        .unwrap_or_else(|| ws.root.join("tasks/tasks.jsonl"));
    let all: Vec<task::Task> = task::read_tasks(&tasks_path)?;
    let mut tasks = select_tasks(&tasks_path, &all, &envs, args.split, args.limit)?;
    if let Some(level) = args.hint_level {
        for t in &mut tasks {
            t.set_hint_level(level);
        }
    }
    let model_name = model_label(&args.model);
    let files = eval::EvalFiles {
        dir: args.out.clone().unwrap_or_else(|| {
            eval::default_dir(&ws.root, &format!("eval-{model_name}-k{}", args.k))
        }),
    };
    std::fs::create_dir_all(files.dir.join("trajectories"))?;
    let done: Vec<rollout::Rollout> = task::read_lines(&files.rollouts())?;
    let todo = eval::pending(&tasks, args.k, &done);
    println!(
        "{} tasks × k = {}: {} rollouts to run, {} done earlier, in {}",
        tasks.len(),
        args.k,
        todo.len(),
        tasks.len() * args.k - todo.len(),
        files.dir.display()
    );
    if !todo.is_empty() {
        let loaded = lilypad_cli::Loaded::open(&args.model)?;
        let mut session = lilypad_chat::ChatSession::new(loaded.model, loaded.tok, &model_name)?;
        rollout::keep_openings(&mut session);
        let env_of = |t: &task::Task| {
            envs.iter()
                .find(|e| e.project.name == t.repo && e.project.version == t.version)
                .expect("selected tasks have environments")
        };
        let progress = bar(
            todo.len() as u64,
            "{spinner} [{elapsed}] {pos}/{len} rollouts {wide_msg}",
        );
        let mut failures = 0;
        for (t, sample) in todo {
            let seed = rollout::rollout_seed(args.agent.seed, &t.instance_id, sample);
            let config = args.agent.config(seed);
            let paths = rollout::RolloutPaths {
                trajectory: files.trajectory(&t.instance_id, sample),
            };
            progress.set_message(format!("{} #{sample}: starting", t.instance_id));
            let result = rollout::rollout(
                ws,
                env_of(t),
                t,
                sample,
                &mut session,
                &config,
                &paths,
                &mut |traj| {
                    progress.set_message(format!(
                        "{} #{sample}: step {} ({} tokens generated)",
                        t.instance_id,
                        traj.steps.len(),
                        traj.generated_tokens()
                    ));
                },
            );
            match result {
                Ok((r, _)) => {
                    task::append_line(&files.rollouts(), &r)?;
                    progress.suspend(|| {
                        println!(
                            "{} {} #{sample}: {} after {} steps, FAIL_TO_PASS {}/{}, {} broken, agent {:.0} s, tests {:.1} s{}",
                            if r.resolved { "resolved  " } else { "unresolved" },
                            r.instance_id,
                            r.exit,
                            r.steps,
                            r.fail_to_pass_fixed,
                            r.fail_to_pass,
                            r.pass_to_pass_broken,
                            r.agent_s,
                            r.test_s,
                            r.grade_error.as_ref().map_or(String::new(), |e| format!(" ({e})"))
                        )
                    });
                }
                Err(e) => {
                    failures += 1;
                    progress.suspend(|| println!("error     {} #{sample}: {e:#}", t.instance_id));
                }
            }
            progress.inc(1);
        }
        progress.finish_and_clear();
        if failures > 0 {
            eprintln!("{failures} rollouts failed to run (see above); run again to retry them");
        }
    }
    let rollouts: Vec<rollout::Rollout> = task::read_lines(&files.rollouts())?;
    let report = eval::report(&model_name, &tasks, args.k, &rollouts);
    eval::write_outputs(&files, &report, &rollouts)?;
    println!("\n{}", report.markdown());
    println!("report: {}", files.report_md().display());
    Ok(())
}

fn model_label(model: &lilypad_cli::ModelArgs) -> String {
    let name = std::path::Path::new(&model.model)
        .file_stem()
        .map_or(model.model.clone(), |n| n.to_string_lossy().into_owned());
    match &model.lora {
        Some(l) => format!(
            "{name}-lora-{}",
            l.file_name().unwrap_or_default().to_string_lossy()
        ),
        None => name,
    }
}

fn calibrate_command(ws: &Workspace, args: &CalibrateArgs) -> Result<()> {
    if args.k < 2 {
        bail!("-k must be at least 2 for p̂ to fall between 0 and 1");
    }
    let envs = usable_envs(ws, &args.selection, SplitChoice::All)?;
    let tasks_path = args
        .tasks
        .clone()
        .unwrap_or_else(|| ws.root.join("tasks/tasks.jsonl"));
    let all: Vec<task::Task> = task::read_tasks(&tasks_path)?;
    let tasks = select_tasks(&tasks_path, &all, &envs, args.split, args.limit)?;
    let label = model_label(&args.model);
    let files = calibrate::CalibrationFiles {
        dir: args
            .out
            .clone()
            .unwrap_or_else(|| ws.root.join("runs").join(format!("calibrate-{label}"))),
    };
    println!(
        "calibrating {} tasks, k = {}, in {}",
        tasks.len(),
        args.k,
        files.dir.display()
    );
    let loaded = lilypad_cli::Loaded::open(&args.model)?;
    let mut session = lilypad_chat::ChatSession::new(loaded.model, loaded.tok, &label)?;
    rollout::keep_openings(&mut session);
    let opts = calibrate::CalibrateOptions {
        k: args.k,
        max_rounds: args.max_rounds,
        max_partners: 5,
    };
    let progress = bar(
        tasks.len() as u64,
        "{spinner} [{elapsed}] {pos}/{len} tasks {wide_msg}",
    );
    let mut failed = 0;
    let calibrated = calibrate::calibrate(
        ws,
        &envs,
        &tasks,
        &all,
        &mut session,
        &args.agent,
        &opts,
        &files,
        &mut |event| match event {
            calibrate::Event::RolloutStarted(t, s) => progress.set_message(format!(
                "{} (hint {}) rollout {}/{}",
                t.instance_id,
                t.hint_level,
                s + 1,
                args.k
            )),
            calibrate::Event::RolloutFinished(r) => progress.suspend(|| {
                println!(
                    "  #{} {}: {} after {} steps, FAIL_TO_PASS {}/{}, agent {:.0} s",
                    r.sample,
                    if r.resolved { "resolved" } else { "unresolved" },
                    r.exit,
                    r.steps,
                    r.fail_to_pass_fixed,
                    r.fail_to_pass,
                    r.agent_s
                )
            }),
            calibrate::Event::RolloutFailed(t, s, e) => {
                failed += 1;
                progress.suspend(|| println!("error {} #{s}: {e:#}", t.instance_id));
            }
            calibrate::Event::Measured(t, p) => progress
                .suspend(|| println!("{:<60} hint {} p̂ = {p:.2}", t.instance_id, t.hint_level)),
            calibrate::Event::Refined(t, how) => {
                progress.suspend(|| println!("{:<60} refined: {how}", t.instance_id))
            }
            calibrate::Event::Finished(c) => {
                progress
                    .suspend(|| println!("{:<60} {:?} at p̂ = {:.2}", c.origin, c.status, c.p_hat));
                progress.inc(1)
            }
        },
    )?;
    progress.finish_and_clear();
    let mut pool = String::new();
    for c in &calibrated {
        pool.push_str(&serde_json::to_string(c)?);
        pool.push('\n');
    }
    workspace::write_atomic(&files.pool(), pool.as_bytes())?;
    let sampled = calibrate::sample_pool(&calibrated, args.pool_size, args.iteration as u64);
    let mut text = String::new();
    for c in &sampled {
        text.push_str(&serde_json::to_string(&c.task)?);
        text.push('\n');
    }
    workspace::write_atomic(&files.iteration_pool(args.iteration), text.as_bytes())?;
    let summary = calibrate::summary(&label, args.k, &calibrated);
    workspace::write_atomic(&files.summary(), summary.as_bytes())?;
    calibrate::plots(&files, &label, &calibrated)?;
    println!("\n{summary}");
    println!(
        "pool: {} ({} tasks); iteration {} samples {} of them into {}",
        files.pool().display(),
        calibrated.len(),
        args.iteration,
        sampled.len(),
        files.iteration_pool(args.iteration).display()
    );
    if failed > 0 {
        bail!("{failed} rollouts failed to run (see above); run again to retry them");
    }
    Ok(())
}

fn featadd_command(ws: &Workspace, args: &FeatAddArgs) -> Result<()> {
    let envs = usable_envs(ws, &args.selection, args.split)?;
    let dir = args.out.clone().unwrap_or_else(|| ws.root.join("tasks"));
    let files = synth::SynthFiles::in_dir(&dir);
    let trajectories = dir.join("featadd");
    std::fs::create_dir_all(&trajectories)?;
    let label = model_label(&args.model);
    let loaded = lilypad_cli::Loaded::open(&args.model)?;
    let mut session = lilypad_chat::ChatSession::new(loaded.model, loaded.tok, &label)?;
    rollout::keep_openings(&mut session);
    let progress = bar(
        (envs.len() * args.tries) as u64,
        "{spinner} [{elapsed}] {pos}/{len} requests {wide_msg}",
    );
    for env in &envs {
        let done = task::read_lines::<synth::Attempt>(&files.attempts)?
            .iter()
            .filter(|a| a.project == env.project.name && a.operator == "featadd")
            .count();
        progress.inc(done.min(args.tries) as u64);
        if done >= args.tries || env.source_files.is_empty() {
            continue;
        }
        let validator = synth::Validator::new(ws, env)?;
        for n in done..args.tries {
            let file =
                &env.source_files[rollout::rollout_seed(args.agent.seed, &env.project.key(), n)
                    as usize
                    % env.source_files.len()];
            let ask = featadd::request(n, file);
            progress.set_message(format!("{}: {file}", env.project.name));
            let config = args
                .agent
                .config(rollout::rollout_seed(args.agent.seed, file, n));
            let trajectory = trajectories.join(format!("{}.{n}.json", env.project.key()));
            let (attempt, task) = featadd::attempt(
                ws,
                env,
                &validator,
                &mut session,
                &config,
                file,
                &ask,
                &trajectory,
                args.hint_level,
            )?;
            task::append_line(&files.attempts, &attempt)?;
            if let Some(t) = &task {
                task::append_line(&files.tasks, t)?;
            }
            progress.suspend(|| {
                println!(
                    "{:<16} {file}: {:?}{}",
                    env.project.name,
                    attempt.verdict,
                    task.as_ref()
                        .map_or(String::new(), |t| format!(" → {}", t.instance_id))
                )
            });
            progress.inc(1);
        }
    }
    progress.finish_and_clear();
    let attempts: Vec<synth::Attempt> = task::read_lines(&files.attempts)?;
    let featadd: Vec<synth::Attempt> = attempts
        .into_iter()
        .filter(|a| a.operator == "featadd")
        .collect();
    println!(
        "\nmodel-written bugs per project:\n{}",
        synth::yield_table(&featadd, |a| a.project.clone())
    );
    Ok(())
}
