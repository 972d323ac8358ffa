//! Limits the command line checks before any work, each with a message that names the
//! numbers: a prompt longer than the context, an empty prompt, a folder or a FIFO given as
//! a model, a text too long to tokenize. None of these hangs or prints nothing.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tiny_model() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/qwen/qwen3-tiny/model.gguf")
        .to_string_lossy()
        .into_owned()
}

/// Runs `lilypad` and fails the test if it takes longer than a minute (a FIFO opened for
/// reading blocks until a writer appears).
fn lilypad_within_a_minute(args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_lilypad"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let watchdog = std::thread::spawn(move || {
        while start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return false;
            }
        }
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        true
    });
    let out = child.wait_with_output().unwrap();
    assert!(!watchdog.join().unwrap(), "lilypad {args:?} hung");
    out
}

/// The run failed with exactly one `error:` line containing `expected`.
fn fails_with(args: &[&str], expected: &str) {
    let out = lilypad_within_a_minute(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
    assert!(errors[0].contains(expected), "{args:?}: {stderr}");
}

#[test]
fn a_prompt_longer_than_the_context_names_both_numbers() {
    let m = tiny_model();
    let long = "the river carried ".repeat(200);
    for extra in [&[][..], &["-n", "2"][..]] {
        let mut args = vec!["generate", "-q", "-m", &m, "--context", "64", "-p", &long];
        args.extend(extra);
        fails_with(&args, "but the context holds 64");
        let out = lilypad_within_a_minute(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tokens: usize = stderr
            .split("the prompt is ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{stderr}"));
        assert!(tokens > 64, "{stderr}");
    }
    fails_with(
        &["score", "-m", &m, "--context", "64", "--text", &long],
        "the context holds 64",
    );
}

#[test]
fn an_empty_prompt_is_named() {
    let m = tiny_model();
    fails_with(
        &["generate", "-q", "-m", &m, "-p", ""],
        "the prompt is empty",
    );
}

#[test]
fn a_folder_or_a_fifo_is_not_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_string_lossy().to_string();
    fails_with(
        &["generate", "-q", "-m", &d, "-p", "hi"],
        "is a folder without config.json",
    );
    let fifo = dir.path().join("model.gguf");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let f = fifo.to_string_lossy().to_string();
    fails_with(
        &["generate", "-q", "-m", &f, "-p", "hi"],
        "is a FIFO, not a model file",
    );
    fails_with(&["inspect", &f], "is a FIFO, not a model file");
}

#[test]
fn a_text_too_long_to_tokenize_is_refused_before_tokenizing() {
    let m = tiny_model();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.txt");
    std::fs::write(&file, "a".repeat(lilypad_tokenizer::MAX_TEXT_BYTES + 1)).unwrap();
    let f = file.to_string_lossy().to_string();
    fails_with(
        &["tokenize", "-m", &m, "-f", &f],
        &format!("over the {}-byte limit", lilypad_tokenizer::MAX_TEXT_BYTES),
    );
}
