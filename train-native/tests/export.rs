//! `train-native export` on the tiny Llama of tests/fixtures/lora/: the merged model, loaded
//! as the CLI loads any model, gives the logits of the base model with the adapter put on it
//! (`--lora`); a type the weights cannot be stored in is a clear error that leaves no file.

use std::path::PathBuf;
use std::process::Command;

use lilypad_cli::{Loaded, ModelArgs};
use lilypad_engine::Logits;

fn fixture() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../tests/fixtures/lora/llama-tiny")
}

fn export(out: &std::path::Path, quantize: &str) -> std::process::Output {
    let f = fixture();
    Command::new(env!("CARGO_BIN_EXE_train-native"))
        .arg("export")
        .arg("--model")
        .arg(f.join("model/model.gguf"))
        .arg("--adapter")
        .arg(f.join("adapter"))
        .arg("--out")
        .arg(out)
        .args(["--quantize", quantize])
        .output()
        .unwrap()
}

/// Logits of `tokens` with the model (and adapter) opened as the CLI opens them, or `None`
/// without a GPU adapter.
fn logits(model: &std::path::Path, lora: Option<PathBuf>, tokens: &[u32]) -> Option<Vec<f32>> {
    let args = ModelArgs {
        model: model.display().to_string(),
        quantize: Default::default(),
        sha256: None,
        lora,
        context: Some(64),
        kv_cache: lilypad_engine::ModelOptions::default().kv_cache,
        draft: None,
        adapter: None,
        quiet: true,
    };
    let mut loaded = match Loaded::open(&args) {
        Ok(loaded) => loaded,
        Err(e) if std::env::var("LILYPAD_REQUIRE_GPU").as_deref() != Ok("1") => {
            eprintln!("skipped: {e:#}");
            return None;
        }
        Err(e) => panic!("{e:#}"),
    };
    Some(pollster::block_on(loaded.model.eval(tokens, Logits::All)).unwrap())
}

#[test]
fn the_merged_model_is_the_base_model_with_the_adapter() {
    let dir = tempfile::tempdir().unwrap();
    let merged = dir.path().join("merged.gguf");
    let output = export(&merged, "f32");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("21 adapted weights"), "{stderr}");
    let tokens = [1, 17, 42, 99, 5, 250, 7];
    let Some(got) = logits(&merged, None, &tokens) else {
        return;
    };
    let f = fixture();
    let want = logits(
        &f.join("model/model.gguf"),
        Some(f.join("adapter")),
        &tokens,
    )
    .unwrap();
    let scale = want.iter().map(|v| v.abs()).fold(1f32, f32::max);
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!("merged vs --lora: max |Δ| {worst:.3e} (largest logit {scale:.2})");
    // The merge adds scale·B·A in f64 once; the engine adds it per token in f32.
    assert!(worst <= 1e-4 * scale, "max |Δ| {worst:.3e}");
}

#[test]
fn an_impossible_type_is_a_clear_error_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("merged.gguf");
    let output = export(&out, "q4_k");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("rows of 96 values do not divide into Q4K blocks of 256"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
