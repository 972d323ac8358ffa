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
