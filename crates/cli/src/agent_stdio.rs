//! `lilypad agent-stdio`: the coding agent as a child process speaking JSON lines, for editors
//! (the VS Code extension's native path). The agent works on an in-memory snapshot of the files
//! with the browser's shell, so nothing is written to disk: the answer is the changed files, the
//! patch and the trajectory, and the editor decides what to apply. Every line on stdout is one
//! [`Event`]; stderr carries only human-readable diagnostics.
//!
//! stdin: the first line is the request. After it, only a `{"type":"cancel"}` line stops the
//! run; other lines are ignored, and closing stdin changes nothing (an editor may close it
//! once the request is sent). An editor that goes away is noticed when writing to stdout
//! fails, which cancels the run as well. Every failure, a request that is not UTF-8 included,
//! ends with one `error` event and exit status 2.

use std::io::{BufRead, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use lilypad_agent::archive::{ImportLimits, import_dir};
use lilypad_agent::shell::LocalFuture;
use lilypad_agent::{
    AgentConfig, AgentEvent, Baseline, Change, CommandTag, LanguageModel, ProgramIo, PythonRunner,
    RepoError, RepoPath, Repository, Sampling, Sandbox, ScriptedModel, Toolbox, Trajectory,
    VirtualRepo, VirtualShell, run_agent,
};
use lilypad_chat::ChatSession;
use serde_json::Value;

use lilypad_cli::stdio_protocol::{ErrorCode, Event, FileResult, ModelSpec, RepoSpec, Request};
use lilypad_cli::{Loaded, ModelArgs};

#[derive(Args)]
pub struct AgentArgs {}

#[derive(Debug)]
pub struct Failure(pub ErrorCode, pub String);

pub fn run(args: &AgentArgs) -> anyhow::Result<()> {
    let AgentArgs {} = args;
    let stdout = std::io::stdout();
    let cancel = Arc::new(AtomicBool::new(false));
    let gone = cancel.clone();
    let mut emit = |event: &Event| {
        let mut out = stdout.lock();
        let written = serde_json::to_writer(&mut out, event)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        // A closed stdout means the editor went away: stop the run.
        if written.is_err() {
            gone.store(true, Ordering::SeqCst);
        }
    };
    let mut first = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_REQUEST_BYTES + 1)
        .read_until(b'\n', &mut first)?;
    let flag = cancel.clone();
    std::thread::spawn(move || {
        // Only an explicit cancel stops the run; end of input does not.
        for line in std::io::stdin().lock().split(b'\n') {
            let Ok(line) = line else { return };
            if serde_json::from_slice::<Value>(&line).is_ok_and(|v| v["type"] == "cancel") {
                flag.store(true, Ordering::SeqCst);
                return;
            }
        }
    });
    let served = request_text(&first).and_then(|line| serve(line, &cancel, &mut emit));
    match served {
        Ok(()) => Ok(()),
        Err(Failure(code, message)) => {
            emit(&Event::Error {
                code,
                message: message.clone(),
            });
            std::process::exit(2);
        }
    }
}

/// The longest request line read: the files of a `files` repository are in it.
const MAX_REQUEST_BYTES: u64 = 512 << 20;

/// The first line of stdin as text, or why it is no request.
fn request_text(line: &[u8]) -> Result<&str, Failure> {
    if line.len() as u64 > MAX_REQUEST_BYTES {
        return Err(Failure(
            ErrorCode::BadRequest,
            format!(
                "the request line is longer than {} MiB",
                MAX_REQUEST_BYTES >> 20
            ),
        ));
    }
    std::str::from_utf8(line).map_err(|e| {
        Failure(
            ErrorCode::BadRequest,
            format!("the request is not UTF-8 text (byte {})", e.valid_up_to()),
        )
    })
}

