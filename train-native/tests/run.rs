//! `train-native run` end to end with SmolLM2-135M-Instruct on two-number additions: updates
//! happen, every update leaves a checkpoint and a metrics line, and a run killed (SIGKILL)
//! part-way and run again ends with exactly the adapter and optimizer state of the run that
//! was never interrupted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn repo_root() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..")
}

/// A small run's configuration in `dir` (`extra`: more top-level keys), or `None` without
/// the model.
fn config(dir: &Path, extra: &str) -> Option<PathBuf> {
    let model = repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !model.exists() {
        assert!(
            std::env::var("LILYPAD_REQUIRE_MODEL").as_deref() != Ok("1"),
            "{} is missing: run scripts/fetch-model.sh",
            model.display()
        );
        eprintln!("skipped: {} is missing", model.display());
        return None;
    }
    let tasks = repo_root().join("train-native/configs/arith-train.jsonl");
    let text = format!(
        "model = {model:?}\nout = \"out\"\nsteps = 2\ngroup = 4\ngroups_per_step = 1\n\
         max_draws = 2\nseed = 1\ncontext = 128\n{extra}\
         [adapter]\nrank = 4\nalpha = 8\n\
         [optimizer]\nlr = 1e-3\n\
         [sampling]\ntemperature = 0.7\ntop_p = 1.0\ntop_k = 0\nmax_tokens = 16\n\
         [tasks]\nkind = \"reply\"\nfile = {tasks:?}\n"
    );
    let path = dir.join("run.toml");
    std::fs::write(&path, text).unwrap();
    Some(path)
}

fn train(config: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_train-native"));
    cmd.arg("run").arg("--config").arg(config).args(extra);
    cmd
}

/// Whether a run succeeded; `false` when it could not start for want of a GPU adapter (a
/// failure where LILYPAD_REQUIRE_GPU=1), and any other failure panics with its stderr.
fn succeeded(output: &std::process::Output) -> bool {
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() && stderr.contains("no GPU adapter") {
        assert!(
            std::env::var("LILYPAD_REQUIRE_GPU").as_deref() != Ok("1"),
            "{stderr}"
        );
        eprintln!("skipped: {stderr}");
        return false;
    }
    assert!(output.status.success(), "{stderr}");
    true
}

fn run_state(out: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(out.join("checkpoint/run.json")).ok()?).ok()
}

#[test]
fn a_killed_run_resumes_to_the_uninterrupted_runs_result() {
    resumes_exactly("");
}

/// With `staleness = 1` a second copy of the model samples update u's groups with the
/// adapter of update u − 1 in its own thread; killed and rerun, the run still ends exactly
/// where the uninterrupted one does (the checkpoint keeps the adapter it samples with).
#[test]
fn an_asynchronous_run_samples_one_update_behind_and_resumes_exactly() {
    let Some(metrics) = resumes_exactly("staleness = 1\n") else {
        return;
    };
    let behind: Vec<_> = metrics.iter().map(|m| m["behind"].as_u64()).collect();
    assert_eq!(behind, [Some(0), Some(1)], "{metrics:?}");
}

