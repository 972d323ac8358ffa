//! `--lora DIR`: a PEFT adapter folder on the model. The tiny Llama of tests/fixtures/lora
//! scores the same with its adapter applied at run time (on llama.cpp's GGUF, and on the
//! checkpoint folder converted on load) as with the adapter merged into a GGUF's weights;
//! bad adapters are clear errors. `agent-stdio` (the editor's native path) takes the adapter too.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{lilypad, text};
use lilypad_gguf::peft::LoraAdapter;
use lilypad_gguf::{GgufFile, MmapSource};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../tests/fixtures/lora")
    .join(name)
}

const TEXT: &str = "fix the bug in main.py, then run the tests";

fn score(model: &str, lora: Option<&PathBuf>) -> Output {
    let mut args = vec![
        "score",
        "-m",
        model,
        "--quantize",
        "none",
        "--text",
        TEXT,
        "--json",
    ];
    if let Some(l) = lora {
        args.extend(["--lora", l.to_str().unwrap()]);
    }
    lilypad(&args)
}

fn logprobs(o: &Output) -> Vec<f64> {
    assert!(o.status.success(), "{}", text(o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["positions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["logprob"].as_f64())
        .collect()
}

#[test]
fn adapter_scores_like_its_merge() {
    let dir = fixture("llama-tiny");
    let (gguf, adapter) = (dir.join("model/model.gguf"), dir.join("adapter"));
    let src = MmapSource::open(&gguf).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let lora = LoraAdapter::from_peft(
        &std::fs::read(adapter.join("adapter_config.json")).unwrap(),
        &std::fs::read(adapter.join("adapter_model.safetensors")).unwrap(),
        &file,
    )
    .unwrap();
    let merged = std::env::temp_dir().join(format!("lilypad-merged-{}.gguf", std::process::id()));
    std::fs::write(&merged, lora.merge(&file, &src).unwrap()).unwrap();

    let with_lora = score(gguf.to_str().unwrap(), Some(&adapter));
    let stderr = String::from_utf8_lossy(&with_lora.stderr);
    assert!(
        stderr.contains("lora: ") && stderr.contains("rank 4") && stderr.contains("scale 2"),
        "{stderr}"
    );
    let runtime = logprobs(&with_lora);
    let folder = logprobs(&score(dir.join("model").to_str().unwrap(), Some(&adapter)));
    let merge = logprobs(&score(merged.to_str().unwrap(), None));
    let base = logprobs(&score(gguf.to_str().unwrap(), None));
    std::fs::remove_file(&merged).unwrap();

    assert!(runtime.len() > 5);
    let max_diff = |a: &[f64], b: &[f64]| {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f64, f64::max)
    };
    assert!(
        max_diff(&runtime, &merge) < 1e-3,
        "{runtime:?} vs {merge:?}"
    );
    assert!(max_diff(&folder, &merge) < 1e-3, "{folder:?} vs {merge:?}");
    assert!(
        max_diff(&runtime, &base) > 0.05,
        "the adapter changes the scores"
    );
}

#[test]
fn bad_adapters_are_clear_errors() {
    let gguf = fixture("llama-tiny").join("model/model.gguf");
    let gguf = gguf.to_str().unwrap();
    let err = |o: Output| {
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let missing = fixture("no-such-adapter");
    let e = err(score(gguf, Some(&missing)));
    assert!(e.contains("not a folder"), "{e}");
    // Qwen3's adapter on the Llama: other shapes, more layers.
    let e = err(score(gguf, Some(&fixture("qwen3-tiny").join("adapter"))));
    assert!(e.contains("another base model"), "{e}");
    // A folder without the weights.
    let empty = std::env::temp_dir().join(format!("lilypad-lora-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::copy(
        fixture("llama-tiny").join("adapter/adapter_config.json"),
        empty.join("adapter_config.json"),
    )
    .unwrap();
    let e = err(score(gguf, Some(&empty)));
    std::fs::remove_dir_all(&empty).unwrap();
    assert!(e.contains("no adapter_model.safetensors"), "{e}");
}

/// Runs `lilypad agent-stdio` on one request line; returns its events.
fn agent_stdio(request: &serde_json::Value) -> Vec<serde_json::Value> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_lilypad"))
        .arg("agent-stdio")
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{request}").unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}\n{}", text(&out))))
        .collect()
}

/// The editor's native path takes the adapter too: `agent-stdio` with `model.gguf.lora` puts
/// it on the model (the model_ready event says which, with its rank) and the run ends with
/// its trajectory; an adapter for another model is a `model` error before any step.
#[test]
fn agent_stdio_runs_with_the_adapter() {
    let dir = fixture("llama-tiny");
    let request = |lora: PathBuf| {
        serde_json::json!({
            "type": "solve",
            "task": "make x 2",
            "model": {"gguf": {"path": dir.join("model/model.gguf"), "lora": lora}},
            "repo": {"files": [{"path": "a.py", "text": "x = 1\n"}]},
            "settings": {"max_steps": 1, "max_tokens_per_step": 4},
        })
    };
    let events = agent_stdio(&request(dir.join("adapter")));
    let ready = events
        .iter()
        .find(|e| e["type"] == "model_ready")
        .unwrap_or_else(|| panic!("{events:?}"));
    let lora = ready["lora"].as_str().unwrap_or_default();
    assert!(lora.contains("adapter") && lora.contains("rank"), "{ready}");
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done", "{done}");
    assert!(done["trajectory"].is_object(), "{done}");

    let events = agent_stdio(&request(fixture("qwen3-tiny").join("adapter")));
    let last = events.last().unwrap();
    assert_eq!(last["type"], "error", "{last}");
    assert_eq!(last["code"], "model", "{last}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("another base model"),
        "{last}"
    );
    assert!(!events.iter().any(|e| e["type"] == "step_started"));
}
