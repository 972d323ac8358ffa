//! The agent loop driven by scripted models: a bug fixed end to end, replay of a recorded run,
//! malformed calls, and every way a run ends.

use std::cell::RefCell;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use lilypad_agent::archive::import_dir;
use lilypad_agent::{
    AgentConfig, AgentEvent, Exit, ExternalShell, FinishReason, ImportLimits, RepoPath, Repository,
    Role, ScriptedModel, ShellOutput, Toolbox, Trajectory, VirtualRepo, VirtualShell, run_agent,
};

fn example(name: &str) -> VirtualRepo {
    let dir = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../examples")
    .join(name);
    import_dir("/repo", &dir, ImportLimits::default()).expect("example imports")
}

fn call(name: &str, args: serde_json::Value) -> String {
    format!(
        "<tool_call>\n{}\n</tool_call>",
        serde_json::json!({"name": name, "arguments": args})
    )
}

/// A model that reads the buggy file, fixes it with Edit, checks with grep and submits.
fn fixing_script() -> Vec<String> {
    vec![
        format!(
            "<think>\nThe century rule is wrong; read the file first.\n</think>\n\n{}",
            call(
                "Read",
                serde_json::json!({"file_path": "/repo/calendar_utils.py"})
            )
        ),
        format!(
            "Found it.\n{}",
            call(
                "Edit",
                serde_json::json!({
                    "file_path": "/repo/calendar_utils.py",
                    "old_string": "    if year % 100 == 0:\n        return True",
                    "new_string": "    if year % 100 == 0:\n        return year % 400 == 0"
                })
            )
        ),
        format!(
            "{}\n{}",
            call(
                "Bash",
                serde_json::json!({"command": "grep -n 400 calendar_utils.py", "description": "check"})
            ),
            call("Glob", serde_json::json!({"pattern": "**/*.py"}))
        ),
        "Fixed: century years are leap years only when divisible by 400.".to_string(),
    ]
}

fn run(model: &mut ScriptedModel, repo: &mut VirtualRepo, config: &AgentConfig) -> Trajectory {
    let mut toolbox = Toolbox::new(Box::new(VirtualShell::new()));
    pollster::block_on(run_agent(
        model,
        repo,
        &mut toolbox,
        "Fix is_leap_year(1900).",
        config,
        &mut |_| true,
    ))
    .expect("the run completes")
}

#[test]
fn scripted_model_fixes_the_example_bug() {
    let mut repo = example("leap-year");
    let script = fixing_script();
    let texts: Vec<&str> = script.iter().map(String::as_str).collect();
    let mut model = ScriptedModel::new("scripted", &texts);
    let t = run(&mut model, &mut repo, &AgentConfig::default());

    assert_eq!(t.exit, Some(Exit::Submitted));
    assert_eq!(t.steps.len(), 4);
    let read = &t.steps[0].calls[0].observation;
    assert!(
        read.lines().any(|l| l == "     6\t    if year % 4 != 0:"),
        "{read}"
    );
    assert!(
        !t.steps[1].calls[0].is_error,
        "{}",
        t.steps[1].calls[0].observation
    );
    assert_eq!(t.steps[2].calls.len(), 2, "parallel calls both run");
    assert!(
        t.steps[2].calls[0]
            .observation
            .contains("return year % 400 == 0")
    );
    assert!(
        t.steps[2].calls[1]
            .observation
            .contains("/repo/test_calendar_utils.py")
    );
    let fixed = String::from_utf8(
        repo.read(&RepoPath::new("calendar_utils.py").unwrap())
            .unwrap(),
    )
    .unwrap();
    assert!(fixed.contains("return year % 400 == 0"));
    assert!(
        t.patch
            .starts_with("diff --git a/calendar_utils.py b/calendar_utils.py\n"),
        "{}",
        t.patch
    );
    assert!(t.patch.contains("@@ -6,7 +6,7 @@"), "{}", t.patch);
    assert!(
        t.patch
            .contains("\n-        return True\n+        return year % 400 == 0\n"),
        "{}",
        t.patch
    );
    // The patch takes the original files to the edited ones.
    let mut files = example("leap-year").snapshot().unwrap();
    lilypad_agent::patch::apply(&mut files, &t.patch).unwrap();
    assert_eq!(files, repo.snapshot().unwrap());
    // Thinking is kept apart from the visible reply, and every call and result is in the history.
    assert_eq!(
        t.messages[2].reasoning_content.as_deref(),
        Some("The century rule is wrong; read the file first.")
    );
    let roles: Vec<_> = t
        .messages
        .iter()
        .map(|m| serde_json::to_value(m.role).unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "tool",
            "assistant"
        ]
    );
}

