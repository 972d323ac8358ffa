//! What the CLI's integration tests share: running the built `lilypad` binary.

use std::process::{Command, Output};

/// Runs `lilypad` with `args` (Mesa's Vulkan loader wants a runtime dir).
pub fn lilypad(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lilypad"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap()
}

/// Stdout then stderr, for assertion messages and reports.
#[allow(dead_code)] // not every test binary reads both streams
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
