//! A real shell for native runs: `bash -c` (or `sh -c` where bash is missing) in the
//! repository's folder on disk.
//!
//! Each command runs in a process group of its own, so the whole tree it starts — pipelines,
//! background jobs, their children — can be stopped together: on timeout, and also as soon as
//! the shell itself exits, so no stray process outlives its command or keeps its output pipe
//! open. A process that leaves the group (`setsid`, `setpgid`, GNU `timeout`) is still found:
//! every command's processes inherit a `LILYPAD_COMMAND` variable naming the command, and on
//! Linux the shell stops every process whose environment carries it. Only a process that both
//! leaves the group and replaces its whole environment (`env -i setsid …`) escapes that; the
//! [`Sandbox`]'s PID namespace takes down everything, however it detached.

use std::collections::VecDeque;
use std::io::{self, PipeReader, PipeWriter, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::sandbox::{PidsCgroup, Sandbox, count_descendants, proc_pids};
use super::{Shell, ShellOutput};
use crate::cut::cut_note;
use lilypad_repo::Repository;

/// Output kept per command: its first and last half of this many bytes. The `Bash` tool shows
/// far less; the limit only keeps a command printing gigabytes from exhausting memory.
pub const DEFAULT_OUTPUT_LIMIT: usize = 1 << 20;

/// How long to keep reading output once every process in the group is gone. Only a process that
/// left the group can hold the pipe open longer; its later output is dropped.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

#[derive(Clone, Debug)]
pub struct NativeShell {
    dir: PathBuf,
    output_limit: usize,
    sandbox: Sandbox,
    env: Vec<(String, String)>,
}

impl NativeShell {
    /// A shell whose commands start in `dir` (the repository's folder on disk), unconfined:
    /// give model-written commands a sandbox with [`NativeShell::sandboxed`].
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            output_limit: DEFAULT_OUTPUT_LIMIT,
            sandbox: Sandbox::Off,
            env: Vec::new(),
        }
    }

    /// Runs every command in `sandbox`.
    pub fn sandboxed(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Keeps at most `bytes` of each command's output (its start and its end).
    pub fn with_output_limit(mut self, bytes: usize) -> Self {
        self.output_limit = bytes.max(2);
        self
    }

    /// Sets an environment variable for every command (e.g. the PYTHONPATH a project's tests
    /// need to import the repository's own code).
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    fn spawn(
        &self,
        command: &str,
        tag: &CommandTag,
        out: &PipeWriter,
    ) -> io::Result<(Child, Option<PidsCgroup>)> {
        let mut last_error = None;
        let shells: &[&str] = match &self.sandbox {
            Sandbox::Off => &["bash", "sh"],
            // Inside the sandbox a missing shell is bwrap's error, not ours: pick one first.
            Sandbox::Bubblewrap { .. } if Path::new("/bin/bash").exists() => &["bash"],
            Sandbox::Bubblewrap { .. } => &["sh"],
        };
        for &program in shells {
            let (mut cmd, cgroup) = self.sandbox.command_with(&self.dir, program, command);
            tag.apply(&mut cmd);
            let spawned = cmd
                .stdin(Stdio::null())
                // Both streams write to one pipe, so the model sees them interleaved as written.
                .stdout(out.try_clone()?)
                .stderr(out.try_clone()?)
                .process_group(0)
                // Nothing can answer a pager or a password prompt: make tools print and fail.
                .env("PAGER", "cat")
                .env("GIT_PAGER", "cat")
                .env("GIT_TERMINAL_PROMPT", "0")
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .spawn();
            match spawned {
                Err(e) if e.kind() == io::ErrorKind::NotFound => last_error = Some(e),
                other => return other.map(|child| (child, cgroup)),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no shell found")))
    }
}

impl Shell for NativeShell {
    fn run(&mut self, _repo: &mut dyn Repository, command: &str, timeout: Duration) -> ShellOutput {
        let failed = |message: String| ShellOutput {
            output: message,
            exit_code: None,
            timed_out: false,
        };
        if !self.dir.is_dir() {
            return failed(format!(
                "working directory {} does not exist",
                self.dir.display()
            ));
        }
        let (reader, writer) = match io::pipe() {
            Ok(pipe) => pipe,
            Err(e) => return failed(format!("could not create an output pipe: {e}")),
        };
        let tag = CommandTag::new();
        let spawned = self.spawn(command, &tag, &writer);
        // Only the command may hold the write end, or reading would never see its end.
        drop(writer);
        // The cgroup (if any) is removed when this goes out of scope, after the kill below.
        let (mut child, cgroup) = match spawned {
            Ok(spawned) => spawned,
            Err(e) => return failed(format!("failed to start a shell: {e}")),
        };
        let capture = Arc::new(Mutex::new(Capture::new(self.output_limit)));
        let done = read_into(reader, Arc::clone(&capture));

        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(1);
        // A pids cgroup bounds the processes in the kernel; without one, count them here.
        let max_processes = match cgroup {
            Some(_) => None,
            None => self.sandbox.limits().map(|l| l.processes),
        };
        let mut too_many = None;
        let timed_out = loop {
            if exited(&mut child) {
                break false;
            }
            if let Some(max) = max_processes {
                let n = count_descendants(child.id());
                if n > max {
                    too_many = Some(max);
                    break false;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                break true;
            }
            thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        };
        // What the command left running once its shell was done (background jobs, detached
        // processes): reported, then stopped with the rest.
        let left_running = if timed_out || too_many.is_some() {
            0
        } else {
            tag.processes().len()
        };
        // The shell is not reaped yet, so its pid still names the group.
        tag.kill_tree(child.id());
        let status = child.wait();
        let _ = done.recv_timeout(DRAIN_GRACE);
        let mut output = capture
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .text();
        if left_running > 0 {
            let s = if left_running == 1 { "" } else { "es" };
            output.push_str(&format!(
                "\n[{left_running} process{s} the command left running in the background {} stopped when it ended]",
                if left_running == 1 { "was" } else { "were" }
            ));
        }
        if let Some(max) = too_many {
            output.push_str(&format!(
                "\n[the command started more than {max} processes at once; all of them were killed]"
            ));
        }
        ShellOutput {
            output,
            exit_code: if timed_out || too_many.is_some() {
                None
            } else {
                status.ok().and_then(exit_code)
            },
            timed_out,
        }
    }
}

/// Exit code as a shell reports it: 128 + the signal for a process killed by one.
fn exit_code(status: ExitStatus) -> Option<i32> {
    status.code().or_else(|| status.signal().map(|s| 128 + s))
}

/// Whether `child` has exited, without reaping it (`WNOWAIT`) where the platform allows:
/// until it is reaped its pid still names its process group, so [`CommandTag::kill_tree`]
/// can follow.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn exited(child: &mut Child) -> bool {
    // SAFETY: a zeroed siginfo_t is a valid out-parameter; waitid only writes into it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: `info` outlives the call; the pid is our own unreaped child.
    let rc = unsafe { libc::waitid(libc::P_PID, child.id(), &mut info, flags) };
    // With WNOHANG the pid stays 0 while the child runs; an error means there is nothing to wait for.
    rc != 0 || unsafe { info.si_pid() } != 0
}

/// Elsewhere `waitid(WNOWAIT)` is unreliable, so the shell is reaped here; its pid can then only
/// be reused as a group id once every process of the group is gone, which is when killing the
/// group is no longer needed.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn exited(child: &mut Child) -> bool {
    !matches!(child.try_wait(), Ok(None))
}

/// The variable that names a command in the environment of every process it starts.
const COMMAND_TAG: &str = "LILYPAD_COMMAND";

/// A name for one command's processes. Set in the command's environment, it is inherited
/// through fork and exec, so a process that left the command's process group or session still
/// carries it, and [`CommandTag::kill_all`] finds it (Linux: through `/proc`; elsewhere it
/// finds nothing and the process group is all there is).
pub struct CommandTag(String);

impl CommandTag {
    /// A name no other command of this process (or any other) shares.
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self(format!(
            "{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// Tags `command`: every process it starts carries the name.
    pub fn apply(&self, command: &mut std::process::Command) {
        command.env(COMMAND_TAG, &self.0);
    }

    /// Live processes carrying the name (one that exited but is not reaped has no environment
    /// left, so it is not counted).
    pub fn processes(&self) -> Vec<libc::pid_t> {
        let entry = format!("{COMMAND_TAG}={}", self.0);
        proc_pids()
            .into_iter()
            .filter_map(|pid| libc::pid_t::try_from(pid).ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == entry.as_bytes()))
            })
            .collect()
    }

    /// Kills the process group `leader` leads (the command was started in a group of its own)
    /// and then every process carrying the name. Call it before reaping the leader, so its pid
    /// still names the group and cannot have been reused.
    pub fn kill_tree(&self, leader: u32) {
        kill_group(leader);
        self.kill_all();
    }

    /// Kills every process carrying the name, scanning again until a scan finds none (a process
    /// that forked while the last one ran is caught by the next). Each round stops them all
    /// before killing any, so none can start more in between.
    pub fn kill_all(&self) {
        for _ in 0..100 {
            let found = self.processes();
            if found.is_empty() {
                return;
            }
            for &pid in &found {
                // SAFETY: plain system calls on pids just read from /proc; ESRCH (gone since)
                // is fine.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
            }
            for &pid in &found {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Default for CommandTag {
    fn default() -> Self {
        Self::new()
    }
}

/// Kills the process group `pid` leads.
fn kill_group(pid: u32) {
    if let Ok(pgid) = libc::pid_t::try_from(pid) {
        // SAFETY: plain system call; ESRCH (nothing left in the group) is the expected outcome
        // once everything has exited.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
    }
}

fn read_into(mut reader: PipeReader, capture: Arc<Mutex<Capture>>) -> Receiver<()> {
    let (done, finished) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => capture
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = done.send(());
    });
    finished
}

/// The first and last bytes of a stream, with a count of the characters dropped between them.
struct Capture {
    head: Vec<u8>,
    head_limit: usize,
    tail: VecDeque<u8>,
    tail_limit: usize,
    /// Characters (UTF-8 start bytes) that fell out between head and tail.
    dropped_chars: usize,
}

impl Capture {
    fn new(limit: usize) -> Self {
        let head_limit = limit / 2;
        Self {
            head: Vec::new(),
            head_limit,
            tail: VecDeque::new(),
            tail_limit: limit - head_limit,
            dropped_chars: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        let room = self.head_limit - self.head.len();
        if room > 0 {
            let n = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        self.tail.extend(bytes);
        if self.tail.len() > self.tail_limit {
            let excess = self.tail.len() - self.tail_limit;
            self.dropped_chars += self
                .tail
                .drain(..excess)
                .filter(|&b| b & 0xC0 != 0x80)
                .count();
        }
    }

    fn text(&self) -> String {
        let (a, b) = self.tail.as_slices();
        if self.dropped_chars == 0 {
            let all: Vec<u8> = self.head.iter().chain(a).chain(b).copied().collect();
            return String::from_utf8_lossy(&all).into_owned();
        }
        let tail: Vec<u8> = a.iter().chain(b).copied().collect();
        format!(
            "{}{}{}",
            String::from_utf8_lossy(&self.head),
            cut_note(self.dropped_chars),
            String::from_utf8_lossy(&tail)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_keeps_both_ends_and_counts_the_rest() {
        let mut c = Capture::new(10);
        c.push(b"abc");
        assert_eq!(c.text(), "abc");
        c.push(b"defgh");
        c.push(b"ijklmnopqrstuvwxyz");
        let text = c.text();
        assert!(text.starts_with("abcde"), "{text}");
        assert!(text.ends_with("vwxyz"), "{text}");
        assert!(text.contains("[... 16 characters cut ...]"), "{text}");
    }

    #[test]
    fn capture_counts_characters_not_bytes() {
        let mut c = Capture::new(2);
        c.push("a".as_bytes());
        c.push("éééz".as_bytes());
        assert!(
            c.text().contains("[... 3 characters cut ...]"),
            "{}",
            c.text()
        );
    }
}
