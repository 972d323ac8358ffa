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

/// A small run's configuration in `dir`, or `None` without the model.
fn config(dir: &Path) -> Option<PathBuf> {
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
         max_draws = 2\nseed = 1\ncontext = 128\n\
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

fn run_state(out: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(out.join("checkpoint/run.json")).ok()?).ok()
}

#[test]
fn a_killed_run_resumes_to_the_uninterrupted_runs_result() {
    let whole = tempfile::tempdir().unwrap();
    let Some(whole_config) = config(whole.path()) else {
        return;
    };
    let output = train(&whole_config, &[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() && stderr.contains("no GPU adapter") {
        assert!(
            std::env::var("LILYPAD_REQUIRE_GPU").as_deref() != Ok("1"),
            "{stderr}"
        );
        return eprintln!("skipped: {stderr}");
    }
    assert!(output.status.success(), "{stderr}");
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
    let cut_config = config(cut.path()).unwrap();
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
        ] {
            assert_eq!(x[field], y[field], "{field}: {x} vs {y}");
        }
    }
}
