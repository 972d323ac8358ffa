//! `--model` on a Hugging Face checkpoint folder (config.json, safetensors, tokenizer.json):
//! the tiny random Qwen3.5 fixture, converted on load, scores and tokenizes like the GGUF that
//! llama.cpp's converter wrote from the same checkpoint.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{lilypad, text};

fn fixture() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../tests/fixtures/qwen/qwen35-tiny")
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", text(o));
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout(o)).unwrap()
}

const TEXT: &str = "<|im_start|>user\nfix the bug in main.py<|im_end|>\n<|im_start|>assistant\n";

#[test]
fn checkpoint_folder_tokenizes_like_its_gguf() {
    let dir = fixture();
    let gguf = dir.join("model.gguf");
    let ids = |model: &str| {
        json(&lilypad(&[
            "tokenize", "-m", model, "--text", TEXT, "--json",
        ]))
    };
    let from_folder = ids(dir.to_str().unwrap());
    assert_eq!(from_folder, ids(gguf.to_str().unwrap()));
    assert!(from_folder.to_string().contains("<|im_start|>"));
}

#[test]
fn checkpoint_folder_scores_like_its_gguf() {
    let dir = fixture();
    let gguf = dir.join("model.gguf");
    let score = |model: &str| {
        json(&lilypad(&[
            "score",
            "-m",
            model,
            "--quantize",
            "none",
            "-q",
            "--text",
            TEXT,
            "--json",
        ]))
    };
    let a = score(dir.to_str().unwrap());
    let b = score(gguf.to_str().unwrap());
    let positions = |v: &serde_json::Value| v["positions"].as_array().unwrap().clone();
    let (pa, pb) = (positions(&a), positions(&b));
    assert!(pa.len() > 10, "{a}");
    assert_eq!(pa.len(), pb.len());
    // Same weights in F32/F16 either way: log-probabilities agree to rounding.
    for (x, y) in pa.iter().zip(&pb) {
        assert_eq!(x["next"], y["next"]);
        if let (Some(lx), Some(ly)) = (x["logprob"].as_f64(), y["logprob"].as_f64()) {
            assert!((lx - ly).abs() < 1e-3, "{x} vs {y}");
        }
    }
}

#[test]
fn folder_without_weights_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("lilypad-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture().join("config.json"), dir.join("config.json")).unwrap();
    let out = lilypad(&["inspect", dir.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no *.safetensors"), "{err}");
}
