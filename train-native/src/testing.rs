//! Helpers for the tests that run the real pipeline on a built environment: set
//! LILYPAD_TEST_TRAIN_DIR to a train-native folder in which `envs build --only inflection`
//! ran (scripts/test.sh does).

use crate::envs::Environment;
use crate::manifest::{Manifest, Split};
use crate::task::{BugSite, Hints, Task};
use crate::workspace::Workspace;

/// A tool call as the agent reads it from a model's reply.
pub fn call(name: &str, args: serde_json::Value) -> String {
    format!(
        "<tool_call>\n{}\n</tool_call>",
        serde_json::json!({"name": name, "arguments": args})
    )
}

/// The workspace LILYPAD_TEST_TRAIN_DIR names and its inflection environment (which must be
/// built and usable), or None when the variable is unset.
pub fn built_inflection() -> Option<(Workspace, Environment)> {
    let Some(dir) = std::env::var_os("LILYPAD_TEST_TRAIN_DIR") else {
        eprintln!("LILYPAD_TEST_TRAIN_DIR is unset: not run");
        return None;
    };
    let ws = Workspace::new(Some(dir.into())).unwrap();
    let manifest = Manifest::builtin();
    let project = manifest.select(&["inflection".to_string()]).unwrap()[0];
    let env = ws.load_env(project).expect("inflection is built");
    assert!(env.usable, "{}", env.reason);
    Some((ws, env))
}

/// A task synthesized and validated in `env` (the first valid one of 30 candidates), with the
/// file's released and buggy text.
pub fn synthesized_task(ws: &Workspace, env: &Environment) -> (crate::task::Task, String, String) {
    let validator = crate::synth::Validator::new(ws, env).unwrap();
    let order = crate::synth::candidate_order(ws, env, 7).unwrap();
    for m in order.into_iter().take(30) {
        let original = std::fs::read_to_string(validator.work.join(&m.file)).unwrap();
        let (attempt, task) = validator.mutation(&m, original.clone(), "t", 1).unwrap();
        if let Some(t) = task {
            assert_eq!(attempt.verdict, crate::synth::Verdict::Valid);
            let buggy = m.apply(&original);
            return (t, original, buggy);
        }
    }
    panic!("no valid task in 30 candidates");
}

/// A chat session on the tiny random Llama of the LoRA fixtures (64 wide, 3 layers, a
/// 512-token byte-level vocabulary, a ChatML template), or None without a GPU adapter
/// (a failure instead with LILYPAD_REQUIRE_GPU=1).
pub fn tiny_llama_session(context: u32) -> Option<lilypad_chat::ChatSession> {
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/lora/llama-tiny/model/model.gguf"
    );
    let args = lilypad_cli::ModelArgs {
        model: model.into(),
        quantize: Default::default(),
        sha256: None,
        lora: None,
        context: Some(context),
        kv_cache: lilypad_engine::ModelOptions::default().kv_cache,
        draft: None,
        adapter: None,
        quiet: true,
    };
    match lilypad_cli::Loaded::open(&args) {
        Ok(loaded) => {
            Some(lilypad_chat::ChatSession::new(loaded.model, loaded.tok, "llama-tiny").unwrap())
        }
        Err(e) if format!("{e:#}").contains("no GPU adapter") => {
            assert!(
                std::env::var("LILYPAD_REQUIRE_GPU").as_deref() != Ok("1"),
                "{e:#}"
            );
            eprintln!("skipped: {e:#}");
            None
        }
        Err(e) => panic!("{e:#}"),
    }
}

/// A task of project `p` with one bug in `function`, its statement at hint `level`.
pub fn task(id: &str, function: &str, level: u8) -> Task {
    let mut t = Task {
        instance_id: id.into(),
        repo: "p".into(),
        version: "1".into(),
        split: Split::Train,
        patch: String::new(),
        test_patch: String::new(),
        fail_to_pass: vec!["t::a".into()],
        pass_to_pass: vec![],
        problem_statement: String::new(),
        bug_patch: String::new(),
        bugs: vec![BugSite {
            operator: "flip_comparison".into(),
            file: "m.py".into(),
            line: 3,
            function: function.into(),
        }],
        hints: Hints {
            failing_tests: vec!["t::a".into()],
            failure: "AssertionError".into(),
        },
        hint_level: 0,
        validation_s: 0.0,
    };
    t.set_hint_level(level);
    t
}