#[test]
fn replaying_a_trajectory_reproduces_patch_and_record() {
    let script = fixing_script();
    let texts: Vec<&str> = script.iter().map(String::as_str).collect();
    let recorded = run(
        &mut ScriptedModel::new("scripted", &texts),
        &mut example("leap-year"),
        &AgentConfig::default(),
    );
    let reloaded = Trajectory::from_json(&recorded.to_json()).expect("trajectory JSON reads back");
    assert_eq!(reloaded, recorded);

    let mut replay_model = ScriptedModel::from_trajectory(&reloaded);
    let replayed = run(
        &mut replay_model,
        &mut example("leap-year"),
        &reloaded.config,
    );
    assert_eq!(replayed.patch, recorded.patch);
    assert_eq!(replayed.without_timings(), recorded.without_timings());
}

#[test]
fn malformed_calls_are_reported_and_the_run_goes_on() {
    let mut repo = example("roman");
    let mut model = ScriptedModel::new(
        "scripted",
        &[
            "<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"file_path\": \"/repo/roman.py\"\n</tool_call>",
            "<tool_call>\n{\"name\": \"Frobnicate\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"file_path\": \"/etc/passwd\"}}\n</tool_call>",
            "I cannot fix this.",
        ],
    );
    let t = run(&mut model, &mut repo, &AgentConfig::default());
    assert_eq!(t.exit, Some(Exit::Submitted));
    let first = &t.steps[0].calls[0];
    assert!(first.call.is_none() && first.is_error);
    assert!(
        first
            .observation
            .contains("could not be read: invalid JSON"),
        "{}",
        first.observation
    );
    assert!(t.steps[1].calls[0].is_error && t.steps[1].calls[0].observation.contains("Frobnicate"));
    assert!(
        t.steps[2].calls[0].observation.contains("outside"),
        "{}",
        t.steps[2].calls[0].observation
    );
    assert_eq!(t.patch, "");
}

#[test]
fn consecutive_format_errors_end_the_run() {
    let bad = "<tool_call>\nnot json\n</tool_call>";
    let mut model = ScriptedModel::new("scripted", &[bad, bad, bad, "never reached"]);
    let t = run(&mut model, &mut example("roman"), &AgentConfig::default());
    assert_eq!(t.exit, Some(Exit::FormatErrors));
    assert_eq!(t.steps.len(), 3);
}

#[test]
fn step_limit_and_context_limit() {
    let read = call("Read", serde_json::json!({"file_path": "/repo/roman.py"}));
    let texts = vec![read.as_str(); 10];
    let config = AgentConfig {
        max_steps: 3,
        ..AgentConfig::default()
    };
    let t = run(
        &mut ScriptedModel::new("scripted", &texts),
        &mut example("roman"),
        &config,
    );
    assert_eq!((t.exit, t.steps.len()), (Some(Exit::StepLimit), 3));

    // The scripted model counts words as tokens: the file read in step 1 overflows 200.
    let mut small = ScriptedModel::new("scripted", &texts).with_context(200);
    let t = run(&mut small, &mut example("roman"), &AgentConfig::default());
    assert_eq!((t.exit, t.steps.len()), (Some(Exit::ContextLimit), 1));
}

#[test]
fn a_reply_cut_by_the_token_budget_is_not_an_answer() {
    let script = fixing_script();
    let mut recorded = run(
        &mut ScriptedModel::new(
            "scripted",
            &script.iter().map(String::as_str).collect::<Vec<_>>(),
        ),
        &mut example("leap-year"),
        &AgentConfig::default(),
    );
    // Rewrite step 1 as cut off mid-thought, then replay: the loop must ask again, not submit.
    recorded.steps.insert(0, recorded.steps[0].clone());
    recorded.steps[0].raw_output = "<think>\nLet me think about centuries and".into();
    recorded.steps[0].finish = FinishReason::Length;
    let t = run(
        &mut ScriptedModel::from_trajectory(&recorded),
        &mut example("leap-year"),
        &recorded.config,
    );
    assert_eq!(t.exit, Some(Exit::Submitted));
    assert!(t.steps[0].calls[0].observation.contains("cut off"));
    assert!(t.patch.contains("year % 400 == 0"));
}

