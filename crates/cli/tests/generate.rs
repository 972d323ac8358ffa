//! `lilypad generate -n N`: N samples of one prompt decoded together. Greedy samples are
//! the same text as a single greedy generation; sampled ones differ by seed.

mod common;

use std::path::PathBuf;

use common::{lilypad, text};

fn model() -> String {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../tests/fixtures/qwen/qwen3-tiny/model.gguf")
    .to_string_lossy()
    .into_owned()
}

fn generate(extra: &[&str]) -> std::process::Output {
    let m = model();
    let mut args = vec![
        "generate",
        "-m",
        &m,
        "-q",
        "-p",
        "The river carried",
        "--max-tokens",
        "6",
    ];
    args.extend(extra);
    lilypad(&args)
}

/// The samples' texts, in order.
fn samples(o: &std::process::Output) -> Vec<String> {
    assert!(o.status.success(), "{}", text(o));
    let out = String::from_utf8_lossy(&o.stdout);
    let mut v: Vec<(usize, String)> = out
        .split("--- sample ")
        .skip(1)
        .map(|block| {
            let (head, body) = block.split_once('\n').unwrap();
            let i: usize = head.split_whitespace().next().unwrap().parse().unwrap();
            (i, body.trim_end_matches('\n').to_string())
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, t)| t).collect()
}

#[test]
fn samples_decode_together() {
    let single = generate(&["--temperature", "0"]);
    assert!(single.status.success(), "{}", text(&single));
    let single = String::from_utf8_lossy(&single.stdout)
        .trim_end()
        .to_string();

    let greedy = samples(&generate(&["-n", "3", "--temperature", "0"]));
    assert_eq!(greedy.len(), 3);
    assert!(
        greedy.iter().all(|s| s.trim_end() == single),
        "{greedy:?} vs {single:?}"
    );

    let sampled = samples(&generate(&[
        "-n",
        "4",
        "--temperature",
        "1.5",
        "--seed",
        "9",
    ]));
    assert_eq!(sampled.len(), 4);
    assert!(sampled.iter().any(|s| s != &sampled[0]), "{sampled:?}");

    let bad = generate(&["-n", "0"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("-n 0"),
        "{}",
        text(&bad)
    );
}
