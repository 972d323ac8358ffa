//! `lilypad synth` writes a FrogNano-4B-shaped Qwen3.5 GGUF (here with 4 of its 32 layers and a
//! small vocabulary, to keep the test quick) that loads and runs; `inspect` reports the GPU
//! memory it needs and whether it fits, and a context the adapter cannot hold is refused
//! before anything is uploaded.

mod common;

use common::{lilypad, text};
use lilypad_engine::ModelConfig;
use lilypad_gguf::{GgmlType, GgufFile, MmapSource};

#[test]
fn synthetic_frognano_loads_runs_and_is_sized() {
    let dir = std::env::temp_dir().join(format!("lilypad-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("frognano-4l.gguf");
    let model = path.to_str().unwrap();
    let out = lilypad(&["synth", "--out", model, "--layers", "4", "--vocab", "2048"]);
    assert!(out.status.success(), "{}", text(&out));

    let src = MmapSource::open(&path).unwrap();
    let file = GgufFile::read(&src).unwrap();
    let ModelConfig::Qwen35(cfg) = ModelConfig::from_gguf(&file).unwrap() else {
        panic!("not a qwen35 model");
    };
    assert_eq!(cfg.recurrent, [true, true, true, false]);
    assert_eq!(
        (cfg.n_embd, cfg.n_ff, cfg.head_dim, cfg.n_rot),
        (2560, 9216, 256, 64)
    );
    assert_eq!((cfg.delta.n_k, cfg.delta.n_v, cfg.delta.d_k), (16, 32, 128));
    assert_eq!(cfg.n_mtp, 1);
    assert_eq!(
        file.tensor("blk.0.attn_qkv.weight").unwrap().ty,
        GgmlType::Q4K
    );
    assert_eq!(
        file.tensor("blk.4.nextn.eh_proj.weight").unwrap().dims,
        [5120, 2560]
    );

    let out = lilypad(&["inspect", model, "--context", "2048"]);
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("GPU memory:") && report.contains("recurrent state"),
        "{report}"
    );
    let adapter = !report.contains("fits:         unknown");
    if adapter {
        assert!(report.contains("fits:         yes"), "{report}");
    }
    // One full-attention layer's f16 KV cache at 131,072 positions is 256 MiB in one buffer
    // (f32: at half as many).
    let out = lilypad(&["inspect", model, "--context", "131072"]);
    if adapter {
        assert!(text(&out).contains("fits:         NO"), "{}", text(&out));
    }
    if !adapter {
        return;
    }
    let refused = lilypad(&[
        "generate",
        "--model",
        model,
        "--context",
        "131072",
        "--prompt",
        "hi",
    ]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("in one buffer"),
        "{}",
        text(&refused)
    );

    let run = || {
        let o = lilypad(&[
            "generate",
            "--model",
            model,
            "--context",
            "256",
            "--prompt",
            "Hello",
            "--max-tokens",
            "2",
            "--temperature",
            "0",
        ]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let first = run();
    assert!(!first.trim().is_empty(), "no tokens generated");
    assert_eq!(first, run(), "greedy decoding is reproducible");
    std::fs::remove_dir_all(&dir).unwrap();
}
