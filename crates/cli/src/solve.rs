//! `lilypad solve`: the coding agent on a folder of real files, with live progress, writing the
//! patch and the trajectory (after every step, so an interrupted run keeps its record).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use lilypad_agent::{
    AgentEvent, Completion, DiskRepo, LanguageModel, ModelError, NativeShell, Repository, Request,
    Sandbox, ScriptedModel, TokenSink, Toolbox, Trajectory, run_agent,
};
use lilypad_chat::ChatSession;

use lilypad_cli::{AgentArgs, Loaded, ModelArgs};

#[derive(Args)]
pub struct SolveArgs {
    #[command(flatten)]
    model: Option<ModelArgs>,
    /// Instead of a model, reply with these texts in turn: a JSON array of reply texts, or a
    /// recorded trajectory.json (its steps' raw outputs). Runs the real repository, shell and
    /// sandbox, so a run can be reproduced, or the native path tried, without a model.
    #[arg(long, value_name = "FILE", conflicts_with = "model")]
    replay: Option<PathBuf>,
    /// The repository folder the agent works in (its files are edited in place).
    #[arg(long)]
    repo: PathBuf,
    /// The task, as text.
    #[arg(
        long,
        required_unless_present = "task_file",
        conflicts_with = "task_file"
    )]
    task: Option<String>,
    /// The task, from a file.
    #[arg(long)]
    task_file: Option<PathBuf>,
    #[command(flatten)]
    agent: AgentArgs,
    /// Folder for patch.diff and trajectory.json (default: a new folder under the cache).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also append the patch to this JSONL file as a SWE-bench predictions line
    /// (`instance_id`, `model_name_or_path`, `model_patch`), for SWE-bench's own harness.
    #[arg(long, requires = "instance_id")]
    predictions: Option<PathBuf>,
    /// The task's instance_id, for --predictions.
    #[arg(long, requires = "predictions")]
    instance_id: Option<String>,
    /// Run the model's commands unconfined. By default each runs in a bubblewrap sandbox: no
    /// network, the repository the only writable folder, the home folder hidden, limits on
    /// CPU time, memory, processes, open files and file size, every process killed with it.
    #[arg(long)]
    no_sandbox: bool,
    /// Evaluate the system prompt and tool schemas every run. By default their state is
    /// saved once per model (in the cache's `prompt-states` folder, about 46 KiB per token
    /// for SmolLM2) and later runs start from it.
    #[arg(long)]
    no_prompt_cache: bool,
}

