//! Runs parsed command lines: and-or lists, pipelines (each stage runs to completion and its
//! output becomes the next stage's input), compounds, redirections and the step budget.

use std::collections::BTreeMap;
use std::time::Duration;

use super::commands::{self, Ctx};
use super::syntax::{
    AndOr, Command, Compound, Connector, List, Pipeline, RedirKind, Redirect, SimpleCommand,
};
use super::{PythonRunner, VersionControl};
use crate::LocalFuture;
use lilypad_repo::{EntryKind, RepoError, RepoPath, Repository};

/// What the model sees is cut here; the rest of a run still executes.
pub(super) const TERMINAL_CAP: usize = 1 << 20;
/// Pipes and command substitutions keep at most this much.
pub(super) const PIPE_CAP: usize = 16 << 20;
/// A redirection never writes a file larger than this.
pub(super) const FILE_CAP: usize = 64 << 20;
/// `bash -c`, `source` and scripts nest at most this deep.
const MAX_CALL_DEPTH: usize = 16;
/// The step budget per second of timeout; a step is one line processed, a command is
/// [`COMMAND_STEPS`].
const STEPS_PER_SECOND: u64 = 2_000_000;
const COMMAND_STEPS: u64 = 20;

/// Control flow that unwinds through commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    Exit(i32),
    Break(u32),
    Continue(u32),
    Timeout,
}

pub(super) type Exec = Result<i32, Flow>;

/// Why a word or redirection could not be expanded: a message for stderr (status 1) or a flow
/// that must keep unwinding.
#[derive(Debug)]
pub(super) enum Fail {
    Msg(String),
    Flow(Flow),
}

impl From<Flow> for Fail {
    fn from(f: Flow) -> Self {
        Fail::Flow(f)
    }
}

struct Sink {
    data: Vec<u8>,
    cap: usize,
    truncated: bool,
}

struct Input {
    data: Vec<u8>,
    pos: usize,
    /// Set when the input is a redirected file (`wc` pads its columns from the size).
    file_len: Option<u64>,
}

/// The three standard descriptors of a command: indices into the interpreter's inputs and
/// sinks; `None` is `/dev/null`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fds {
    pub stdin: Option<usize>,
    pub out: Option<usize>,
    pub err: Option<usize>,
}

impl Fds {
    /// Stdout and stderr to the terminal, no stdin.
    pub fn terminal() -> Self {
        Fds {
            stdin: None,
            out: Some(0),
            err: Some(0),
        }
    }
}

/// A file a redirection writes once its command is done.
struct FileOut {
    sink: usize,
    path: RepoPath,
    append: bool,
    shown: String,
}

#[derive(Clone, Copy, Default)]
pub(super) struct Options {
    pub errexit: bool,
    pub nounset: bool,
    pub pipefail: bool,
}

/// The elapsed-time limit, and a step count that bounds work even if the clock is coarse.
pub(super) struct Budget {
    steps_left: u64,
    deadline: Option<web_time::Instant>,
    until_clock: u64,
}

impl Budget {
    pub fn new(timeout: Duration) -> Self {
        let steps = (timeout.as_secs_f64() * STEPS_PER_SECOND as f64).max(1000.0) as u64;
        Budget {
            steps_left: steps,
            deadline: web_time::Instant::now().checked_add(timeout),
            until_clock: 0,
        }
    }

    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    pub fn deadline(&self) -> Option<web_time::Instant> {
        self.deadline
    }

