//! `lilypad tokenize` on a vocabulary-only GGUF (no tensors, no GPU): ids, JSON, decoding,
//! BOS handling and errors.

mod common;

use std::path::PathBuf;

use common::lilypad;
use lilypad_gguf::{GgufWriter, Value};

/// A fresh folder holding a byte-level BPE vocabulary where "hi hi" is `hi` + `Ġhi` (ids 3
/// and 4) and id 5 is a control token; returns the folder and the GGUF's path.
fn scratch_vocab(name: &str, add_bos: bool) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("lilypad-tokenize-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let strings =
        |v: &[&str]| Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect());
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()));
    w.metadata("tokenizer.ggml.model", Value::String("gpt2".into()));
    w.metadata("tokenizer.ggml.pre", Value::String("gpt-2".into()));
    w.metadata(
        "tokenizer.ggml.tokens",
        strings(&["h", "i", "Ġ", "hi", "Ġhi", "<|endoftext|>"]),
    );
    w.metadata(
        "tokenizer.ggml.token_type",
        Value::Array([1, 1, 1, 1, 1, 3].map(Value::I32).to_vec()),
    );
    w.metadata("tokenizer.ggml.merges", strings(&["h i", "Ġ hi"]));
    w.metadata("tokenizer.ggml.bos_token_id", Value::U32(5));
    w.metadata("tokenizer.ggml.add_bos_token", Value::Bool(add_bos));
    let path = dir.join("vocab.gguf");
    std::fs::write(&path, w.to_bytes()).unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}

fn stdout_of(args: &[&str]) -> String {
    let out = lilypad(args);
    assert!(
        out.status.success(),
        "lilypad {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn encodes_decodes_and_reports_json() {
    let (dir, m) = scratch_vocab("ok", false);
    let m = m.as_str();

    assert_eq!(
        stdout_of(&["tokenize", "-m", m, "--text", "hi hi"]),
        "3 4\n"
    );
    // Special-token text is parsed unless asked not to.
    assert_eq!(
        stdout_of(&["tokenize", "-m", m, "--text", "hi<|endoftext|>"]),
        "3 5\n"
    );
    assert_eq!(
        stdout_of(&["tokenize", "-m", m, "--decode", "--text", "[3, 4,5]"]),
        "hi hi<|endoftext|>\n"
    );

    let file = dir.join("text.txt");
    std::fs::write(&file, "hi hi hi").unwrap();
    assert_eq!(
        stdout_of(&["tokenize", "-m", m, "--file", file.to_str().unwrap()]),
        "3 4 4\n"
    );

    let json: serde_json::Value = serde_json::from_str(&stdout_of(&[
        "tokenize", "-m", m, "--text", "hi hi", "--json",
    ]))
    .unwrap();
    assert_eq!(json["ids"], serde_json::json!([3, 4]));
    assert_eq!(json["tokens"][1]["token"], "Ġhi");
    assert_eq!(json["tokens"][1]["text"], " hi");
    assert_eq!(json["text"], "hi hi");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bos_follows_the_gguf_unless_disabled() {
    let (dir, m) = scratch_vocab("bos", true);
    let m = m.as_str();
    assert_eq!(stdout_of(&["tokenize", "-m", m, "--text", "hi"]), "5 3\n");
    assert_eq!(
        stdout_of(&["tokenize", "-m", m, "--text", "hi", "--no-bos"]),
        "3\n"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let (dir, m) = scratch_vocab("bad", false);
    let m = m.as_str();
    let not_gguf = dir.join("not.gguf");
    std::fs::write(&not_gguf, b"not a gguf").unwrap();
    let missing = dir.join("missing.gguf");
    let not_gguf = not_gguf.to_str().unwrap();
    let missing = missing.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &["-m", m, "--decode", "--text", "6"],
            "outside the vocabulary",
        ),
        (&["-m", m, "--decode", "--text", "3 x"], "is not a token id"),
        (&["-m", m, "--file", missing], "reading"),
        (&["-m", not_gguf, "--text", "hi"], "reading"),
        (&["-m", missing, "--text", "hi"], "does not exist"),
    ];
    for (args, message) in cases {
        let out = lilypad(&[&["tokenize"], args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
