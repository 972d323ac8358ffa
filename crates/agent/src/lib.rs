//! lilypad's coding agent. It talks to two traits — a language model and a repository — and
//! knows nothing about GPUs or browsers, so the same loop runs natively, in wasm and in tests.

mod agent;
pub mod archive;
pub mod changes;
#[cfg(not(target_arch = "wasm32"))]
mod disk_repo;
mod error;
mod message;
mod model;
pub mod patch;
mod path;
mod reply;
mod repo;
mod scripted;
pub mod shell;
pub mod tools;
mod trajectory;
mod virtual_repo;

pub use agent::{AgentConfig, AgentEvent, run_agent};
pub use archive::ImportLimits;
pub use changes::{ChangeTracker, TrackLimits};
#[cfg(not(target_arch = "wasm32"))]
pub use disk_repo::DiskRepo;
pub use error::RepoError;
pub use message::{Message, Role, ToolCall};
pub use model::{
    Completion, FinishReason, LanguageModel, ModelError, Request, Sampling, TokenSink,
};
pub use patch::Change;
pub use path::RepoPath;
pub use reply::{Reply, parse_reply};
pub use repo::{DirEntry, EntryKind, Repository, SKIPPED_DIRS, Snapshot, Stamp};
pub use scripted::ScriptedModel;
#[cfg(unix)]
pub use shell::{CommandTag, NativeShell, Sandbox, SandboxError, SandboxLimits};
pub use shell::{ExternalShell, Shell, ShellOutput};
pub use shell::{FileChange, ProgramIo, PythonRunner, Stream, VersionControl, VirtualShell};
pub use tools::{Observation, Toolbox, tool_names, tool_schemas};
pub use trajectory::{CallRecord, Exit, StepRecord, Trajectory};
pub use virtual_repo::{DEFAULT_MAX_REPO_BYTES, VirtualRepo};
