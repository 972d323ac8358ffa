//! The sandbox a model-written command runs in natively: bubblewrap (`bwrap`, Debian's
//! `bubblewrap` package) with every namespace unshared. The command sees no network (a new
//! network namespace holds only a downed loopback), the whole file system read-only, an empty
//! home, /tmp and /run, and its repository folder as the one writable place; it runs with no
//! capabilities, in a new session (no terminal to inject into) and in a PID namespace, so
//! when the sandbox's first process dies every process it started dies with it, however it
//! detached. Resource limits (CPU time, address space, open files, file size) apply to every
//! process inside. The number of processes is capped by a pids cgroup made for each command
//! where the cgroup file system is writable (cgroup v1 or v2), because the kernel exempts root
//! from `RLIMIT_NPROC`; where it is not, the shell counts the sandbox's processes while a
//! command runs and kills the sandbox past the limit (a softer bound: a fork bomb gets one
//! polling interval).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Limits for one command and everything it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    /// CPU seconds per process (`RLIMIT_CPU`); the shell's timeout bounds wall time.
    pub cpu_seconds: u64,
    /// Address space per process (`RLIMIT_AS`).
    pub memory_bytes: u64,
    /// Processes in the sandbox at once.
    pub processes: usize,
    /// Open files per process (`RLIMIT_NOFILE`).
    pub open_files: u64,
    /// Largest file a process may write (`RLIMIT_FSIZE`).
    pub file_bytes: u64,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            cpu_seconds: 600,
            memory_bytes: 4 << 30,
            processes: 256,
            open_files: 1024,
            file_bytes: 1 << 30,
        }
    }
}

/// How a native shell confines its commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sandbox {
    /// bubblewrap at `bwrap`; `hidden` folders (the user's home) are replaced by empty ones,
    /// except the `visible` folders inside them, shown read-only.
    Bubblewrap {
        bwrap: PathBuf,
        hidden: Vec<PathBuf>,
        visible: Vec<PathBuf>,
        limits: SandboxLimits,
    },
    /// No confinement: the user opted out (`--no-sandbox`).
    Off,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "bubblewrap (bwrap) runs model-written commands in a sandbox and was not found on PATH: \
         install it (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap) or \
         opt out with --no-sandbox to run them unconfined"
    )]
    Missing,
    #[error(
        "bubblewrap ({bwrap}) cannot make a sandbox here ({detail}): user namespaces may be \
         disabled (sysctl kernel.unprivileged_userns_clone=1) or bwrap lacks its setuid bit; \
         fix that or opt out with --no-sandbox"
    )]
    Broken { bwrap: String, detail: String },
}

impl Sandbox {
    /// bubblewrap from PATH, checked by running `true` in a sandbox, hiding the home folder,
    /// with the default limits.
    pub fn detect() -> Result<Self, SandboxError> {
        Self::detect_on(std::env::var_os("PATH").as_deref())
    }