    /// Time left before the deadline (none: no deadline).
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(web_time::Instant::now()))
    }

    /// Reads the clock now (after a program that ran outside the step count).
    pub fn check_clock(&mut self) -> Result<(), Flow> {
        if self.deadline.is_some_and(|d| web_time::Instant::now() >= d) {
            self.steps_left = 0;
            return Err(Flow::Timeout);
        }
        Ok(())
    }

    pub fn tick(&mut self, n: u64) -> Result<(), Flow> {
        if self.steps_left < n {
            self.steps_left = 0;
            return Err(Flow::Timeout);
        }
        self.steps_left -= n;
        self.until_clock = self.until_clock.saturating_sub(n);
        if self.until_clock == 0 {
            // Reading the clock is cheap but not free: look every few thousand steps.
            self.until_clock = 10_000;
            if self.deadline.is_some_and(|d| web_time::Instant::now() >= d) {
                self.steps_left = 0;
                return Err(Flow::Timeout);
            }
        }
        Ok(())
    }
}

/// What a subshell must not leak to its parent.
pub(super) struct Scope {
    cwd: RepoPath,
    vars: BTreeMap<String, String>,
    opts: Options,
}

pub(super) struct Interp<'a> {
    pub repo: &'a mut dyn Repository,
    pub cwd: RepoPath,
    pub vars: BTreeMap<String, String>,
    /// `$?`
    pub status: i32,
    pub opts: Options,
    pub vcs: Option<&'a dyn VersionControl>,
    pub python: Option<&'a mut dyn PythonRunner>,
    pub budget: Budget,
    /// Nesting of `bash -c`, `source` and scripts.
    pub depth: usize,
    /// Inside an `if`/`while` condition or a non-final `&&`/`||` operand, where `set -e` is off.
    cond: usize,
    /// Enclosing loops, for `break`/`continue`.
    pub loops: u32,
    /// Status of the last command substitution, which an assignment-only command returns.
    subst_status: Option<i32>,
    sinks: Vec<Sink>,
    inputs: Vec<Input>,
}

impl<'a> Interp<'a> {
    pub fn new(
        repo: &'a mut dyn Repository,
        cwd: RepoPath,
        vars: BTreeMap<String, String>,
        timeout: Duration,
    ) -> Self {
        Interp {
            repo,
            cwd,
            vars,
            status: 0,
            opts: Options::default(),
            vcs: None,
            python: None,
            budget: Budget::new(timeout),
            depth: 0,
            cond: 0,
            loops: 0,
            subst_status: None,
            sinks: vec![Sink {
                data: Vec::new(),
                cap: TERMINAL_CAP,
                truncated: false,
            }],
            inputs: Vec::new(),
        }
    }

    /// The terminal's text and whether it was cut.
    pub fn take_terminal(&mut self) -> (Vec<u8>, bool) {
        let s = &mut self.sinks[0];
        (std::mem::take(&mut s.data), s.truncated)
    }

    pub fn root(&self) -> String {
        self.repo.root().to_string()
    }

    pub fn resolve(&self, input: &str) -> Result<RepoPath, RepoError> {
        RepoPath::resolve(self.repo.root(), &self.cwd, input)
    }

    // ---- buffers ----

    fn mark(&self) -> (usize, usize) {
        (self.sinks.len(), self.inputs.len())
    }

    fn release(&mut self, mark: (usize, usize)) {
        self.sinks.truncate(mark.0.max(1));
        self.inputs.truncate(mark.1);
    }

    fn new_sink(&mut self, cap: usize) -> usize {
        self.sinks.push(Sink {
            data: Vec::new(),
            cap,
            truncated: false,
        });
        self.sinks.len() - 1
    }

    fn take_sink(&mut self, id: usize) -> (Vec<u8>, bool) {
        match self.sinks.get_mut(id) {
            Some(s) => (std::mem::take(&mut s.data), s.truncated),
            None => (Vec::new(), false),
        }
    }

    pub fn new_input(&mut self, data: Vec<u8>, file_len: Option<u64>) -> usize {
        self.inputs.push(Input {
            data,
            pos: 0,
            file_len,
        });
        self.inputs.len() - 1
    }

