//! `Bash`: one shell command, its combined output and exit code.

use std::time::Duration;

use super::Observation;
use super::args::{Args, Kind, Param, Spec};
use crate::{Repository, Shell};
use lilypad_shell::cut::cut_middle;
use lilypad_shell::{ExternalShell, ShellOutput};

pub(super) const DEFAULT_TIMEOUT_MS: u64 = 120_000;
pub(super) const MAX_TIMEOUT_MS: u64 = 600_000;
pub(super) const MAX_OUTPUT_CHARS: usize = 30_000;

pub(super) const SPEC: Spec = Spec {
    name: "Bash",
    description: "Executes a bash command in the repository and returns its output.\n\
\n\
Usage:\n\
- Commands start in the repository root. Do not rely on `cd` or environment variables carrying over to the next call: use absolute paths, or `cd dir && command` in one call. Quote paths that contain spaces.\n\
- timeout is in milliseconds: 120000 (2 minutes) by default, at most 600000 (10 minutes). A command still running then is stopped, together with every process it started.\n\
- Standard input is closed, so interactive programs (editors, pagers, prompts) cannot be used: pass flags such as `-y` or `--no-pager`.\n\
- stdout and stderr come back as one stream, in the order they were written. Output over 30,000 characters is cut in the middle, keeping its start and its end.\n\
- A non-zero exit code is reported after the output.\n\
- Processes left running in the background (`command &`) are stopped when the command ends.\n\
- Use Read, Edit, Write and Glob rather than cat, sed, echo > file or find to read, change and find files; use Bash for builds, tests, git and searching contents with grep.\n\
- Give a short description of what the command does (5-10 words).",
    params: &[
        Param::required("command", Kind::String, "The command to execute"),
        Param::optional(
            "description",
            Kind::String,
            "What the command does, in 5-10 words (e.g. \"Run the unit tests\")",
        ),
        Param::optional(
            "timeout",
            Kind::Integer,
            "Timeout in milliseconds (default 120000, max 600000)",
        ),
    ],
};

pub(super) fn run(shell: &mut dyn Shell, repo: &mut dyn Repository, args: &Args) -> Observation {
    let (command, timeout_ms) = match command_and_timeout(args) {
        Ok(c) => c,
        Err(problem) => return problem,
    };
    shell.reset_cwd();
    let result = shell.run(repo, command, Duration::from_millis(timeout_ms));
    observe(result, timeout_ms)
}

/// [`run`] for callers that can wait on a shell whose programs answer later.
pub(super) async fn run_async(
    shell: &mut dyn Shell,
    repo: &mut dyn Repository,
    args: &Args,
) -> Observation {
    let (command, timeout_ms) = match command_and_timeout(args) {
        Ok(c) => c,
        Err(problem) => return problem,
    };
    shell.reset_cwd();
    let result = shell
        .run_async(repo, command, Duration::from_millis(timeout_ms))
        .await;
    observe(result, timeout_ms)
}

/// The same call through an [`ExternalShell`]: a refusal is what the model reads.
pub(super) async fn run_external(shell: &mut dyn ExternalShell, args: &Args) -> Observation {
    let (command, timeout_ms) = match command_and_timeout(args) {
        Ok(c) => c,
        Err(problem) => return problem,
    };
    match shell.run(command, Duration::from_millis(timeout_ms)).await {
        Ok(result) => observe(result, timeout_ms),
        Err(refusal) => Observation::error(refusal),
    }
}

fn command_and_timeout(args: &Args) -> Result<(&str, u64), Observation> {
    let command = args.text("command");
    if command.trim().is_empty() {
        return Err(Observation::error("command is empty."));
    }
    // Longer requests are held to the maximum rather than refused: the command still runs.
    let timeout_ms = args
        .count("timeout")
        .unwrap_or(DEFAULT_TIMEOUT_MS)
        .min(MAX_TIMEOUT_MS);
    if timeout_ms == 0 {
        return Err(Observation::error(
            "timeout must be at least 1 millisecond.",
        ));
    }
    Ok((command, timeout_ms))
}

fn observe(result: ShellOutput, timeout_ms: u64) -> Observation {
    let output = cut_middle(result.output.trim_end_matches('\n'), MAX_OUTPUT_CHARS);
    let status = if result.timed_out {
        Some(format!(
            "Command timed out after {timeout_ms} ms and was stopped, with every process it started."
        ))
    } else {
        match result.exit_code {
            Some(0) => None,
            Some(code) => Some(format!("Exit code: {code}")),
            None => Some("The command did not finish normally (no exit code).".into()),
        }
    };
    match (output.is_empty(), status) {
        (true, None) => Observation::ok("(Command completed with no output)"),
        (false, None) => Observation::ok(output),
        (true, Some(status)) => Observation::error(status),
        (false, Some(status)) => Observation::error(format!("{output}\n{status}")),
    }
}
