//! A small bash over any [`Repository`]: the `Bash` tool in the browser, where no real shell
//! exists. It speaks the subset of bash an agent writes (pipes, `&&`/`||`/`;`, redirections,
//! heredocs, quoting, `$VAR`, `$(...)`, globs, `for`/`if`/`while`) and runs the coreutils,
//! grep, sed, find and diff an agent uses, with GNU's output formats and error messages.
//! Every path goes through [`RepoPath::resolve`], so nothing outside the repository is reachable.
//!
//! `git diff`/`git status` and Python are supplied by the caller ([`VersionControl`],
//! [`PythonRunner`]); without them the shell answers like a machine without git or Python.

mod arith;
mod commands;
mod escape;
mod expand;
mod glob;
mod interp;
/// The shell language's parser, public so that it can be fuzzed on its own.
pub mod syntax;

use std::collections::BTreeMap;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use interp::{Flow, Interp, PIPE_CAP};
use lilypad_repo::{Change, EntryKind, RepoError, RepoPath, Repository, Snapshot, patch};

use super::{LocalFuture, Shell, ShellOutput};

/// The baseline `git diff`/`git status` compare against (in the browser: the imported
/// snapshot of the project).
pub trait VersionControl {
    /// A unified diff in `git diff` format of the working copy against the baseline, limited to
    /// files at or below `paths` (everything when empty).
    fn diff(&self, repo: &dyn Repository, paths: &[RepoPath]) -> Result<String, RepoError>;

    /// Every file that differs from the baseline, sorted by path.
    fn status(&self, repo: &dyn Repository) -> Result<Vec<(Change, RepoPath)>, RepoError>;
}

/// [`VersionControl`] against a snapshot of the files (what `git diff` would call `HEAD`): the
/// one implementation the browser's workspace and `agent-stdio` share.
pub struct Baseline(pub Snapshot);

impl VersionControl for Baseline {
    fn diff(&self, repo: &dyn Repository, paths: &[RepoPath]) -> Result<String, RepoError> {
        diff_against(&self.0, repo, paths)
    }

    fn status(&self, repo: &dyn Repository) -> Result<Vec<(Change, RepoPath)>, RepoError> {
        status_against(&self.0, repo)
    }
}

/// `git diff` of the files at or below `paths` (all when empty) against `baseline`; only the
/// files in scope are read.
pub fn diff_against(
    baseline: &Snapshot,
    repo: &dyn Repository,
    paths: &[RepoPath],
) -> Result<String, RepoError> {
    let within = |p: &RepoPath| paths.is_empty() || paths.iter().any(|s| p.starts_with(s));
    let before: BTreeMap<RepoPath, &[u8]> = baseline
        .iter()
        .filter(|(p, _)| within(p))
        .map(|(p, d)| (p.clone(), d.as_slice()))
        .collect();
    let mut now = Snapshot::new();
    for path in repo.walk_files(&RepoPath::root())? {
        if within(&path) {
            let data = repo.read(&path)?;
            now.insert(path, data);
        }
    }
    Ok(patch::diff_between(&before, &now))
}

/// `git status`: every file that differs from `baseline`, in path order.
pub fn status_against(
    baseline: &Snapshot,
    repo: &dyn Repository,
) -> Result<Vec<(Change, RepoPath)>, RepoError> {
    Ok(patch::changes_between(baseline, &repo.snapshot()?)
        .into_iter()
        .map(|(path, change)| (change, path))
        .collect())
}

/// Runs Python programs (`python`, `python3`, `pytest`, `pip`), e.g. through Pyodide. The
/// answer may come later (Pyodide in a worker, which the page can stop at the time limit):
/// such a runner works only through [`Shell::run_async`](crate::Shell::run_async).
pub trait PythonRunner {
    /// Runs `argv` (its first item is the command name as typed) in folder `cwd`, reading and
    /// writing files through `repo`; resolves to the exit status.
    fn run<'a>(
        &'a mut self,
        repo: &'a mut dyn Repository,
        cwd: &'a RepoPath,
        argv: &'a [String],
        io: &'a mut ProgramIo,
    ) -> LocalFuture<'a, i32>;
}

/// Which stream a program wrote to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Standard input and output of a program the caller runs.
pub struct ProgramIo {
    stdin: Vec<u8>,
    /// Output in the order written.
    chunks: Vec<(Stream, Vec<u8>)>,
    written: usize,
    time_left: Option<Duration>,
}

impl ProgramIo {
    pub fn new(stdin: Vec<u8>) -> Self {
        ProgramIo {
            stdin,
            chunks: Vec::new(),
            written: 0,
            time_left: None,
        }
    }

    /// The command's time left: the runner stops the program when it runs out.
    pub fn with_time_left(mut self, time_left: Option<Duration>) -> Self {
        self.time_left = time_left;
        self
    }

    pub fn time_left(&self) -> Option<Duration> {
        self.time_left
    }

    pub fn stdin(&self) -> &[u8] {
        &self.stdin
    }