/// With `staleness = 2` update u samples with the adapter of update u − 2 (the first ones
/// with the initial adapter), and the checkpoint after the last update keeps the two adapters
/// the next updates would sample with; a staleness of `steps` or more is refused up front.
#[test]
fn an_asynchronous_run_keeps_the_adapters_it_still_samples_with() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = config(dir.path(), "staleness = 3\n") else {
        return;
    };
    let output = train(&path, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("staleness 3 must be below steps (2)"),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("steps = 2", "steps = 3")
        .replace("staleness = 3", "staleness = 2");
    std::fs::write(&path, text).unwrap();
    let output = train(&path, &[]).output().unwrap();
    if !succeeded(&output) {
        return;
    }
    let out = dir.path().join("out");
    let behind: Vec<_> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["behind"].as_u64())
        .collect();
    assert_eq!(behind, [Some(0), Some(1), Some(2)]);
    let mut kept: Vec<String> = std::fs::read_dir(out.join("checkpoint/sampling"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(kept, ["1", "2"]);
}

/// Runs the small run whole, then again killed after its first checkpoint and rerun, and
/// checks both end with the same checkpoint and metrics; the whole run's metrics lines.
fn resumes_exactly(extra: &str) -> Option<Vec<serde_json::Value>> {
    let whole = tempfile::tempdir().unwrap();
    let whole_config = config(whole.path(), extra)?;
    let output = train(&whole_config, &[]).output().unwrap();
    if !succeeded(&output) {
        return None;
    }
    let out = whole.path().join("out");
    assert_eq!(run_state(&out).unwrap()["step"], 2);
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 2, "{metrics}");
    for name in ["adapter_config.json", "adapter_model.safetensors"] {
        assert!(
            out.join("checkpoint/adapter").join(name).is_file(),
            "{name}"
        );
    }

    // The same run, killed as soon as its first checkpoint is there, then run again.
    let cut = tempfile::tempdir().unwrap();
    let cut_config = config(cut.path(), extra).unwrap();
    let cut_out = cut.path().join("out");
    let mut child = train(&cut_config, &[]).spawn().unwrap();
    let started = Instant::now();
    while run_state(&cut_out).is_none_or(|s| s["step"] != 1) {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "no checkpoint after 10 minutes"
        );
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let output = train(&cut_config, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(run_state(&cut_out).unwrap(), run_state(&out).unwrap());
    assert!(
        std::fs::read(cut_out.join("checkpoint/optimizer.bin")).unwrap()
            == std::fs::read(out.join("checkpoint/optimizer.bin")).unwrap(),
        "the resumed run's adapter and moments differ from the uninterrupted run's"
    );
    assert_eq!(
        std::fs::read(cut_out.join("checkpoint/adapter/adapter_model.safetensors")).unwrap(),
        std::fs::read(out.join("checkpoint/adapter/adapter_model.safetensors")).unwrap()
    );
    // One metrics line per update, with the uninterrupted run's numbers.
    let lines = |dir: &Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (a, b) = (lines(&out), lines(&cut_out));
    assert!(
        a.iter().any(|m| m["groups"].as_u64() > Some(0)),
        "no update had a group with signal, so nothing was trained: {a:?}"
    );
    assert_eq!(a.len(), b.len(), "{b:?}");
    for (x, y) in a.iter().zip(&b) {
        for field in [
            "step",
            "loss",
            "mean_reward",
            "tokens",
            "grad_norm",
            "groups",
            "behind",
        ] {
            assert_eq!(x[field], y[field], "{field}: {x} vs {y}");
        }
    }
    Some(a)
}

/// `kind = "agent"` through the binary: the tasks `scripts/test.sh` synthesized, episodes as
/// sandboxed agent runs of the tiny random Llama, graded by the project's tests. A random
/// policy fixes nothing, so the group carries no signal and is skipped (dynamic sampling);
/// `episodes::tests` checks the update on agent episodes.
#[test]
fn agent_tasks_are_sampled_graded_and_logged() {
    let Some(dir) = std::env::var_os("LILYPAD_TEST_TRAIN_DIR").map(PathBuf::from) else {
        return eprintln!("LILYPAD_TEST_TRAIN_DIR is unset: not run");
    };
    let tasks = dir.join("tasks-ci/tasks.jsonl");
    assert!(
        tasks.is_file(),
        "{} is missing: run scripts/test.sh",
        tasks.display()
    );
    let model = repo_root().join("tests/fixtures/lora/llama-tiny/model/model.gguf");
    let run = tempfile::tempdir().unwrap();
    let config = run.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "model = {model:?}\nout = \"out\"\nsteps = 1\ngroup = 2\nmax_draws = 1\nseed = 5\n\
             context = 8192\n\
             [adapter]\nrank = 4\nalpha = 8\n\
             [optimizer]\nlr = 1e-3\n\
             [sampling]\ntemperature = 1.0\ntop_p = 1.0\ntop_k = 0\nmax_tokens = 12\n\
             [tasks]\nkind = \"agent\"\nfile = {tasks:?}\nmax_steps = 2\nreward = \"partial\"\n"
        ),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_train-native"))
        .arg("--dir")
        .arg(&dir)
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    if !succeeded(&output) {
        return;
    }
    let out = run.path().join("out");
    let read = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(out.join(name))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let episodes = read("episodes.jsonl");
    assert_eq!(episodes.len(), 2, "{episodes:?}");
    for e in &episodes {
        assert!(e.get("error").is_none(), "{e}");
        assert_eq!(e["step"], 0);
        assert_eq!(e["reward"], 0.0, "{e}");
        assert!(
            e["grade_error"].is_null(),
            "the suite graded the edits: {e}"
        );
        assert_eq!(e["trained_tokens"], e["generated_tokens"], "{e}");
        let trajectory: serde_json::Value =
            serde_json::from_slice(&std::fs::read(e["trajectory"].as_str().unwrap()).unwrap())
                .unwrap();
        assert_eq!(
            trajectory["steps"].as_array().unwrap().len() as u64,
            e["steps"]
        );
    }
    assert_ne!(episodes[0]["seed"], episodes[1]["seed"]);
    let metrics = read("metrics.jsonl");
    assert_eq!(metrics.len(), 1);
    assert_eq!(metrics[0]["groups"], 0);
    assert_eq!(metrics[0]["groups_skipped"], 1);
    assert_eq!(metrics[0]["groups_failed"], 0);
    // Online calibration: the task every episode failed is drawn next with one more hint,
    // and the checkpoint holds the pool's levels for a resumed run.
    let refined = metrics[0]["refined"].as_array().unwrap();
    assert_eq!(refined.len(), 1, "{refined:?}");
    let (from, to) = (
        refined[0]["from"].as_str().unwrap(),
        refined[0]["to"].as_str().unwrap(),
    );
    assert_eq!(from, episodes[0]["instance_id"]);
    let task = refined[0]["task"].as_u64().unwrap() as usize;
    let drawn: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&tasks)
            .unwrap()
            .lines()
            .nth(task)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(drawn["instance_id"], from);
    let level = drawn["hint_level"].as_u64().unwrap() + 1;
    assert_eq!(to, format!("{from}@h{level}"));
    let state = run_state(&out).unwrap();
    assert_eq!(state["step"], 1);
    assert_eq!(state["hint_levels"][task].as_u64(), Some(level));
}
