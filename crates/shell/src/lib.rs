//! Shells behind the `Bash` tool. Natively a real shell runs in the repository's folder; in the
//! browser a small shell runs over the in-memory repository. Both answer the same way: combined
//! output and an exit status, so the model cannot tell (and need not care) which one ran.
//! An editor may also route `Bash` to a real terminal the user approves commands in
//! ([`ExternalShell`]).

pub mod cut;

// Real processes and process groups: Unix only, so never in the wasm build.
#[cfg(unix)]
mod native;
#[cfg(unix)]
pub use native::{CommandTag, DEFAULT_OUTPUT_LIMIT, NativeShell, exited};
#[cfg(unix)]
mod sandbox;
#[cfg(unix)]
pub use sandbox::{PidsCgroup, Sandbox, SandboxError, SandboxLimits};

// The shell over a `Repository` (the browser's Bash).
pub mod virtual_shell;
pub use virtual_shell::{
    Baseline, ProgramIo, PythonRunner, Stream, VersionControl, VirtualShell, diff_against,
    status_against,
};

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A future that stays on its thread (the browser's shell and Python are single-threaded).
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

use lilypad_repo::{RepoPath, Repository};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellOutput {
    /// stdout and stderr interleaved as the command wrote them (the model sees one stream).
    pub output: String,
    /// Exit status; `None` when the command was killed (timeout).
    pub exit_code: Option<i32>,
    pub timed_out: bool,
}

/// Runs the agent's `Bash` commands somewhere outside the toolbox: a terminal in the user's
/// editor, where the user approves each command. The answer comes from outside, hence async.
pub trait ExternalShell {
    /// The command's output, or why it did not run (the user refused it, the terminal is gone),
    /// which the model reads as the tool's error.
    fn run<'a>(
        &'a mut self,
        command: &'a str,
        timeout: Duration,
    ) -> LocalFuture<'a, Result<ShellOutput, String>>;
}

pub trait Shell {
    /// Runs `command` with the repository root as the starting folder. A shell that keeps a
    /// working folder between calls (`cd`) reports it through [`Shell::cwd`].
    fn run(&mut self, repo: &mut dyn Repository, command: &str, timeout: Duration) -> ShellOutput;

    /// [`Shell::run`] for callers that can wait: a shell whose programs answer asynchronously
    /// (the browser's Python, in a worker) only runs them here.
    fn run_async<'a>(
        &'a mut self,
        repo: &'a mut dyn Repository,
        command: &'a str,
        timeout: Duration,
    ) -> LocalFuture<'a, ShellOutput> {
        let output = self.run(repo, command, timeout);
        Box::pin(std::future::ready(output))
    }

    /// The folder the next command starts in.
    fn cwd(&self) -> RepoPath {
        RepoPath::root()
    }

    /// Makes the next command start at the repository root again. The agent's `Bash` tool does
    /// this before every call, so `cd` never carries over in either shell (as its description
    /// tells the model); an interactive terminal keeps its folder.
    fn reset_cwd(&mut self) {}
}
