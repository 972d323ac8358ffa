//! Helpers for the tests that run the real pipeline on a built environment: set
//! LILYPAD_TEST_TRAIN_DIR to a train-native folder in which `envs build --only inflection`
//! ran (scripts/test.sh does).

use crate::envs::Environment;
use crate::manifest::Manifest;
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