#[test]
fn the_observer_can_abort_and_sees_every_event() {
    let script = fixing_script();
    let texts: Vec<&str> = script.iter().map(String::as_str).collect();
    let mut model = ScriptedModel::new("scripted", &texts);
    let mut repo = example("leap-year");
    let mut toolbox = Toolbox::new(Box::new(VirtualShell::new()));
    let (mut steps, mut tools, mut text) = (0, 0, String::new());
    let t = pollster::block_on(run_agent(
        &mut model,
        &mut repo,
        &mut toolbox,
        "task",
        &AgentConfig::default(),
        &mut |e| {
            match e {
                AgentEvent::StepStarted(_) => steps += 1,
                AgentEvent::ToolFinished(_) => tools += 1,
                AgentEvent::Text(s) => text.push_str(s),
                _ => {}
            }
            steps < 2
        },
    ))
    .unwrap();
    assert_eq!(t.exit, Some(Exit::Aborted));
    assert_eq!((steps, tools), (2, 1));
    assert!(text.starts_with("<think>\nThe century rule"));
    assert_eq!(t.patch, "", "the edit of step 2 never ran");
}

/// An abort between two tool calls of one reply, from either callback: the calls not run yet
/// are answered "not run", so every call has its reply and the conversation can continue.
#[test]
fn an_abort_between_tool_calls_answers_every_call() {
    let reply = format!(
        "{}\n{}\n{}",
        call("Glob", serde_json::json!({"pattern": "*.py"})),
        call("Bash", serde_json::json!({"command": "echo hi"})),
        call(
            "Read",
            serde_json::json!({"file_path": "/repo/calendar_utils.py"})
        )
    );
    for stop_at_finish in [false, true] {
        let mut model = ScriptedModel::new("scripted", &[reply.as_str(), "never asked"]);
        let mut repo = example("leap-year");
        let mut toolbox = Toolbox::new(Box::new(VirtualShell::new()));
        let mut ran = Vec::new();
        let t = pollster::block_on(run_agent(
            &mut model,
            &mut repo,
            &mut toolbox,
            "task",
            &AgentConfig::default(),
            &mut |e| match e {
                AgentEvent::ToolStarted(call) => stop_at_finish || call.name != "Bash",
                AgentEvent::ToolFinished(record) => {
                    ran.push(record.call.as_ref().unwrap().name.clone());
                    !stop_at_finish
                }
                _ => true,
            },
        ))
        .unwrap();
        assert_eq!(t.exit, Some(Exit::Aborted));
        assert_eq!(ran, ["Glob"]);
        let calls = &t.steps[0].calls;
        assert_eq!(calls.len(), 3);
        assert!(!calls[0].is_error);
        for not_run in &calls[1..] {
            assert!(not_run.is_error);
            assert_eq!(
                not_run.observation,
                "Not run: the run was stopped before this call."
            );
        }
        // The assistant's three calls, then a reply to each.
        let tail: Vec<_> = t.messages[2..].iter().map(|m| m.role).collect();
        assert_eq!(
            tail,
            [Role::Assistant, Role::Tool, Role::Tool, Role::Tool],
            "{stop_at_finish}"
        );
        assert_eq!(t.messages[2].tool_calls.len(), 3);
    }
}

/// A terminal that answers the first command and refuses the rest, recording what it was asked.
struct Terminal {
    asked: Rc<RefCell<Vec<(String, Duration)>>>,
}

impl ExternalShell for Terminal {
    fn run<'a>(
        &'a mut self,
        command: &'a str,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<ShellOutput, String>> + 'a>> {
        let mut asked = self.asked.borrow_mut();
        asked.push((command.to_string(), timeout));
        let answer = if asked.len() == 1 {
            Ok(ShellOutput {
                output: "1 failed, 10 passed\n".into(),
                exit_code: Some(1),
                timed_out: false,
            })
        } else {
            Err("The user did not allow this command.".to_string())
        };
        Box::pin(std::future::ready(answer))
    }
}

