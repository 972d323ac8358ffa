//! lilypad's coding agent: FrogNano's tools, the parsing of its replies and the loop that runs
//! them. It talks to a language model ([`lilypad_lm`]), a repository ([`lilypad_repo`]) and a
//! shell ([`lilypad_shell`]) through traits and knows nothing about GPUs or browsers, so the
//! same loop runs natively, in wasm and in tests. Those crates' types are re-exported here, so
//! a user of the agent needs only this one.

mod agent;
mod reply;
mod scripted;
pub mod tools;
mod trajectory;

pub use agent::{AgentConfig, AgentEvent, run_agent};
pub use reply::{Reply, parse_reply};
pub use scripted::ScriptedModel;
pub use tools::{Observation, Toolbox, tool_names, tool_schemas};
pub use trajectory::{CallRecord, Exit, StepRecord, Trajectory};

pub use lilypad_lm::{
    Completion, FinishReason, LanguageModel, Message, ModelError, Request, Role, Sampling,
    TokenSink, ToolCall,
};
#[cfg(not(target_arch = "wasm32"))]
pub use lilypad_repo::DiskRepo;
pub use lilypad_repo::{
    Change, ChangeTracker, DEFAULT_MAX_REPO_BYTES, DirEntry, EntryKind, ImportLimits, RepoError,
    RepoPath, Repository, SKIPPED_DIRS, Snapshot, Stamp, TrackLimits, VirtualRepo, archive,
    changes, patch,
};
pub use lilypad_shell as shell;
pub use lilypad_shell::{
    Baseline, ExternalShell, ProgramIo, PythonRunner, Shell, ShellOutput, Stream, VersionControl,
    VirtualShell, diff_against, status_against,
};
#[cfg(unix)]
pub use lilypad_shell::{CommandTag, NativeShell, Sandbox, SandboxError, SandboxLimits};
