//! A project open in the browser: its in-memory repository, shared between the agent and the
//! page (so the editor can read files while a run is in progress), the virtual shell with
//! `git diff`/`git status` against the imported baseline, and FrogNano's tools over both.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use lilypad_agent::Change;
use lilypad_agent::archive::{self, ImportLimits};
use lilypad_agent::{
    AgentConfig, DirEntry, EntryKind, Observation, PythonRunner, RepoError, RepoPath, Repository,
    Snapshot, ToolCall, Toolbox, VersionControl, VirtualRepo, VirtualShell, diff_against,
    status_against,
};

/// Where the model sees the project, and where Pyodide mounts it.
pub const ROOT: &str = "/repo";

/// A [`VirtualRepo`] behind a shared handle: every call borrows it only for itself, so the agent
/// can hold this across a model call while the page reads and writes files in between.
#[derive(Clone)]
pub struct SharedRepo {
    root: String,
    inner: Rc<RefCell<VirtualRepo>>,
}

impl SharedRepo {
    pub fn new(repo: VirtualRepo) -> Self {
        Self {
            root: repo.root().to_string(),
            inner: Rc::new(RefCell::new(repo)),
        }
    }

    pub fn with<T>(&self, f: impl FnOnce(&VirtualRepo) -> T) -> T {
        f(&self.inner.borrow())
    }

    pub fn with_mut<T>(&self, f: impl FnOnce(&mut VirtualRepo) -> T) -> T {
        f(&mut self.inner.borrow_mut())
    }
}

impl Repository for SharedRepo {
    fn root(&self) -> &str {
        &self.root
    }
    fn kind(&self, path: &RepoPath) -> Option<EntryKind> {
        self.inner.borrow().kind(path)
    }
    fn read(&self, path: &RepoPath) -> Result<Vec<u8>, RepoError> {
        self.inner.borrow().read(path)
    }
    fn write(&mut self, path: &RepoPath, data: &[u8]) -> Result<(), RepoError> {
        self.inner.borrow_mut().write(path, data)
    }
    fn remove(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        self.inner.borrow_mut().remove(path)
    }
    fn create_dir_all(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        self.inner.borrow_mut().create_dir_all(path)
    }
    fn rename(&mut self, from: &RepoPath, to: &RepoPath) -> Result<(), RepoError> {
        self.inner.borrow_mut().rename(from, to)
    }
    fn list_dir(&self, path: &RepoPath) -> Result<Vec<DirEntry>, RepoError> {
        self.inner.borrow().list_dir(path)
    }
    fn walk_files(&self, path: &RepoPath) -> Result<Vec<RepoPath>, RepoError> {
        self.inner.borrow().walk_files(path)
    }
    fn snapshot(&self) -> Result<Snapshot, RepoError> {
        self.inner.borrow().snapshot()
    }
}

/// `git diff` and `git status` against the files as imported (the repository's own baseline,
/// which a new import replaces).
struct ImportedBaseline(SharedRepo);

impl VersionControl for ImportedBaseline {
    fn diff(&self, repo: &dyn Repository, paths: &[RepoPath]) -> Result<String, RepoError> {
        self.0.with(|r| diff_against(r.baseline(), repo, paths))
    }

    fn status(&self, repo: &dyn Repository) -> Result<Vec<(Change, RepoPath)>, RepoError> {
        self.0.with(|r| status_against(r.baseline(), repo))
    }
}

pub fn change_name(c: Change) -> &'static str {
    match c {
        Change::Added => "added",
        Change::Modified => "modified",
        Change::Deleted => "deleted",
    }
}

/// The project, its tools and shell.
pub struct Workspace {
    repo: SharedRepo,
    /// Taken out while the agent runs, so a second run or a tool call from the page is refused
    /// instead of interleaving with it.
    toolbox: Option<Toolbox>,
}

impl Workspace {
    pub fn new(repo: VirtualRepo) -> Self {
        let repo = SharedRepo::new(repo);
        let toolbox = Some(toolbox(&repo, None));
        Self { repo, toolbox }
    }

    /// A zip or .tar.gz (one wrapping folder is unwrapped).
    pub fn from_archive(data: &[u8]) -> Result<Self, RepoError> {
        Ok(Self::new(archive::import_archive(
            ROOT,
            data,
            ImportLimits::default(),
        )?))
    }

    /// Files from a folder picker: relative paths and contents.
    pub fn from_files(files: Vec<(String, Vec<u8>)>) -> Result<Self, RepoError> {
        Ok(Self::new(archive::import_files(
            ROOT,
            files,
            ImportLimits::default(),
        )?))
    }