/// Reads `line` as a request and runs it, reporting through `emit`.
pub fn serve(line: &str, cancel: &AtomicBool, emit: &mut dyn FnMut(&Event)) -> Result<(), Failure> {
    if line.trim().is_empty() {
        return Err(Failure(
            ErrorCode::BadRequest,
            "no request: stdin was empty".into(),
        ));
    }
    let request: Request = serde_json::from_str(line)
        .map_err(|e| Failure(ErrorCode::BadRequest, format!("invalid request: {e}")))?;
    let Request::Solve {
        task,
        model,
        repo,
        root,
        settings,
    } = request;
    let mut repo = load_repo(&root, repo).map_err(|e| Failure(ErrorCode::Repo, e.to_string()))?;
    emit(&Event::Started {
        repo_root: repo.root().into(),
        files: repo.baseline().len(),
    });
    let config = AgentConfig {
        max_steps: settings.max_steps,
        max_tokens_per_step: settings.max_tokens_per_step,
        enable_thinking: settings.thinking,
        sampling: Sampling {
            temperature: settings.temperature,
            top_p: settings.top_p,
            top_k: settings.top_k,
            seed: settings.seed,
            ..Sampling::default()
        },
        ..AgentConfig::default()
    };
    let mut shell =
        VirtualShell::new().with_version_control(Box::new(Baseline(repo.baseline().clone())));
    if settings.python {
        let sandbox = match settings.sandbox {
            true => Sandbox::detect().map_err(|e| Failure(ErrorCode::BadRequest, e.to_string()))?,
            false => Sandbox::Off,
        };
        shell = shell.with_python(Box::new(ScratchPython { sandbox }));
    }
    let mut toolbox = Toolbox::new(Box::new(shell));
    let trajectory = match model {
        ModelSpec::Scripted(path) => {
            let mut model = scripted(&path).map_err(|e| Failure(ErrorCode::Model, e))?;
            emit(&Event::ModelReady {
                model: model.name(),
                lora: None,
            });
            solve(
                &mut model,
                &mut repo,
                &mut toolbox,
                &task,
                &config,
                cancel,
                emit,
            )?
        }
        ModelSpec::Gguf {
            path,
            context,
            adapter,
            lora,
            draft,
        } => {
            let draft = draft
                .map(|d| d.parse::<lilypad_engine::Draft>())
                .transpose()
                .map_err(|e| Failure(ErrorCode::Model, format!("draft: {e}")))?;
            let args = ModelArgs {
                model: path.clone(),
                sha256: None,
                lora,
                quantize: Default::default(),
                context,
                kv_cache: lilypad_engine::ModelOptions::default().kv_cache,
                draft,
                adapter,
                quiet: true,
            };
            let loaded = Loaded::open_with_progress(&args, 1, &mut |p| {
                emit(&Event::LoadProgress {
                    done_bytes: p.done_bytes,
                    total_bytes: p.total_bytes,
                    tensor: p.tensor.clone(),
                })
            })
            .map_err(|e| Failure(ErrorCode::Model, format!("{e:#}")))?;
            let name = lilypad_cli::model_name(&path);
            let lora = loaded.lora.clone();
            let mut session = ChatSession::new(loaded.model, loaded.tok, &name)
                .map_err(|e| Failure(ErrorCode::Model, e.to_string()))?;
            emit(&Event::ModelReady { model: name, lora });
            solve(
                &mut session,
                &mut repo,
                &mut toolbox,
                &task,
                &config,
                cancel,
                emit,
            )?
        }
    };
    let mut text_budget = MAX_CHANGES_TEXT_BYTES;
    let changes = repo
        .changed_files()
        .into_iter()
        .map(|(path, change)| {
            let mut text = match change {
                Change::Deleted => None,
                _ => repo
                    .read(&path)
                    .ok()
                    .and_then(|d| String::from_utf8(d).ok()),
            };
            // Past the limits a change is named without its contents (the patch names it too).
            let too_large = text
                .as_ref()
                .is_some_and(|t| t.len() > MAX_CHANGE_TEXT_BYTES || t.len() > text_budget);
            if too_large {
                text = None;
            }
            text_budget -= text.as_ref().map_or(0, String::len);
            let change = match change {
                Change::Added => "added",
                Change::Modified => "modified",
                Change::Deleted => "deleted",
            };
            FileResult {
                path: path.as_str().into(),
                change,
                text,
                too_large,
            }
        })
        .collect();
    emit(&Event::Done {
        exit: trajectory.exit.clone(),
        patch: trajectory.patch.clone(),
        changes,
        trajectory: Box::new(trajectory),
    });
    Ok(())
}

