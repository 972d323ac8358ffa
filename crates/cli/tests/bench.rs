//! `lilypad bench --batch … --profile` times every kernel of one batched step per batch size
//! (the tiny Qwen3 fixture: a smoke test of the path, not a benchmark).

mod common;

use common::{lilypad, text};

#[test]
fn batched_steps_are_profiled_kernel_by_kernel() {
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/qwen/qwen3-tiny/model.gguf");
    let out = lilypad(&[
        "bench",
        "-m",
        model.to_str().unwrap(),
        "--batch",
        "1,3",
        "--prompt-tokens",
        "6",
        "--gen-tokens",
        "2",
        "--profile",
    ]);
    let report = text(&out);
    assert!(out.status.success(), "{report}");
    for b in [1, 3] {
        let head = format!("profile of a step of {b} sequences: ");
        let at = report.find(&head).unwrap_or_else(|| panic!("{report}"));
        let profile = &report[at..];
        // The model's kernels, each with its dispatch count: a layer's attention per layer.
        let attention = profile
            .lines()
            .find(|l| l.trim_start().starts_with("attention"))
            .unwrap_or_else(|| panic!("{profile}"));
        assert!(attention.contains("dispatches)"), "{attention}");
        assert!(profile.contains("matvec"), "{profile}");
    }
}