pub fn run(args: &SolveArgs) -> Result<()> {
    let task = match (&args.task, &args.task_file) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?
        }
        (None, None) => bail!("give --task or --task-file"),
    };
    // Before the model loads: a missing sandbox is an error at once, not after minutes.
    let sandbox = if args.no_sandbox {
        eprintln!("sandbox: off (--no-sandbox): the model's commands run unconfined");
        Sandbox::Off
    } else {
        Sandbox::detect()?
    };
    let mut repo = DiskRepo::open(&args.repo)
        .with_context(|| format!("opening repository {}", args.repo.display()))?;
    let out = match &args.out {
        Some(o) => o.clone(),
        None => default_out_dir(&args.repo),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let (mut model, name) = match (&args.model, &args.replay) {
        (_, Some(file)) => {
            let script = replay_script(file)?;
            let name = script.name();
            (Replier::Script(script), name)
        }
        (Some(model), None) => {
            let loaded = Loaded::open(model)?;
            let name = lilypad_cli::model_name(&model.model);
            let mut session = ChatSession::new(loaded.model, loaded.tok, &name)?;
            if !args.no_prompt_cache {
                let dir =
                    lilypad_cli::download::default_cache_dir().with_file_name("prompt-states");
                session.set_prefix_store(Some(Box::new(lilypad_chat::DirPrefixStore::new(dir))));
            }
            (Replier::Model(Box::new(session)), name)
        }
        (None, None) => {
            bail!("give --model (a model to run) or --replay (its replies from a file)")
        }
    };
    let shell = NativeShell::new(PathBuf::from(repo.root())).sandboxed(sandbox);
    let mut toolbox = Toolbox::new(Box::new(shell));
    let config = args.agent.config(args.agent.seed);
    let traj_path = out.join("trajectory.json");
    let patch_path = out.join("patch.diff");
    let quiet = args.model.as_ref().is_some_and(|m| m.quiet);
    let mut write_error = None;
    let stderr = std::io::stderr();
    let trajectory = pollster::block_on(run_agent(
        &mut model,
        &mut repo,
        &mut toolbox,
        &task,
        &config,
        &mut |event| {
            let mut err = stderr.lock();
            match event {
                AgentEvent::StepStarted(i) => {
                    let _ = writeln!(err, "\n── step {} ──", i + 1);
                }
                AgentEvent::Text(t) if !quiet => {
                    let _ = write!(err, "{t}");
                }
                AgentEvent::Text(_) => {}
                AgentEvent::ToolStarted(call) => {
                    let _ = writeln!(err, "\n→ {}({})", call.name, call.arguments);
                }
                AgentEvent::ToolFinished(record) => {
                    let _ = writeln!(err, "{}", preview(&record.observation, 8));
                }
                AgentEvent::StepFinished(t) => {
                    if let Err(e) = save(t, &traj_path, &patch_path) {
                        write_error = Some(e);
                    }
                    if let Some(s) = t.steps.last() {
                        let _ = writeln!(
                            err,
                            "[step {}: prompt {} tokens, {} evaluated ({:.0} ms); {} generated ({:.0} ms)]",
                            s.index + 1,
                            s.prompt_tokens,
                            s.prefilled_tokens,
                            s.prefill_ms,
                            s.generated_tokens,
                            s.decode_ms
                        );
                    }
                }
            }
            true
        },
    ))?;
    if let Some(e) = write_error {
        return Err(e);
    }
    save(&trajectory, &traj_path, &patch_path)?;
    let exit = trajectory
        .exit
        .as_ref()
        .map_or("unknown".into(), |e| format!("{e:?}"));
    eprintln!(
        "\nfinished: {exit} after {} steps ({} tokens evaluated, {} generated)",
        trajectory.steps.len(),
        trajectory.prefilled_tokens(),
        trajectory.generated_tokens()
    );
    eprintln!(
        "patch:      {} ({} lines)",
        patch_path.display(),
        trajectory.patch.lines().count()
    );
    eprintln!("trajectory: {}", traj_path.display());
    if let (Some(path), Some(id)) = (&args.predictions, &args.instance_id) {
        append_prediction(path, id, &name, &trajectory.patch)?;
        eprintln!("prediction: {} ({id})", path.display());
    }
    Ok(())
}

/// What answers the agent: a loaded model, or replies read from a file.
enum Replier {
    Model(Box<ChatSession>),
    Script(ScriptedModel),
}

impl LanguageModel for Replier {
    fn name(&self) -> String {
        match self {
            Self::Model(m) => m.name(),
            Self::Script(s) => s.name(),
        }
    }

    fn context_length(&self) -> usize {
        match self {
            Self::Model(m) => m.context_length(),
            Self::Script(s) => s.context_length(),
        }
    }

    async fn complete(
        &mut self,
        request: &Request<'_>,
        on_text: &mut TokenSink<'_>,
    ) -> Result<Completion, ModelError> {
        match self {
            Self::Model(m) => m.complete(request, on_text).await,
            Self::Script(s) => s.complete(request, on_text).await,
        }
    }
}

/// `--replay`: a JSON array of reply texts, or a trajectory whose replies are replayed.
fn replay_script(file: &Path) -> Result<ScriptedModel> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    ScriptedModel::from_json("replay", &text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))
}

/// Appends one SWE-bench predictions line in a single write, so concurrent runs appending to
/// the same file never interleave their lines.
fn append_prediction(path: &Path, instance_id: &str, model: &str, patch: &str) -> Result<()> {
    let mut line = serde_json::to_string(&serde_json::json!({
        "instance_id": instance_id,
        "model_name_or_path": model,
        "model_patch": patch,
    }))?;
    line.push('\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(line.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

fn save(t: &Trajectory, traj_path: &Path, patch_path: &Path) -> Result<()> {
    write_atomic(traj_path, t.to_json().as_bytes())?;
    write_atomic(patch_path, t.patch.as_bytes())
}

/// Writes through a temporary file so a reader never sees half a trajectory.
fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

fn preview(text: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: String = lines
        .iter()
        .take(max_lines)
        .map(|l| format!("  │ {}\n", truncate(l, 160)))
        .collect();
    if lines.len() > max_lines {
        out.push_str(&format!("  │ … {} more lines\n", lines.len() - max_lines));
    }
    out.trim_end().to_string()
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn default_out_dir(repo: &Path) -> PathBuf {
    let name = repo
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "repo".into());
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let models = lilypad_cli::download::default_cache_dir();
    models
        .parent()
        .unwrap_or(&models)
        .join("runs")
        .join(format!("{name}-{stamp}"))
}