fn solve<M: LanguageModel>(
    model: &mut M,
    repo: &mut VirtualRepo,
    toolbox: &mut Toolbox,
    task: &str,
    config: &AgentConfig,
    cancel: &AtomicBool,
    emit: &mut dyn FnMut(&Event),
) -> Result<Trajectory, Failure> {
    pollster::block_on(run_agent(
        model,
        repo,
        toolbox,
        task,
        config,
        &mut |event| {
            match event {
                AgentEvent::StepStarted(index) => emit(&Event::StepStarted { index }),
                AgentEvent::Text(text) => emit(&Event::Text { text: text.into() }),
                AgentEvent::ToolStarted(call) => emit(&Event::ToolStarted {
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                }),
                AgentEvent::ToolFinished(r) => emit(&Event::ToolFinished {
                    name: r.call.as_ref().map(|c| c.name.clone()),
                    observation: r.observation.clone(),
                    is_error: r.is_error,
                    duration_ms: r.duration_ms,
                }),
                // The loop reports the finished run once more with its exit set: `done` says that.
                AgentEvent::StepFinished(t) if t.exit.is_none() => {
                    if let Some(s) = t.steps.last() {
                        let rate =
                            |n: usize, ms: f64| if ms > 0.0 { n as f64 / ms * 1e3 } else { 0.0 };
                        emit(&Event::StepFinished {
                            index: s.index,
                            prompt_tokens: s.prompt_tokens,
                            prefilled_tokens: s.prefilled_tokens,
                            generated_tokens: s.generated_tokens,
                            prefill_ms: s.prefill_ms,
                            decode_ms: s.decode_ms,
                            prefill_tokens_per_s: rate(s.prefilled_tokens, s.prefill_ms),
                            decode_tokens_per_s: rate(s.generated_tokens, s.decode_ms),
                        });
                    }
                }
                AgentEvent::StepFinished(_) => {}
            }
            !cancel.load(Ordering::SeqCst)
        },
    ))
    .map_err(|e| Failure(ErrorCode::Agent, e.to_string()))
}

/// Workspaces larger than this are refused rather than copied into memory.
const LIMITS: ImportLimits = ImportLimits {
    max_entries: 20_000,
    max_total_bytes: 256 << 20,
};

/// What the in-memory repository may grow to while the agent works.
const MAX_REPO_BYTES: u64 = 512 << 20;

/// A changed file's new text is sent whole up to this size; a larger one is named without it.
const MAX_CHANGE_TEXT_BYTES: usize = 8 << 20;
/// The texts of all changed files together, in the `done` event.
const MAX_CHANGES_TEXT_BYTES: usize = 32 << 20;

fn load_repo(root: &str, spec: RepoSpec) -> Result<VirtualRepo, RepoError> {
    if !root.starts_with('/') {
        return Err(RepoError::InvalidPath {
            path: root.into(),
            reason: "the root must be absolute, like /repo",
        });
    }
    if root.trim_matches('/').is_empty() {
        return Err(RepoError::InvalidPath {
            path: root.into(),
            reason: "the root must be a folder below /, like /repo",
        });
    }
    let repo = match spec {
        RepoSpec::Folder(folder) => import_dir(root, &folder, LIMITS)?,
        RepoSpec::Files(files) => {
            let mut repo = VirtualRepo::new(root).with_max_bytes(MAX_REPO_BYTES);
            for f in files {
                repo.write(&RepoPath::new(&f.path)?, f.text.as_bytes())?;
            }
            repo.set_baseline();
            repo
        }
    };
    // What the run's commands may add on top of what was loaded.
    Ok(repo.with_max_bytes(MAX_REPO_BYTES))
}