    /// [`Sandbox::detect`] looking for bwrap in `path` (a PATH-style list).
    pub fn detect_on(path: Option<&std::ffi::OsStr>) -> Result<Self, SandboxError> {
        let bwrap = path
            .and_then(|path| find_on_path(path, "bwrap"))
            .ok_or(SandboxError::Missing)?;
        let hidden: Vec<PathBuf> = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_dir() && h != Path::new("/"))
            .into_iter()
            .collect();
        let visible = path.map(|p| tools_in(&hidden, p)).unwrap_or_default();
        let sandbox = Self::Bubblewrap {
            bwrap: bwrap.clone(),
            hidden,
            visible,
            limits: SandboxLimits::default(),
        };
        let broken = |detail: String| SandboxError::Broken {
            bwrap: bwrap.display().to_string(),
            detail,
        };
        let (mut probe, _cgroup) = sandbox.command(&std::env::temp_dir(), "true");
        let probe = probe
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| broken(e.to_string()))?;
        if !probe.status.success() {
            return Err(broken(
                String::from_utf8_lossy(&probe.stderr).trim().to_string(),
            ));
        }
        Ok(sandbox)
    }

    /// The same sandbox with other limits (no change when off).
    pub fn with_limits(self, new: SandboxLimits) -> Self {
        match self {
            Self::Bubblewrap {
                bwrap,
                hidden,
                visible,
                ..
            } => Self::Bubblewrap {
                bwrap,
                hidden,
                visible,
                limits: new,
            },
            Self::Off => Self::Off,
        }
    }

    /// The same sandbox hiding `dir` too (the tools on PATH inside it stay visible).
    pub fn hiding(mut self, dir: PathBuf) -> Self {
        if let Self::Bubblewrap {
            hidden, visible, ..
        } = &mut self
        {
            hidden.push(dir);
            if let Some(path) = std::env::var_os("PATH") {
                *visible = tools_in(hidden, &path);
            }
        }
        self
    }

    /// The same sandbox showing `dir` read-only even where it lies in a hidden or emptied
    /// folder (/tmp, the home folder): a tool installation its commands need. A venv's base
    /// Python installation is shown with it (its interpreter may live in a hidden ~/.pyenv).
    pub fn showing(mut self, dir: PathBuf) -> Self {
        if let Self::Bubblewrap { visible, .. } = &mut self {
            let base = venv_base(&dir);
            for d in std::iter::once(dir).chain(base) {
                if !visible.contains(&d) {
                    visible.push(d);
                }
            }
        }
        self
    }

    pub fn limits(&self) -> Option<&SandboxLimits> {
        match self {
            Self::Bubblewrap { limits, .. } => Some(limits),
            Self::Off => None,
        }
    }

    /// `bash -c script` (in `dir`, confined per this sandbox), not yet spawned, and the pids
    /// cgroup that will hold its processes: keep it until the command has ended.
    pub fn command(&self, dir: &Path, script: &str) -> (Command, Option<PidsCgroup>) {
        self.command_with(dir, "bash", script)
    }

    pub(crate) fn command_with(
        &self,
        dir: &Path,
        shell: &str,
        script: &str,
    ) -> (Command, Option<PidsCgroup>) {
        let Self::Bubblewrap {
            bwrap,
            hidden,
            visible,
            limits,
        } = self
        else {
            let mut cmd = Command::new(shell);
            cmd.arg("-c").arg(script).current_dir(dir);
            return (cmd, None);
        };
        let mut cmd = Command::new(bwrap);
        cmd.args([
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
        ]);
        cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
        for empty in ["/tmp", "/var/tmp", "/run"] {
            if Path::new(empty).is_dir() {
                cmd.args(["--tmpfs", empty]);
            }
        }
        // Hidden folders first: the repository may lie inside one and is bound over it.
        for h in hidden {
            cmd.arg("--tmpfs").arg(h);
        }
        for v in visible {
            cmd.arg("--ro-bind-try").arg(v).arg(v);
        }
        cmd.arg("--bind").arg(dir).arg(dir);
        cmd.arg("--chdir").arg(dir);
        cmd.args(["--setenv", "TMPDIR", "/tmp"]);
        cmd.arg("--").arg(shell).arg("-c").arg(script);
        let cgroup = PidsCgroup::create(limits.processes);
        let join = cgroup.as_ref().map(|c| c.procs.clone());
        let limits = limits.clone();
        // SAFETY: setrlimit, open, write and close are async-signal-safe; nothing else runs
        // between fork and exec, and the path was made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(procs) = &join {
                    join_cgroup(procs)?;
                }
                set_limits(&limits)
            });
        }
        (cmd, cgroup)
    }
}

/// A pids cgroup for one command: every process it starts is counted in it and a fork past
/// `pids.max` fails. Removed when dropped (once its processes are gone).
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
    procs: CString,
}

impl PidsCgroup {
    /// A new cgroup under this process's own, in the pids hierarchy (cgroup v1) or the
    /// unified one (v2); `None` where the cgroup file system is missing or read-only.
    fn create(max: usize) -> Option<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mut bases = Vec::new();
        for line in own.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let path = path.trim_start_matches('/');
            if controllers.split(',').any(|c| c == "pids") {
                bases.push(Path::new("/sys/fs/cgroup/pids").join(path));
            } else if controllers.is_empty() {
                bases.push(Path::new("/sys/fs/cgroup").join(path));
                bases.push(Path::new("/sys/fs/cgroup/unified").join(path));
            }
        }
        let name = format!(
            "lilypad-sandbox-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        bases.into_iter().find_map(|base| {
            let dir = base.join(&name);
            std::fs::create_dir(&dir).ok()?;
            let made = Self {
                procs: CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).ok()?,
                dir,
            };
            // Without the pids controller here the file is missing: not a bound, try the next.
            std::fs::write(made.dir.join("pids.max"), max.to_string()).ok()?;
            Some(made)
        })
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // A cgroup is removable once empty; the kernel may still be reaping the last ones.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs` ("0" = self).
fn join_cgroup(procs: &CString) -> io::Result<()> {
    // SAFETY: raw system calls on a valid NUL-terminated path and a static buffer.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, b"0".as_ptr().cast(), 1);
        libc::close(fd);
        if written != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn set_limits(l: &SandboxLimits) -> io::Result<()> {
    let set = |resource, value: u64| {
        let lim = libc::rlimit {
            rlim_cur: value as libc::rlim_t,
            rlim_max: value as libc::rlim_t,
        };
        // SAFETY: plain system call on a valid struct.
        match unsafe { libc::setrlimit(resource, &lim) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    };
    set(libc::RLIMIT_CPU, l.cpu_seconds)?;
    set(libc::RLIMIT_AS, l.memory_bytes)?;
    set(libc::RLIMIT_NOFILE, l.open_files)?;
    set(libc::RLIMIT_FSIZE, l.file_bytes)?;
    // Counted per user, and not at all for root: the shell's process count is the real bound.
    set(libc::RLIMIT_NPROC, l.processes as u64)
}

/// The folders of `path` (a PATH-style list) inside a hidden folder, so the tools the user
/// installed there (~/.local/bin, ~/.cargo/bin, a Python venv) still run: each PATH folder, and
/// a venv's whole folder (its bin/ needs its lib/). The rest of a hidden folder stays hidden.
fn tools_in(hidden: &[PathBuf], path: &std::ffi::OsStr) -> Vec<PathBuf> {
    let mut visible = Vec::new();
    for dir in std::env::split_paths(path) {
        if !dir.is_absolute() || !hidden.iter().any(|h| dir.starts_with(h)) {
            continue;
        }
        let venv = dir
            .parent()
            .filter(|p| p.join("pyvenv.cfg").is_file() && !hidden.iter().any(|h| h == *p));
        let mut show = vec![venv.map_or(dir.clone(), Path::to_path_buf)];
        // A venv runs its base interpreter (`home = …/bin` in pyvenv.cfg), whose installation
        // (its lib/ too) may itself be in a hidden folder, e.g. ~/.pyenv.
        if let Some(base) = venv.and_then(venv_base)
            && hidden.iter().any(|h| base.starts_with(h))
        {
            show.push(base);
        }
        for s in show {
            if !visible.contains(&s) {
                visible.push(s);
            }
        }
    }
    visible
}

/// The installation a venv's interpreter comes from: the folder above pyvenv.cfg's `home`.
fn venv_base(venv: &Path) -> Option<PathBuf> {
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).ok()?;
    let home = cfg.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "home").then(|| PathBuf::from(v.trim()))
    })?;
    home.parent().map(Path::to_path_buf)
}