#[test]
fn an_external_shell_runs_the_agents_bash_calls_and_its_refusals_reach_the_model() {
    let bash = |command: &str, timeout: Option<u64>| {
        let mut args = serde_json::json!({"command": command, "description": "Run the tests"});
        if let Some(t) = timeout {
            args["timeout"] = t.into();
        }
        call("Bash", args)
    };
    let replies = [
        bash("python -m pytest -q", None),
        format!(
            "{}\n{}",
            bash("rm -rf build", Some(900_000)),
            call("Glob", serde_json::json!({"pattern": "*.py"}))
        ),
        call("Bash", serde_json::json!({"description": "no command"})),
        "Done.".to_string(),
    ];
    let texts: Vec<&str> = replies.iter().map(String::as_str).collect();
    let mut model = ScriptedModel::new("scripted", &texts);
    let mut repo = example("leap-year");
    let asked = Rc::new(RefCell::new(Vec::new()));
    let mut toolbox = Toolbox::new(Box::new(VirtualShell::new()));
    toolbox.set_external_shell(Some(Box::new(Terminal {
        asked: asked.clone(),
    })));
    let t = pollster::block_on(run_agent(
        &mut model,
        &mut repo,
        &mut toolbox,
        "task",
        &AgentConfig::default(),
        &mut |_| true,
    ))
    .unwrap();
    assert_eq!(t.exit, Some(Exit::Submitted));
    // The terminal's output and exit code read as the virtual shell's would.
    assert_eq!(
        t.steps[0].calls[0].observation,
        "1 failed, 10 passed\nExit code: 1"
    );
    assert!(t.steps[0].calls[0].is_error);
    // A refusal is the tool's error; other tools still run in the repository.
    assert_eq!(
        t.steps[1].calls[0].observation,
        "The user did not allow this command."
    );
    assert!(t.steps[1].calls[0].is_error);
    assert!(
        t.steps[1].calls[1]
            .observation
            .contains("calendar_utils.py"),
        "{}",
        t.steps[1].calls[1].observation
    );
    // Arguments are checked before the terminal is asked; timeouts are held to the maximum.
    assert!(
        t.steps[2].calls[0].observation.contains("command"),
        "{}",
        t.steps[2].calls[0].observation
    );
    assert_eq!(
        *asked.borrow(),
        [
            (
                "python -m pytest -q".to_string(),
                Duration::from_millis(120_000)
            ),
            ("rm -rf build".to_string(), Duration::from_millis(600_000))
        ]
    );
}

/// Python with pytest for the native end-to-end check, if this machine has one
/// (`scripts/test.sh` provides it; `LILYPAD_REQUIRE_PYTEST=1` makes its absence a failure).
#[cfg(unix)]
fn python_with_pytest() -> Option<String> {
    for python in ["python3", "python"] {
        let ok = std::process::Command::new(python)
            .args(["-m", "pytest", "--version"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(python.to_string());
        }
    }
    assert!(
        std::env::var("LILYPAD_REQUIRE_PYTEST").as_deref() != Ok("1"),
        "no python with pytest on PATH"
    );
    eprintln!("skipping: no python with pytest on PATH");
    None
}

#[cfg(unix)]
#[test]
fn scripted_model_fixes_a_real_repository_with_real_pytest() {
    let Some(python) = python_with_pytest() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("lilypad-agent-native-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../examples/roman");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["roman.py", "test_roman.py"] {
        std::fs::copy(src.join(name), dir.join(name)).unwrap();
    }
    let mut repo = lilypad_agent::DiskRepo::open(&dir).unwrap();
    let root = repo.root().to_string();
    let pytest = format!("{python} -m pytest -q -p no:cacheprovider");
    let fix = serde_json::json!({
        "file_path": format!("{root}/roman.py"),
        "old_string": "        total += VALUES[ch]\n    return total",
        "new_string": "        total += VALUES[ch]\n    for a, b in zip(numeral.upper(), numeral.upper()[1:]):\n        if VALUES[a] < VALUES[b]:\n            total -= 2 * VALUES[a]\n    return total",
    });
    let script = [
        call(
            "Bash",
            serde_json::json!({"command": pytest, "description": "run the tests"}),
        ),
        call("Edit", fix),
        call(
            "Bash",
            serde_json::json!({"command": pytest, "description": "run the tests again"}),
        ),
        "Subtractive pairs are now subtracted; the tests pass.".to_string(),
    ];
    let texts: Vec<&str> = script.iter().map(String::as_str).collect();
    let mut toolbox = Toolbox::new(Box::new(lilypad_agent::NativeShell::new(dir.clone())));
    let t = pollster::block_on(run_agent(
        &mut ScriptedModel::new("scripted", &texts),
        &mut repo,
        &mut toolbox,
        "Fix from_roman.",
        &AgentConfig::default(),
        &mut |_| true,
    ))
    .unwrap();
    let before = &t.steps[0].calls[0];
    assert!(
        before.is_error && before.observation.contains("2 failed"),
        "{}",
        before.observation
    );
    assert!(
        !t.steps[1].calls[0].is_error,
        "{}",
        t.steps[1].calls[0].observation
    );
    let after = &t.steps[2].calls[0];
    assert!(
        !after.is_error && after.observation.contains("4 passed"),
        "{}",
        after.observation
    );
    assert_eq!(t.exit, Some(Exit::Submitted));
    // The patch is the edit and nothing else (pytest's caches are off; nothing else was written).
    assert!(
        t.patch.starts_with("diff --git a/roman.py b/roman.py\n"),
        "{}",
        t.patch
    );
    assert_eq!(t.patch.matches("diff --git").count(), 1, "{}", t.patch);
    std::fs::remove_dir_all(&dir).ok();
}