fn scripted(path: &Path) -> Result<ScriptedModel, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let name = format!(
        "scripted:{}",
        path.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into())
    );
    ScriptedModel::from_json(&name, &text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `python`/`pytest` with the machine's Python in a scratch copy of the snapshot, then
/// copies the files it changed back into the snapshot (caches excluded by the snapshot rules).
/// The workspace itself is never touched.
struct ScratchPython {
    sandbox: Sandbox,
}

/// The longest a program may run, whatever the command's own time limit leaves it.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(120);

impl PythonRunner for ScratchPython {
    /// Runs the program to its end before answering (a native process, waited on here).
    fn run<'a>(
        &'a mut self,
        repo: &'a mut dyn Repository,
        cwd: &'a RepoPath,
        argv: &'a [String],
        io: &'a mut ProgramIo,
    ) -> LocalFuture<'a, i32> {
        let status = match run_python(&self.sandbox, repo, cwd, argv, io) {
            Ok(code) => code,
            Err(e) => {
                io.write_stderr(
                    format!("{}: {e}\n", argv.first().map_or("python", String::as_str)).as_bytes(),
                );
                126
            }
        };
        Box::pin(std::future::ready(status))
    }
}

fn run_python(
    sandbox: &Sandbox,
    repo: &mut dyn Repository,
    cwd: &RepoPath,
    argv: &[String],
    io: &mut ProgramIo,
) -> Result<i32, String> {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "lilypad-python-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::SeqCst)
    ));
    let _cleanup = RemoveOnDrop(dir.clone());
    let before = repo.snapshot().map_err(|e| e.to_string())?;
    for (path, data) in &before {
        let file = dir.join(path.as_str());
        std::fs::create_dir_all(file.parent().unwrap_or(&dir)).map_err(|e| e.to_string())?;
        std::fs::write(&file, data).map_err(|e| e.to_string())?;
    }
    std::fs::create_dir_all(dir.join(cwd.as_str())).map_err(|e| e.to_string())?;
    let python = std::env::var("LILYPAD_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut words = vec![python.clone()];
    match argv.first().map(String::as_str) {
        Some("pytest") => words.extend(["-m".into(), "pytest".into()]),
        Some("pip" | "pip3") => return Err("installing packages is not available here".into()),
        _ => {}
    }
    words.extend(argv[1.min(argv.len())..].iter().cloned());
    // The scratch copy is the sandbox's one writable folder; the program starts in `cwd`.
    let script = format!(
        "cd {} && exec {}",
        shell_quote(&dir.join(cwd.as_str()).to_string_lossy()),
        words
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (mut cmd, _cgroup) = sandbox.command(&dir, &script);
    // Its own process group and a tag in every descendant's environment: on timeout the whole
    // tree dies, however it detached, and no grandchild keeps the output pipes open.
    let tag = CommandTag::new();
    tag.apply(&mut cmd);
    cmd.env("PYTHONDONTWRITEBYTECODE", "1")
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {python}: {e}"))?;
    let input = io.stdin().to_vec();
    let stdin = child.stdin.take();
    // Fed from a thread: a program that never reads its input must not block this one.
    std::thread::spawn(move || {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&input);
        }
    });
    let out = drain_capped(child.stdout.take());
    let err = drain_capped(child.stderr.take());
    let limit = io
        .time_left()
        .map_or(PYTHON_TIMEOUT, |t| t.min(PYTHON_TIMEOUT));
    let started = std::time::Instant::now();
    let finished = loop {
        if lilypad_agent::shell::exited(&mut child) {
            break true;
        }
        if started.elapsed() > limit {
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // Whatever the program left running goes with it (the child is not reaped yet, so its
    // pid still names its group).
    tag.kill_tree(child.id());
    let waited = child.wait();
    let status = if finished { waited.ok() } else { None };
    let collect = |drained: std::sync::mpsc::Receiver<Vec<u8>>| {
        drained
            .recv_timeout(Duration::from_millis(500))
            .unwrap_or_default()
    };
    io.write_stdout(&collect(out));
    io.write_stderr(&collect(err));
    // Bring the program's file changes back into the snapshot.
    let after = import_dir(repo.root(), &dir, LIMITS).map_err(|e| e.to_string())?;
    let after = after.baseline();
    for (path, data) in after {
        if before.get(path) != Some(data) {
            repo.write(path, data).map_err(|e| e.to_string())?;
        }
    }
    for path in before.keys().filter(|p| !after.contains_key(*p)) {
        repo.remove(path).map_err(|e| e.to_string())?;
    }
    match status {
        Some(s) => Ok(s.code().unwrap_or(128)),
        None => {
            io.write_stderr(format!("timed out after {:.1} s\n", limit.as_secs_f64()).as_bytes());
            Ok(124)
        }
    }
}

/// What one stream of a Python run keeps; the rest is counted and dropped.
const PYTHON_OUTPUT_LIMIT: usize = 1 << 20;

/// Reads `stream` to its end on a thread, keeping its first [`PYTHON_OUTPUT_LIMIT`] bytes and
/// a note of how many more there were.
fn drain_capped(stream: Option<impl Read + Send + 'static>) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut dropped = 0u64;
        if let Some(mut stream) = stream {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let room = (PYTHON_OUTPUT_LIMIT - kept.len()).min(n);
                        kept.extend_from_slice(&buf[..room]);
                        dropped += (n - room) as u64;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        if dropped > 0 {
            kept.extend_from_slice(
                format!("\n[... {dropped} more bytes of output dropped ...]\n").as_bytes(),
            );
        }
        let _ = send.send(kept);
    });
    receive
}

