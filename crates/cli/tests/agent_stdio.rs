//! `lilypad agent-stdio` as an editor drives it: one request line, events back, and a stdin
//! lifecycle that does not depend on timing (closing stdin after the request never cancels).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Runs `agent-stdio` with `input` on stdin (then closed); its events and exit status.
fn agent_stdio(input: &[u8]) -> (Vec<Value>, Option<i32>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lilypad"))
        .arg("agent-stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let events = String::from_utf8(output.stdout)
        .expect("stdout is UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("every stdout line is one JSON event"))
        .collect();
    (events, output.status.code())
}

fn call(name: &str, args: Value) -> String {
    format!(
        "<tool_call>\n{}\n</tool_call>",
        json!({"name": name, "arguments": args})
    )
}

fn request(script: &std::path::Path, root: &str, settings: Value) -> Vec<u8> {
    let mut line = json!({
        "type": "solve", "task": "t", "root": root,
        "model": {"scripted": script},
        "repo": {"files": [{"path": "a.py", "text": "x = 1\n"}]},
        "settings": settings,
    })
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

#[test]
fn bad_requests_end_with_one_json_error() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("replies.json");
    std::fs::write(&script, json!(["done"]).to_string()).unwrap();
    for (input, needle) in [
        (
            b"{\"type\": \"solve\", \"task\": \"\xff\xfe\"}\n".to_vec(),
            "not UTF-8",
        ),
        (b"".to_vec(), "stdin was empty"),
        (request(&script, "/", json!({})), "a folder below /"),
        (request(&script, "repo", json!({})), "must be absolute"),
    ] {
        let (events, code) = agent_stdio(&input);
        assert_eq!(code, Some(2), "{events:?}");
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["type"], "error");
        let message = events[0]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
    }
}

/// An editor that writes the request and closes stdin at once gets the whole run, every time.
#[test]
fn closing_stdin_after_the_request_does_not_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("replies.json");
    let replies: Vec<String> = (0..20)
        .map(|i| call("Bash", json!({"command": format!("echo {i} >> log.txt")})))
        .chain(["done".to_string()])
        .collect();
    std::fs::write(&script, json!(replies).to_string()).unwrap();
    for _ in 0..5 {
        let (events, code) = agent_stdio(&request(&script, "/repo", json!({})));
        assert_eq!(code, Some(0), "{events:?}");
        let done = events.last().unwrap();
        assert_eq!(done["type"], "done", "{done}");
        assert_eq!(done["exit"]["reason"], "submitted", "{}", done["exit"]);
        assert_eq!(done["trajectory"]["steps"].as_array().unwrap().len(), 21);
    }
}

/// Processes whose command line holds `marker`, anywhere on the machine.
fn processes_with(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .count()
}

/// With `python` on (unsandboxed here, so only the tree-killing is tested): a program whose
/// detached child keeps the output pipe open returns when the program does, and the child is
/// stopped with it.
#[test]
fn python_children_die_with_the_program() {
    let has_python = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_python {
        assert!(
            std::env::var("LILYPAD_REQUIRE_PYTEST").as_deref() != Ok("1"),
            "python3 is missing"
        );
        return eprintln!("skipped: python3 is missing");
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = format!(
        "{}.{}",
        6000 + std::process::id() % 1000,
        std::process::id()
    );
    let program = format!(
        "import subprocess, sys; subprocess.Popen(['sleep', '{marker}'], start_new_session=True, \
         stdout=sys.stdout, stderr=sys.stderr); print('parent done')"
    );
    let script = dir.path().join("replies.json");
    std::fs::write(
        &script,
        json!([
            call(
                "Bash",
                json!({"command": format!("python -c \"{program}\"")})
            ),
            "done"
        ])
        .to_string(),
    )
    .unwrap();
    let started = Instant::now();
    let (events, code) = agent_stdio(&request(
        &script,
        "/repo",
        json!({"python": true, "sandbox": false}),
    ));
    assert_eq!(code, Some(0), "{events:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the run waited for the detached child: {:?}",
        started.elapsed()
    );
    let observation = events
        .iter()
        .find(|e| e["type"] == "tool_finished")
        .unwrap()["observation"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(observation.contains("parent done"), "{observation}");
    assert_eq!(
        processes_with(&marker),
        0,
        "the detached child outlived its program"
    );
}

/// A GGUF model with a draft for speculative decoding runs the agent with it; a draft the
/// engine does not know is one JSON error naming it.
#[test]
fn a_gguf_model_takes_a_draft() {
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/qwen/qwen3-tiny/model.gguf");
    let line = |draft: &str| {
        let mut line = json!({
            "type": "solve", "task": "t", "root": "/repo",
            "model": {"gguf": {"path": model, "draft": draft, "context": 512}},
            "repo": {"files": [{"path": "a.py", "text": "x = 1\n"}]},
            "settings": {"max_steps": 1, "max_tokens_per_step": 24, "temperature": 0},
        })
        .to_string()
        .into_bytes();
        line.push(b'\n');
        line
    };
    let (events, code) = agent_stdio(&line("lookup:2"));
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done", "{events:?}");
    assert_eq!(code, Some(0), "{done}");
    let (events, code) = agent_stdio(&line("medusa"));
    assert_eq!(code, Some(2), "{events:?}");
    let message = events.last().unwrap()["message"].as_str().unwrap();
    assert!(message.contains("medusa"), "{message}");
}
