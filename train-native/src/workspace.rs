//! Where train-native keeps its files: sdists, unpacked projects, venvs, baselines, scratch
//! copies for test runs, tasks and runs, all under one folder (default
//! `~/.cache/lilypad/train`, or `$LILYPAD_CACHE/train`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result};
use lilypad_agent::Sandbox;

use crate::envs::Environment;
use crate::manifest::Project;

#[derive(Clone)]
pub struct Workspace {
    pub root: PathBuf,
}

static SCRATCH: AtomicU64 = AtomicU64::new(0);

impl Workspace {
    pub fn new(root: Option<PathBuf>) -> Result<Self> {
        let root = match root {
            Some(r) => r,
            None => default_root(),
        };
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        Ok(Self {
            root: root.canonicalize()?,
        })
    }

    pub fn env_dir(&self, p: &Project) -> PathBuf {
        self.root.join("envs").join(p.key())
    }

    /// The unpacked sdist, never modified after unpacking.
    pub fn project_src(&self, p: &Project) -> PathBuf {
        self.env_dir(p).join("src")
    }

    pub fn venv(&self, p: &Project) -> PathBuf {
        self.env_dir(p).join("venv")
    }

    fn env_file(&self, p: &Project) -> PathBuf {
        self.env_dir(p).join("env.json")
    }

    pub fn load_env(&self, p: &Project) -> Result<Environment> {
        let path = self.env_file(p);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{} is not built (train-native envs build)", p.name))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    pub fn save_env(&self, env: &Environment) -> Result<()> {
        let path = self.env_file(&env.project);
        std::fs::create_dir_all(path.parent().unwrap_or(&self.root))?;
        write_atomic(&path, serde_json::to_string_pretty(env)?.as_bytes())
    }

    /// A fresh copy of the project's source to run tests on or to plant a bug in.
    pub fn scratch_copy(&self, p: &Project, tag: &str) -> Result<PathBuf> {
        let n = SCRATCH.fetch_add(1, Ordering::Relaxed);
        let dir =
            self.root
                .join("scratch")
                .join(format!("{}-{tag}-{}-{n}", p.key(), std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy_tree(&self.project_src(p), &dir)?;
        Ok(dir)
    }

    /// A fresh copy of the project's source at a path that is the same for every call from
    /// this thread with this `tag` (the previous copy is replaced; other threads, rolling
    /// out at the same time, get their own). Rollouts use it: the agent's system prompt
    /// names the repository's root, so a stable root lets every rollout reuse the model
    /// state computed for the prompt's shared beginning.
    pub fn fixed_scratch_copy(&self, p: &Project, tag: &str) -> Result<PathBuf> {
        let thread: String = format!("{:?}", std::thread::current().id())
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        let dir = self
            .root
            .join("scratch")
            .join(format!("{tag}-{}-{thread}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        copy_tree(&self.project_src(p), &dir)?;
        Ok(dir)
    }

    /// The sandbox for the project's commands: its venv on PATH (so the venv and the Python
    /// it comes from stay visible, read-only, in the hidden home folder).
    pub fn sandbox(&self, p: &Project) -> Result<Sandbox> {
        // Shown explicitly: the venv may lie where the sandbox empties (/tmp) or hides.
        Ok(Sandbox::detect_on(Some(&self.command_path(p)?))?.showing(self.venv(p)))
    }

    /// PATH for the project's commands: its venv's bin folder first, so `python` and
    /// `pytest` are the venv's.
    pub fn command_path(&self, p: &Project) -> Result<std::ffi::OsString> {
        let mut paths = vec![self.venv(p).join("bin")];
        if let Some(path) = std::env::var_os("PATH") {
            paths.extend(std::env::split_paths(&path));
        }
        Ok(std::env::join_paths(paths)?)
    }
}

pub fn default_root() -> PathBuf {
    let cache = std::env::var_os("LILYPAD_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/lilypad")))
        .unwrap_or_else(|| PathBuf::from(".lilypad-cache"));
    cache.join("train")
}

pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// Writes through a temporary file, so a killed run never leaves half a file.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}