/// `s` as one word for `bash -c`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_line(line: &str) -> (Result<(), Failure>, Vec<Value>) {
        let mut events = Vec::new();
        let cancel = AtomicBool::new(false);
        let result = serve(line, &cancel, &mut |e| {
            events.push(serde_json::to_value(e).unwrap())
        });
        (result, events)
    }

    #[test]
    fn bad_requests_are_typed_errors() {
        for (line, needle) in [
            ("", "stdin was empty"),
            ("{not json", "invalid request"),
            (r#"{"type":"fly"}"#, "unknown variant `fly`"),
            (r#"{"type":"solve","task":"t"}"#, "missing field"),
            (
                r#"{"type":"solve","task":"t","model":{"scripted":"x"},"repo":{"files":[]},"bogus":1}"#,
                "unknown field `bogus`",
            ),
        ] {
            let (result, events) = run_line(line);
            let Err(Failure(code, message)) = result else {
                panic!("{line} was accepted")
            };
            assert_eq!(code, ErrorCode::BadRequest, "{line}");
            assert!(message.contains(needle), "{line}: {message}");
            assert!(events.is_empty());
        }
    }

    #[test]
    fn repo_and_model_errors_name_their_cause() {
        let (result, _) = run_line(
            r#"{"type":"solve","task":"t","model":{"scripted":"/nonexistent.json"},"repo":{"files":[{"path":"../x","text":""}]}}"#,
        );
        assert!(matches!(result, Err(Failure(ErrorCode::Repo, _))));
        let (result, events) = run_line(
            r#"{"type":"solve","task":"t","model":{"scripted":"/nonexistent.json"},"repo":{"files":[{"path":"a.py","text":"x = 1\n"}]}}"#,
        );
        let Err(Failure(ErrorCode::Model, message)) = result else {
            panic!("{result:?}")
        };
        assert!(message.contains("/nonexistent.json"), "{message}");
        assert_eq!(events[0]["type"], "started");
        assert_eq!(events[0]["files"], 1);
    }

    #[test]
    fn a_scripted_run_edits_only_the_snapshot() {
        let dir = std::env::temp_dir().join(format!("lilypad-stdio-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("replies.json");
        let edit = r#"<tool_call>
{"name": "Edit", "arguments": {"file_path": "/repo/a.py", "old_string": "x = 1", "new_string": "x = 2"}}
</tool_call>"#;
        let bash = "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"git status --short; cat a.py\"}}\n</tool_call>";
        std::fs::write(
            &script,
            serde_json::to_string(&[edit, bash, "Done."]).unwrap(),
        )
        .unwrap();
        let line = serde_json::json!({
            "type": "solve", "task": "make x 2",
            "model": {"scripted": script},
            "repo": {"files": [{"path": "a.py", "text": "x = 1\n"}, {"path": "b/c.txt", "text": "c\n"}]},
        })
        .to_string();
        let (result, events) = run_line(&line);
        result.map_err(|f| f.1).unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(kinds.first(), Some(&"started"));
        assert_eq!(kinds.last(), Some(&"done"));
        assert_eq!(
            kinds.iter().filter(|k| **k == "step_finished").count(),
            3,
            "{kinds:?}"
        );
        let observation = events
            .iter()
            .filter(|e| e["type"] == "tool_finished")
            .nth(1)
            .unwrap();
        assert_eq!(
            observation["observation"], " M a.py\nx = 2",
            "{observation}"
        );
        let done = events.last().unwrap();
        assert_eq!(done["exit"]["reason"], "submitted");
        assert_eq!(
            done["changes"],
            serde_json::json!([{"path": "a.py", "change": "modified", "text": "x = 2\n"}])
        );
        assert!(done["patch"].as_str().unwrap().contains("-x = 1\n+x = 2\n"));
        assert_eq!(done["trajectory"]["steps"].as_array().unwrap().len(), 3);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// With `python`, pytest runs for real in the sandbox on a scratch copy: its result reaches
    /// the model, a file the program writes comes back into the snapshot, and the network is
    /// out of reach. Skipped without bwrap or pytest unless scripts/test.sh requires them.
    #[test]
    fn python_runs_sandboxed_on_a_scratch_copy() {
        let require = |v: &str| std::env::var(v).as_deref() == Ok("1");
        if let Err(e) = Sandbox::detect() {
            assert!(!require("LILYPAD_REQUIRE_SANDBOX"), "{e}");
            return eprintln!("skipped: {e}");
        }
        let has_pytest = std::process::Command::new("python3")
            .args(["-m", "pytest", "--version"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !has_pytest {
            assert!(
                !require("LILYPAD_REQUIRE_PYTEST"),
                "python3 -m pytest is missing"
            );
            return eprintln!("skipped: python3 -m pytest is missing");
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(format!("lilypad-stdio-py-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let call = |command: String| {
            format!(
                "<tool_call>\n{}\n</tool_call>",
                serde_json::json!({"name": "Bash", "arguments": {"command": command}})
            )
        };
        let replies = [
            call("pytest -q -p no:cacheprovider".into()),
            call("python -c \"open('out.txt', 'w').write('made')\"".into()),
            call(format!(
                "python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2); print('reached')\""
            )),
            "Done.".to_string(),
        ];
        let script = dir.join("replies.json");
        std::fs::write(&script, serde_json::to_string(&replies).unwrap()).unwrap();
        let line = serde_json::json!({
            "type": "solve", "task": "run the tests",
            "model": {"scripted": script},
            "repo": {"files": [{"path": "test_a.py", "text": "def test_a():\n    assert 1 + 1 == 2\n"}]},
            "settings": {"python": true},
        })
        .to_string();
        let (result, events) = run_line(&line);
        result.map_err(|f| f.1).unwrap();
        let observations: Vec<&str> = events
            .iter()
            .filter(|e| e["type"] == "tool_finished")
            .map(|e| e["observation"].as_str().unwrap())
            .collect();
        assert!(observations[0].contains("1 passed"), "{observations:?}");
        assert!(!observations[2].contains("reached"), "{observations:?}");
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err(), "the sandbox reached the host");
        let done = events.last().unwrap();
        let changes = done["changes"].as_array().unwrap();
        assert!(
            changes
                .iter()
                .any(|c| c["path"] == "out.txt" && c["text"] == "made"),
            "{done}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
