//! lilypad's coding agent. It talks to two traits — a language model and a repository — and
//! knows nothing about GPUs or browsers, so the same loop runs natively, in wasm and in tests.

mod error;
mod path;
mod repo;
pub mod shell;
mod virtual_repo;

pub use error::RepoError;
pub use path::RepoPath;
pub use shell::{Shell, ShellOutput};
pub use repo::{DirEntry, EntryKind, Repository, SKIPPED_DIRS, Snapshot};
pub use virtual_repo::VirtualRepo;
