//! `--lora DIR`: a PEFT adapter folder on the model. The tiny Llama of tests/fixtures/lora
//! scores the same with its adapter applied at run time (on llama.cpp's GGUF, and on the
//! checkpoint folder converted on load) as with the adapter merged into a GGUF's weights;
//! bad adapters are clear errors.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{lilypad, text};
use lilypad_gguf::peft::LoraAdapter;
use lilypad_gguf::{GgufFile, MmapSource};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