fn find_on_path(path: &std::ffi::OsStr, name: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Processes descending from `root` (itself included), from /proc: in a PID namespace every
/// process of the sandbox is one, because orphans are adopted by the namespace's first process.
pub(crate) fn count_descendants(root: u32) -> usize {
    let mut parent = std::collections::HashMap::new();
    for pid in proc_pids() {
        // "pid (comm) state ppid …": comm may hold spaces and parentheses, so read after the last ')'.
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            && let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..])
            && let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok())
        {
            parent.insert(pid, ppid);
        }
    }
    parent
        .keys()
        .filter(|&&p| {
            let mut p = p;
            for _ in 0..4096 {
                if p == root {
                    return true;
                }
                match parent.get(&p) {
                    Some(&q) if q != p && q != 0 => p = q,
                    _ => return false,
                }
            }
            false
        })
        .count()
}

/// Every process the machine's `/proc` lists (none where there is no `/proc`).
pub(crate) fn proc_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_on_path_inside_hidden_folders_stay_visible() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        let venv = h.join(".cache/venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        let python = h.join(".pyenv/versions/3.11.7");
        std::fs::write(
            venv.join("pyvenv.cfg"),
            format!("home = {}/bin\nversion = 3.11.7\n", python.display()),
        )
        .unwrap();
        std::fs::create_dir_all(h.join(".cargo/bin")).unwrap();
        let path = std::env::join_paths([
            venv.join("bin"),
            h.join(".cargo/bin"),
            PathBuf::from("/usr/bin"),
            PathBuf::from("relative/bin"),
        ])
        .unwrap();
        let shown = tools_in(&[h.to_path_buf()], &path);
        // The venv whole (its lib/ too) and the Python it was made from, only the bin folder
        // of ~/.cargo, nothing outside home.
        assert_eq!(shown, vec![venv, python, h.join(".cargo/bin")]);
    }

    #[test]
    fn shown_folders_are_bound_over_the_emptied_tmp() {
        let root = tempfile::tempdir().unwrap();
        let venv = root.path().join("venv");
        std::fs::create_dir_all(&venv).unwrap();
        std::fs::write(venv.join("pyvenv.cfg"), "home = /opt/py/3.11/bin\n").unwrap();
        let sandbox = Sandbox::Bubblewrap {
            bwrap: PathBuf::from("/usr/bin/bwrap"),
            hidden: vec![],
            visible: vec![],
            limits: SandboxLimits::default(),
        }
        .showing(venv.clone())
        .showing(venv.clone());
        let venv = venv.to_string_lossy().into_owned();
        let (cmd, _cgroup) = sandbox.command(root.path(), "true");
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let at = |pair: [&str; 2]| {
            args.windows(2)
                .position(|w| w[0] == pair[0] && w[1] == pair[1])
        };
        let tmp = at(["--tmpfs", "/tmp"]).expect("/tmp emptied");
        let shown = at(["--ro-bind-try", &venv]).expect("venv shown");
        assert!(tmp < shown, "{args:?}");
        assert_eq!(args.iter().filter(|a| **a == venv).count(), 2, "bound once");
        assert!(
            at(["--ro-bind-try", "/opt/py/3.11"]).is_some(),
            "base shown: {args:?}"
        );
    }
}