    pub fn repo(&self) -> SharedRepo {
        self.repo.clone()
    }

    /// Runs `python`, `python3`, `pytest` and `pip` through `runner` from now on.
    pub fn set_python(
        &mut self,
        runner: Option<Box<dyn PythonRunner>>,
    ) -> Result<(), WorkspaceError> {
        if self.toolbox.is_none() {
            return Err(busy());
        }
        self.toolbox = Some(toolbox(&self.repo, runner));
        Ok(())
    }

    /// Every file, relative to the root, sorted.
    pub fn files(&self) -> Vec<String> {
        self.repo
            .walk_files(&RepoPath::root())
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.as_str().to_string())
            .collect()
    }

    /// A path as the page or the model writes it: relative to the root, or absolute under it.
    pub fn resolve(&self, path: &str) -> Result<RepoPath, RepoError> {
        RepoPath::resolve(ROOT, &RepoPath::root(), path)
    }

    pub fn read(&self, path: &str) -> Result<Vec<u8>, RepoError> {
        self.repo.read(&self.resolve(path)?)
    }

    pub fn write(&mut self, path: &str, data: &[u8]) -> Result<(), RepoError> {
        let path = self.resolve(path)?;
        self.repo.write(&path, data)
    }

    /// All changes since the import, as `git diff` prints them.
    pub fn diff(&self) -> String {
        self.repo.with(VirtualRepo::diff)
    }

    pub fn changes(&self) -> Vec<(String, &'static str)> {
        self.repo
            .with(VirtualRepo::changed_files)
            .into_iter()
            .map(|(p, c)| (p.as_str().to_string(), change_name(c)))
            .collect()
    }

    pub fn undo(&mut self) -> Result<(), RepoError> {
        self.repo.with_mut(VirtualRepo::undo)
    }

    pub fn export_zip(&self) -> Result<Vec<u8>, RepoError> {
        self.repo.with(archive::export_zip)
    }

    /// Runs one tool call exactly as the agent would (the page's "run the tests" is a `Bash`
    /// call, so it shows what the model would read).
    pub async fn tool(&mut self, call: &ToolCall) -> Result<Observation, WorkspaceError> {
        let toolbox = self.toolbox.as_mut().ok_or_else(busy)?;
        Ok(toolbox.execute_async(&mut self.repo, call).await)
    }

    /// Lends the toolbox to an agent run; give it back with [`Workspace::end_run`].
    pub fn begin_run(&mut self) -> Result<Toolbox, WorkspaceError> {
        self.toolbox.take().ok_or_else(busy)
    }

    pub fn end_run(&mut self, toolbox: Toolbox) {
        self.toolbox = Some(toolbox);
    }
}

fn toolbox(repo: &SharedRepo, python: Option<Box<dyn PythonRunner>>) -> Toolbox {
    let mut shell =
        VirtualShell::new().with_version_control(Box::new(ImportedBaseline(repo.clone())));
    shell.set_python(python);
    Toolbox::new(Box::new(shell))
}

/// What the page's calls can fail with.
#[derive(Debug)]
pub enum WorkspaceError {
    Repo(RepoError),
    /// The agent is running and holds the tools.
    Busy,
}

impl std::fmt::Display for WorkspaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Repo(e) => e.fmt(f),
            Self::Busy => f.write_str("the agent is running; wait for it to finish or stop it"),
        }
    }
}

impl From<RepoError> for WorkspaceError {
    fn from(e: RepoError) -> Self {
        Self::Repo(e)
    }
}

fn busy() -> WorkspaceError {
    WorkspaceError::Busy
}

/// The agent's settings from a partial JSON object: missing fields keep their defaults.
pub fn agent_config(overrides: &serde_json::Value) -> Result<AgentConfig, String> {
    let mut config = serde_json::to_value(AgentConfig::default()).map_err(|e| e.to_string())?;
    match (overrides, &mut config) {
        (serde_json::Value::Null, _) => {}
        (serde_json::Value::Object(o), serde_json::Value::Object(c)) => {
            for (k, v) in o {
                if !c.contains_key(k) {
                    return Err(format!("unknown agent setting `{k}`"));
                }
                if k == "sampling"
                    && let (Some(s), serde_json::Value::Object(v)) =
                        (c.get_mut(k).and_then(|s| s.as_object_mut()), v)
                {
                    s.extend(v.clone());
                    continue;
                }
                c.insert(k.clone(), v.clone());
            }
        }
        _ => return Err("agent settings must be an object".into()),
    }
    serde_json::from_value(config).map_err(|e| format!("agent settings: {e}"))
}

/// How long a tool's shell command may run when the caller gives no timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