    pub fn write_stdout(&mut self, bytes: &[u8]) {
        self.push(Stream::Stdout, bytes);
    }

    pub fn write_stderr(&mut self, bytes: &[u8]) {
        self.push(Stream::Stderr, bytes);
    }

    /// What was written, in order, consecutive writes to one stream merged.
    pub fn output(&self) -> &[(Stream, Vec<u8>)] {
        &self.chunks
    }

    /// Output beyond the pipe limit is dropped.
    fn push(&mut self, stream: Stream, bytes: &[u8]) {
        let room = PIPE_CAP.saturating_sub(self.written);
        let bytes = &bytes[..bytes.len().min(room)];
        if bytes.is_empty() {
            return;
        }
        self.written += bytes.len();
        match self.chunks.last_mut() {
            Some((s, b)) if *s == stream => b.extend_from_slice(bytes),
            _ => self.chunks.push((stream, bytes.to_vec())),
        }
    }
}

/// The shell. It keeps its working folder between runs; variables, like a fresh `bash -c`,
/// start over each run.
pub struct VirtualShell {
    cwd: RepoPath,
    vcs: Option<Box<dyn VersionControl>>,
    python: Option<Box<dyn PythonRunner>>,
}

impl Default for VirtualShell {
    fn default() -> Self {
        Self::new()
    }
}

impl VirtualShell {
    pub fn new() -> Self {
        VirtualShell {
            cwd: RepoPath::root(),
            vcs: None,
            python: None,
        }
    }

    /// Answers `git diff` and `git status` from `vcs`.
    pub fn with_version_control(mut self, vcs: Box<dyn VersionControl>) -> Self {
        self.vcs = Some(vcs);
        self
    }

    /// Runs `python`, `python3`, `pytest` and `pip` through `runner`.
    pub fn with_python(mut self, runner: Box<dyn PythonRunner>) -> Self {
        self.python = Some(runner);
        self
    }

    pub fn set_python(&mut self, runner: Option<Box<dyn PythonRunner>>) {
        self.python = runner;
    }

    pub fn set_cwd(&mut self, cwd: RepoPath) {
        self.cwd = cwd;
    }
}

impl Shell for VirtualShell {
    /// Runs `command` to its end at once; a Python runner that answers later cannot run here
    /// (its command fails with a message that says so).
    fn run(&mut self, repo: &mut dyn Repository, command: &str, timeout: Duration) -> ShellOutput {
        let mut run = self.run_async(repo, command, timeout);
        let mut cx = Context::from_waker(Waker::noop());
        match run.as_mut().poll(&mut cx) {
            Poll::Ready(output) => output,
            Poll::Pending => ShellOutput {
                output: "bash: this shell's Python answers asynchronously; run the command \
                         through Shell::run_async\n"
                    .into(),
                exit_code: Some(1),
                timed_out: false,
            },
        }
    }

    fn run_async<'a>(
        &'a mut self,
        repo: &'a mut dyn Repository,
        command: &'a str,
        timeout: Duration,
    ) -> LocalFuture<'a, ShellOutput> {
        Box::pin(self.run_here(repo, command, timeout))
    }

    fn cwd(&self) -> RepoPath {
        self.cwd.clone()
    }

    fn reset_cwd(&mut self) {
        self.cwd = RepoPath::root();
    }
}

impl VirtualShell {
    async fn run_here(
        &mut self,
        repo: &mut dyn Repository,
        command: &str,
        timeout: Duration,
    ) -> ShellOutput {
        // A folder removed since the last run (by a tool or the user) falls back to the root.
        if repo.kind(&self.cwd) != Some(EntryKind::Dir) {
            self.cwd = RepoPath::root();
        }
        let list = match syntax::parse(command) {
            Ok(l) => l,
            Err(e) => {
                return ShellOutput {
                    output: format!("bash: {e}\n"),
                    exit_code: Some(2),
                    timed_out: false,
                };
            }
        };
        let root = repo.root().to_string();
        let vars: BTreeMap<String, String> = [
            ("HOME", root.as_str()),
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("SHELL", "/bin/bash"),
            ("USER", "user"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut sh = Interp::new(repo, self.cwd.clone(), vars, timeout);
        sh.vcs = self.vcs.as_deref();
        sh.python = match self.python.as_mut() {
            Some(p) => Some(&mut **p),
            None => None,
        };
        let result = sh.exec_list(&list, interp::Fds::terminal()).await;
        let (bytes, truncated) = sh.take_terminal();
        let (exit_code, timed_out) = match result {
            Ok(s) | Err(Flow::Exit(s)) => (Some(s), false),
            Err(Flow::Break(_) | Flow::Continue(_)) => (Some(sh.status), false),
            Err(Flow::Timeout) => (None, true),
        };
        self.cwd = sh.cwd.clone();
        let mut output = String::from_utf8_lossy(&bytes).into_owned();
        if truncated {
            output.push_str("\n[output truncated: more than 1 MiB]\n");
        }
        ShellOutput {
            output,
            exit_code,
            timed_out,
        }
    }
}
