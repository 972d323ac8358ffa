//! `lilypad generate -n N`: N samples of one prompt decoded together. Greedy samples are
//! the same text as a single greedy generation; sampled ones differ by seed. `lilypad chat`
//! reuses earlier turns and answers as `generate --chat` does.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

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

/// The `(prompt tokens evaluated, reused)` of each reply's timing line.
fn prompt_counts(stderr: &str) -> Vec<(usize, usize)> {
    stderr
        .split("[prompt ")
        .skip(1)
        .map(|s| {
            let mut words = s.split_whitespace();
            let evaluated = words.next().unwrap().parse().unwrap();
            let reused = words.nth(1).unwrap().trim_start_matches('(');
            (evaluated, reused.parse().unwrap())
        })
        .collect()
}

#[test]
fn chat_reuses_earlier_turns_and_answers_as_generate_does() {
    let m = model();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lilypad"))
        .args(["chat", "-m", &m, "--max-tokens", "6", "--temperature", "0"])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"The river carried\nAnd then?\n/reset\nThe river carried\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let counts = prompt_counts(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(counts.len(), 3, "{}", text(&out));
    assert_eq!(counts[0].1, 0);
    assert!(
        counts[1].1 > counts[0].0,
        "the second turn reuses the first: {counts:?}"
    );
    assert_eq!(counts[2], counts[0]);

    // Each reply is printed with a newline after it: the first and the last (the same
    // message after /reset, from a fresh state) are what `generate --chat` prints.
    let single = lilypad(&[
        "generate",
        "-m",
        &m,
        "-q",
        "--chat",
        "-p",
        "The river carried",
        "--max-tokens",
        "6",
        "--temperature",
        "0",
    ]);
    assert!(single.status.success(), "{}", text(&single));
    let (single, stdout) = (
        String::from_utf8_lossy(&single.stdout),
        String::from_utf8_lossy(&out.stdout),
    );
    assert!(
        stdout.len() > 2 * single.len()
            && stdout.starts_with(&*single)
            && stdout.ends_with(&*single),
        "chat {stdout:?}, generate --chat {single:?}"
    );
}

/// `--draft`: the same text as without (sampled, with a seed), the draft's counts reported;
/// a draft the model cannot give and a draft with `-n` are clear errors.
#[test]
fn drafts_change_the_speed_not_the_text() {
    let args = ["--temperature", "0.8", "--seed", "3"];
    let plain = generate(&args);
    assert!(plain.status.success(), "{}", text(&plain));
    let m = model();
    let drafted = lilypad(
        &[
            &[
                "generate",
                "-m",
                &m,
                "-p",
                "The river carried",
                "--max-tokens",
                "6",
            ][..],
            &args,
            &["--draft", "lookup:3"],
        ]
        .concat(),
    );
    assert!(drafted.status.success(), "{}", text(&drafted));
    assert_eq!(drafted.stdout, plain.stdout);
    let stderr = String::from_utf8_lossy(&drafted.stderr);
    assert!(stderr.contains("[draft lookup:3: "), "{stderr}");

    let mtp = generate(&["--draft", "mtp"]);
    assert!(!mtp.status.success());
    assert!(
        text(&mtp).contains("multi-token-prediction"),
        "{}",
        text(&mtp)
    );
    let many = generate(&["--draft", "lookup", "-n", "2"]);
    assert!(!many.status.success());
    assert!(text(&many).contains("--draft"), "{}", text(&many));
    let bad = generate(&["--draft", "lookup:99"]);
    assert!(!bad.status.success());
    assert!(text(&bad).contains("lookup drafts 1..=8"), "{}", text(&bad));
}
