//! `lilypad solve` end to end with the real SmolLM2 on a copy of an example repository: the run
//! must stream progress and leave a valid trajectory and patch (a 135M model is not expected to
//! fix the bug).

use std::path::PathBuf;
use std::process::Command;

fn repo_root() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../..")
}

#[test]
fn solve_runs_the_agent_with_a_real_model() {
    let model = repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !model.exists() {
        assert!(
            std::env::var("LILYPAD_REQUIRE_MODEL").as_deref() != Ok("1"),
            "{} is missing: run scripts/fetch-model.sh",
            model.display()
        );
        eprintln!("skipping: {} is missing", model.display());
        return;
    }
    let work = std::env::temp_dir().join(format!("lilypad-solve-{}", std::process::id()));
    let repo = work.join("leap-year");
    std::fs::create_dir_all(&repo).unwrap();
    for name in ["calendar_utils.py", "test_calendar_utils.py", "TASK.md"] {
        std::fs::copy(
            repo_root().join("examples/leap-year").join(name),
            repo.join(name),
        )
        .unwrap();
    }
    let out = work.join("run");
    let output = Command::new(env!("CARGO_BIN_EXE_lilypad"))
        .args(["solve", "--quiet", "--model"])
        .arg(&model)
        .arg("--repo")
        .arg(&repo)
        .arg("--task-file")
        .arg(repo.join("TASK.md"))
        .arg("--out")
        .arg(&out)
        .arg("--predictions")
        .arg(work.join("predictions.jsonl"))
        .args(["--instance-id", "examples__leap-year-1"])
        .args([
            "--max-steps",
            "2",
            "--max-tokens-per-step",
            "40",
            "--temperature",
            "0",
            "--context",
            "2048",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("── step 1 ──") && stderr.contains("finished:"),
        "{stderr}"
    );

    let trajectory: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trajectory.json")).unwrap())
            .unwrap();
    let steps = trajectory["steps"].as_array().unwrap();
    assert!((1..=2).contains(&steps.len()), "{trajectory}");
    assert!(trajectory["exit"]["reason"].is_string(), "{trajectory}");
    assert!(
        steps[0]["prompt_tokens"].as_u64().unwrap() > 300,
        "tools are in the prompt"
    );
    assert_eq!(steps[0]["prefilled_tokens"], steps[0]["prompt_tokens"]);
    assert_eq!(
        trajectory["messages"][1]["content"],
        std::fs::read_to_string(repo.join("TASK.md")).unwrap()
    );
    // The patch file is exactly the trajectory's patch (empty when nothing was edited).
    assert_eq!(
        std::fs::read_to_string(out.join("patch.diff")).unwrap(),
        trajectory["patch"].as_str().unwrap()
    );
    // And the predictions line carries the same patch, in SWE-bench's fields.
    let predictions = std::fs::read_to_string(work.join("predictions.jsonl")).unwrap();
    let lines: Vec<&str> = predictions.lines().collect();
    assert_eq!(lines.len(), 1, "{predictions}");
    let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(line["instance_id"], "examples__leap-year-1");
    assert_eq!(
        line["model_name_or_path"],
        "SmolLM2-135M-Instruct.Q4_1.gguf"
    );
    assert_eq!(line["model_patch"], trajectory["patch"]);
    std::fs::remove_dir_all(&work).ok();
}

/// Without bubblewrap `solve` refuses to start (before loading anything) and says how to
/// install it or opt out.
#[test]
fn solve_without_a_sandbox_refuses_to_start() {
    let repo = std::env::temp_dir().join(format!("lilypad-solve-nobwrap-{}", std::process::id()));
    std::fs::create_dir_all(&repo).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_lilypad"))
        .args([
            "solve",
            "--model",
            "/nonexistent.gguf",
            "--task",
            "t",
            "--repo",
        ])
        .arg(&repo)
        .env("PATH", repo.join("no-bwrap-here"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("apt install bubblewrap") && stderr.contains("--no-sandbox"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("nonexistent.gguf"),
        "checked before the model: {stderr}"
    );
    std::fs::remove_dir_all(&repo).unwrap();
}

fn copy_example(to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for name in ["calendar_utils.py", "test_calendar_utils.py"] {
        std::fs::copy(
            repo_root().join("examples/leap-year").join(name),
            to.join(name),
        )
        .unwrap();
    }
}

fn solve_replay(repo: &std::path::Path, replay: &std::path::Path, out: &std::path::Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_lilypad"))
        .args([
            "solve",
            "--no-sandbox",
            "--task",
            "Fix the century rule.",
            "--replay",
        ])
        .arg(replay)
        .arg("--repo")
        .arg(repo)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    stderr
}

/// `--replay` runs the native agent (disk repository, real shell) on scripted replies, and a
/// recorded trajectory replays to the same patch on a fresh copy.
#[test]
fn solve_replays_scripted_replies_and_recorded_runs() {
    let work = tempfile::tempdir().unwrap();
    let call = |name: &str, args: serde_json::Value| {
        format!(
            "<tool_call>\n{}\n</tool_call>",
            serde_json::json!({"name": name, "arguments": args})
        )
    };
    let script = serde_json::json!([
        call(
            "Edit",
            serde_json::json!({
                "file_path": "calendar_utils.py",
                "old_string": "    if year % 100 == 0:\n        return True",
                "new_string": "    if year % 100 == 0:\n        return year % 400 == 0"
            })
        ),
        call(
            "Bash",
            serde_json::json!({"command": "grep -c 'return year % 400' calendar_utils.py"})
        ),
        "Fixed.",
    ]);
    let replay = work.path().join("replies.json");
    std::fs::write(&replay, script.to_string()).unwrap();
    let first = work.path().join("first");
    copy_example(&first);
    let stderr = solve_replay(&first, &replay, &work.path().join("run1"));
    assert!(
        stderr.contains("finished: Submitted after 3 steps"),
        "{stderr}"
    );
    let patch = std::fs::read_to_string(work.path().join("run1/patch.diff")).unwrap();
    assert!(patch.contains("+        return year % 400 == 0"), "{patch}");
    let recorded = work.path().join("run1/trajectory.json");
    let trajectory: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&recorded).unwrap()).unwrap();
    assert_eq!(trajectory["steps"][1]["calls"][0]["observation"], "1");

    let second = work.path().join("second");
    copy_example(&second);
    solve_replay(&second, &recorded, &work.path().join("run2"));
    assert_eq!(
        std::fs::read_to_string(work.path().join("run2/patch.diff")).unwrap(),
        patch
    );

    std::fs::write(&replay, "{\"not\": \"replies\"}").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_lilypad"))
        .args(["solve", "--task", "t", "--replay"])
        .arg(&replay)
        .arg("--repo")
        .arg(&second)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("neither a JSON array of reply texts nor a trajectory.json"),
        "{stderr}"
    );
}