    pub fn write(&mut self, sink: Option<usize>, bytes: &[u8]) {
        let Some(s) = sink.and_then(|id| self.sinks.get_mut(id)) else {
            return;
        };
        let room = s.cap.saturating_sub(s.data.len());
        if bytes.len() > room {
            s.truncated = true;
        }
        s.data.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// Everything left on an input.
    pub fn read_all(&mut self, input: Option<usize>) -> Vec<u8> {
        let Some(inp) = input.and_then(|id| self.inputs.get_mut(id)) else {
            return Vec::new();
        };
        let rest = inp.data.get(inp.pos..).unwrap_or_default().to_vec();
        inp.pos = inp.data.len();
        rest
    }

    /// One line (without its newline), or `None` at the end of the input.
    pub fn read_line(&mut self, input: Option<usize>) -> Option<Vec<u8>> {
        let inp = input.and_then(|id| self.inputs.get_mut(id))?;
        let rest = inp.data.get(inp.pos..)?;
        if rest.is_empty() {
            return None;
        }
        let end = rest.iter().position(|&b| b == b'\n');
        let line = rest[..end.unwrap_or(rest.len())].to_vec();
        inp.pos += end.map_or(rest.len(), |e| e + 1);
        Some(line)
    }

    pub fn input_file_len(&self, input: Option<usize>) -> Option<u64> {
        input
            .and_then(|id| self.inputs.get(id))
            .and_then(|i| i.file_len)
    }

    pub fn errln(&mut self, fds: Fds, msg: &str) {
        self.write(fds.err, msg.as_bytes());
        self.write(fds.err, b"\n");
    }

    pub fn save_scope(&self) -> Scope {
        Scope {
            cwd: self.cwd.clone(),
            vars: self.vars.clone(),
            opts: self.opts,
        }
    }

    pub fn restore_scope(&mut self, s: Scope) {
        self.cwd = s.cwd;
        self.vars = s.vars;
        self.opts = s.opts;
    }

    /// `set -e` is off while a condition runs (`cond` counts the nesting).
    async fn pipeline_in_condition(&mut self, p: &Pipeline, fds: Fds) -> Exec {
        self.cond += 1;
        let r = self.exec_pipeline(p, fds).await;
        self.cond -= 1;
        r
    }

    async fn list_in_condition(&mut self, list: &List, fds: Fds) -> Exec {
        self.cond += 1;
        let r = self.exec_list(list, fds).await;
        self.cond -= 1;
        r
    }

    // ---- execution ----

    // Execution is asynchronous because a program (Python in the browser's worker) may answer
    // later; the functions that recurse (lists, commands, expansions) return boxed futures.
    pub fn exec_list<'s>(&'s mut self, list: &'s List, fds: Fds) -> LocalFuture<'s, Exec> {
        Box::pin(async move {
            let mut status = 0;
            for ao in list {
                status = self.exec_and_or(ao, fds).await?;
            }
            Ok(status)
        })
    }

    /// Runs `list` as a subshell: state changes stay inside, `exit` ends only it.
    pub async fn exec_subshell(&mut self, list: &List, fds: Fds) -> Exec {
        let saved = self.save_scope();
        let loops = std::mem::take(&mut self.loops);
        let r = self.exec_list(list, fds).await;
        self.loops = loops;
        self.restore_scope(saved);
        match r {
            Ok(s) | Err(Flow::Exit(s)) => Ok(s),
            Err(Flow::Break(_) | Flow::Continue(_)) => Ok(self.status),
            Err(Flow::Timeout) => Err(Flow::Timeout),
        }
    }

    async fn exec_and_or(&mut self, ao: &AndOr, fds: Fds) -> Exec {
        let n = ao.rest.len();
        let mut status = if n > 0 {
            self.pipeline_in_condition(&ao.first, fds).await?
        } else {
            self.exec_pipeline(&ao.first, fds).await?
        };
        let mut last_ran = 0;
        let mut negated = ao.first.negate;
        for (i, (conn, p)) in ao.rest.iter().enumerate() {
            let run = match conn {
                Connector::And => status == 0,
                Connector::Or => status != 0,
            };
            if run {
                status = if i + 1 < n {
                    self.pipeline_in_condition(p, fds).await?
                } else {
                    self.exec_pipeline(p, fds).await?
                };
                last_ran = i + 1;
                negated = p.negate;
            }
        }
        if self.opts.errexit && self.cond == 0 && status != 0 && last_ran == n && !negated {
            return Err(Flow::Exit(status));
        }
        Ok(status)
    }

    async fn exec_pipeline(&mut self, p: &Pipeline, fds: Fds) -> Exec {
        let status = if let [only] = p.commands.as_slice() {
            self.exec_command(only, fds).await?
        } else {
            let mark = self.mark();
            let mut stdin = fds.stdin;
            let mut last_status = 0;
            let mut failed = 0;
            for (i, cmd) in p.commands.iter().enumerate() {
                let last = i + 1 == p.commands.len();
                let out = if last {
                    fds.out
                } else {
                    Some(self.new_sink(PIPE_CAP))
                };
                // Every stage is a subshell: `cd` or assignments in it do not leak.
                let saved = self.save_scope();
                let r = self
                    .exec_command(
                        cmd,
                        Fds {
                            stdin,
                            out,
                            err: fds.err,
                        },
                    )
                    .await;
                self.restore_scope(saved);
                last_status = match r {
                    Ok(s) | Err(Flow::Exit(s)) => s,
                    Err(Flow::Break(_) | Flow::Continue(_)) => 0,
                    Err(Flow::Timeout) => {
                        self.release(mark);
                        return Err(Flow::Timeout);
                    }
                };
                if last_status != 0 {
                    failed = last_status;
                }
                if let (false, Some(o)) = (last, out) {
                    let (data, _) = self.take_sink(o);
                    stdin = Some(self.new_input(data, None));
                }
            }
            self.release(mark);
            if self.opts.pipefail {
                failed
            } else {
                last_status
            }
        };
        let status = if p.negate {
            i32::from(status == 0)
        } else {
            status
        };
        self.status = status;
        Ok(status)
    }

    async fn exec_command(&mut self, cmd: &Command, fds: Fds) -> Exec {
        self.budget.tick(COMMAND_STEPS)?;
        match cmd {
            Command::Simple(c) => self.exec_simple(c, fds).await,
            Command::Compound(c, redirects) => {
                let mark = self.mark();
                let r = match self.apply_redirects(redirects, fds).await {
                    Ok((inner, files)) => {
                        let r = self.exec_compound(c, inner).await;
                        self.flush_files(files, fds);
                        r
                    }
                    Err(fail) => self.report(fail, fds),
                };
                self.release(mark);
                r
            }
        }
    }

    /// Prints an expansion or redirection failure as bash does; the command's status is 1.
    fn report(&mut self, fail: Fail, fds: Fds) -> Exec {
        match fail {
            Fail::Msg(m) => {
                self.errln(fds, &format!("bash: {m}"));
                Ok(1)
            }
            Fail::Flow(f) => Err(f),
        }
    }

    async fn exec_compound(&mut self, c: &Compound, fds: Fds) -> Exec {
        match c {
            Compound::Group(list) => self.exec_list(list, fds).await,
            Compound::Subshell(list) => self.exec_subshell(list, fds).await,
            Compound::If {
                branches,
                otherwise,
            } => {
                for (cond, body) in branches {
                    if self.list_in_condition(cond, fds).await? == 0 {
                        return self.exec_list(body, fds).await;
                    }
                }
                match otherwise {
                    Some(body) => self.exec_list(body, fds).await,
                    None => Ok(0),
                }
            }
            Compound::For { var, items, body } => {
                let words = match items {
                    Some(items) => match self.expand_words(items, fds).await {
                        Ok(w) => w,
                        Err(fail) => return self.report(fail, fds),
                    },
                    None => Vec::new(),
                };
                let mut status = 0;
                for w in words {
                    self.budget.tick(COMMAND_STEPS)?;
                    self.vars.insert(var.clone(), w);
                    let (s, go_on) = self.loop_body(body, fds).await?;
                    status = s;
                    if !go_on {
                        break;
                    }
                }
                Ok(status)
            }
            Compound::While { cond, body, until } => {
                let mut status = 0;
                loop {
                    self.budget.tick(COMMAND_STEPS)?;
                    let c = self.list_in_condition(cond, fds).await?;
                    if (c == 0) == *until {
                        break;
                    }
                    let (s, go_on) = self.loop_body(body, fds).await?;
                    status = s;
                    if !go_on {
                        break;
                    }
                }
                Ok(status)
            }
        }
    }

    /// One pass of a loop body: its status and whether the loop goes on (`break` stops it;
    /// `break N`/`continue N` unwind to an outer loop).
    async fn loop_body(&mut self, body: &List, fds: Fds) -> Result<(i32, bool), Flow> {
        self.loops += 1;
        let r = self.exec_list(body, fds).await;
        self.loops -= 1;
        match r {
            Ok(s) => Ok((s, true)),
            Err(Flow::Break(n)) if n > 1 => Err(Flow::Break(n - 1)),
            Err(Flow::Break(_)) => Ok((0, false)),
            Err(Flow::Continue(n)) if n > 1 => Err(Flow::Continue(n - 1)),
            Err(Flow::Continue(_)) => Ok((0, true)),
            Err(f) => Err(f),
        }
    }

    async fn exec_simple(&mut self, c: &SimpleCommand, fds: Fds) -> Exec {
        self.subst_status = None;
        let argv = match self.expand_words(&c.words, fds).await {
            Ok(v) => v,
            Err(fail) => return self.report(fail, fds),
        };
        // Assignments before a command apply to that command only.
        let mut restore = Vec::new();
        for (name, word) in &c.assigns {
            let value = match self.expand_single(word, fds).await {
                Ok(v) => v,
                Err(fail) => return self.report(fail, fds),
            };
            let old = self.vars.insert(name.clone(), value);
            if !argv.is_empty() {
                restore.push((name.clone(), old));
            }
        }
        let mark = self.mark();
        let r = match self.apply_redirects(&c.redirects, fds).await {
            Ok((inner, files)) => {
                let r = if argv.is_empty() {
                    Ok(self.subst_status.unwrap_or(0))
                } else {
                    self.run_argv(&argv, inner).await
                };
                self.flush_files(files, fds);
                r
            }
            Err(fail) => self.report(fail, fds),
        };
        self.release(mark);
        for (name, old) in restore {
            match old {
                Some(v) => self.vars.insert(name, v),
                None => self.vars.remove(&name),
            };
        }
        r
    }

    /// Runs one command by name: a builtin, a utility, Python, or a script file.
    pub fn run_argv<'s>(&'s mut self, argv: &'s [String], fds: Fds) -> LocalFuture<'s, Exec> {
        Box::pin(async move {
            let Some(name) = argv.first() else {
                return Ok(0);
            };
            let args = &argv[1..];
            if let Some(cmd) = commands::lookup(name) {
                let mut ctx = Ctx {
                    sh: self,
                    fds,
                    name,
                };
                let status = match cmd {
                    commands::Cmd::Now(f) => f(&mut ctx, args)?,
                    commands::Cmd::Later(f) => f(&mut ctx, args).await?,
                };
                self.status = status;
                return Ok(status);
            }
            if name.contains('/') {
                return self.run_script_file(name, args, fds).await;
            }
            self.errln(fds, &format!("bash: {name}: command not found"));
            Ok(127)
        })
    }

    /// `./script.sh` or `./tool.py`: shell scripts run here, Python goes to the runner.
    async fn run_script_file(&mut self, name: &str, args: &[String], fds: Fds) -> Exec {
        let data = match self.resolve(name).and_then(|p| {
            if self.repo.kind(&p) == Some(EntryKind::Dir) {
                Err(RepoError::IsADirectory(name.into()))
            } else {
                self.repo.read(&p)
            }
        }) {
            Ok(d) => d,
            Err(RepoError::IsADirectory(_)) => {
                self.errln(fds, &format!("bash: {name}: Is a directory"));
                return Ok(126);
            }
            Err(e) => {
                self.errln(fds, &format!("bash: {name}: {}", commands::errno(&e)));
                return Ok(127);
            }
        };
        let text = String::from_utf8_lossy(&data).into_owned();
        let first = text.lines().next().unwrap_or("");
        let shebang = first.starts_with("#!");
        let python = (shebang && first.contains("python")) || (!shebang && name.ends_with(".py"));
        let mut argv = vec![name.to_string()];
        argv.extend(args.iter().cloned());
        if python {
            let mut py = vec!["python3".to_string()];
            py.extend(argv);
            return self.run_argv(&py, fds).await;
        }
        self.run_script(&text, fds).await
    }

    /// Parses and runs `src` one level deeper (scripts, `bash -c`, `eval`, `source`).
    pub async fn run_script(&mut self, src: &str, fds: Fds) -> Exec {
        if self.depth >= MAX_CALL_DEPTH {
            self.errln(fds, "bash: maximum nesting level exceeded");
            return Ok(1);
        }
        let list = match super::syntax::parse(src) {
            Ok(l) => l,
            Err(e) => {
                self.errln(fds, &format!("bash: {e}"));
                return Ok(2);
            }
        };
        self.depth += 1;
        let r = self.exec_list(&list, fds).await;
        self.depth -= 1;
        r
    }

    // ---- redirections ----

    async fn apply_redirects(
        &mut self,
        redirects: &[Redirect],
        mut fds: Fds,
    ) -> Result<(Fds, Vec<FileOut>), Fail> {
        let mut files = Vec::new();
        for r in redirects {
            if r.fd > 2 {
                continue;
            }
            match &r.kind {
                RedirKind::Read(word) => {
                    let name = self.expand_target(word, fds).await?;
                    let input = match name.as_str() {
                        "/dev/null" => Some(self.new_input(Vec::new(), Some(0))),
                        "/dev/stdin" => fds.stdin,
                        _ => {
                            let data = self
                                .resolve(&name)
                                .and_then(|p| self.repo.read(&p))
                                .map_err(|e| {
                                    Fail::Msg(format!("{name}: {}", commands::errno(&e)))
                                })?;
                            let len = data.len() as u64;
                            Some(self.new_input(data, Some(len)))
                        }
                    };
                    if r.fd == 0 {
                        fds.stdin = input;
                    }
                }
                RedirKind::Write { target, append } | RedirKind::WriteBoth { target, append } => {
                    let name = self.expand_target(target, fds).await?;
                    let sink = match name.as_str() {
                        "/dev/null" => None,
                        "/dev/stdout" => fds.out,
                        "/dev/stderr" => fds.err,
                        "/dev/tty" => Some(0),
                        _ => {
                            let path = self.open_for_write(&name, *append)?;
                            let sink = self.new_sink(FILE_CAP);
                            files.push(FileOut {
                                sink,
                                path,
                                append: *append,
                                shown: name,
                            });
                            Some(sink)
                        }
                    };
                    if matches!(r.kind, RedirKind::WriteBoth { .. }) {
                        fds.out = sink;
                        fds.err = sink;
                    } else {
                        set_fd(&mut fds, r.fd, sink);
                    }
                }
                RedirKind::Dup(word) => {
                    let target = self.expand_target(word, fds).await?;
                    let sink = match target.as_str() {
                        "-" => None,
                        "1" => fds.out,
                        "2" => fds.err,
                        "0" if r.fd == 0 => continue,
                        _ => return Err(Fail::Msg(format!("{target}: Bad file descriptor"))),
                    };
                    if r.fd == 0 {
                        fds.stdin = None;
                    } else {
                        set_fd(&mut fds, r.fd, sink);
                    }
                }
                RedirKind::Here(word) => {
                    let text = self.expand_single(word, fds).await?;
                    let input = self.new_input(text.into_bytes(), None);
                    if r.fd == 0 {
                        fds.stdin = Some(input);
                    }
                }
            }
        }
        Ok((fds, files))
    }

    async fn expand_target(
        &mut self,
        word: &super::syntax::Word,
        fds: Fds,
    ) -> Result<String, Fail> {
        let mut fields = self.expand_words(std::slice::from_ref(word), fds).await?;
        if fields.len() != 1 {
            let text = self.expand_single(word, fds).await.unwrap_or_default();
            return Err(Fail::Msg(format!("{text}: ambiguous redirect")));
        }
        Ok(fields.pop().unwrap_or_default())
    }

    /// Checks that `name` can be written (its folder exists, it is not a folder) and, unless
    /// appending, truncates it now as bash does before the command runs.
    fn open_for_write(&mut self, name: &str, append: bool) -> Result<RepoPath, Fail> {
        let msg = |e: &RepoError| Fail::Msg(format!("{name}: {}", commands::errno(e)));
        let path = self.resolve(name).map_err(|e| msg(&e))?;
        match self.repo.kind(&path) {
            Some(EntryKind::Dir) => return Err(msg(&RepoError::IsADirectory(name.into()))),
            Some(EntryKind::File) => {}
            None => {
                let parent = path.parent().unwrap_or_default();
                match self.repo.kind(&parent) {
                    Some(EntryKind::Dir) => {}
                    Some(EntryKind::File) => {
                        return Err(msg(&RepoError::NotADirectory(name.into())));
                    }
                    None => return Err(msg(&RepoError::NotFound(name.into()))),
                }
            }
        }
        if !append || self.repo.kind(&path).is_none() {
            self.repo.write(&path, b"").map_err(|e| msg(&e))?;
        }
        Ok(path)
    }

    fn flush_files(&mut self, files: Vec<FileOut>, fds: Fds) {
        for f in files {
            let (data, truncated) = self.take_sink(f.sink);
            if data.is_empty() && !truncated {
                continue;
            }
            let result = if f.append {
                self.repo
                    .read(&f.path)
                    .or_else(|_| Ok(Vec::new()))
                    .and_then(|mut old: Vec<u8>| {
                        old.extend_from_slice(&data);
                        self.repo.write(&f.path, &old)
                    })
            } else {
                self.repo.write(&f.path, &data)
            };
            if let Err(e) = result {
                self.errln(fds, &format!("bash: {}: {}", f.shown, commands::errno(&e)));
            } else if truncated {
                self.errln(fds, &format!("bash: {}: File too large", f.shown));
            }
        }
    }

    /// Runs `list` with stdout captured, as `$(...)` does; trailing newlines are removed.
    pub async fn command_subst(&mut self, list: &List, fds: Fds) -> Result<String, Fail> {
        let mark = self.mark();
        let sink = self.new_sink(PIPE_CAP);
        let r = self
            .exec_subshell(
                list,
                Fds {
                    stdin: fds.stdin,
                    out: Some(sink),
                    err: fds.err,
                },
            )
            .await;
        let (data, _) = self.take_sink(sink);
        self.release(mark);
        let status = r?;
        self.subst_status = Some(status);
        self.status = status;
        let mut text = String::from_utf8_lossy(&data).into_owned();
        while text.ends_with('\n') {
            text.pop();
        }
        Ok(text)
    }
}

fn set_fd(fds: &mut Fds, fd: u32, sink: Option<usize>) {
    match fd {
        1 => fds.out = sink,
        2 => fds.err = sink,
        _ => {}
    }
}
