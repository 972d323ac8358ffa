//! The repository an agent works on, behind one trait ([`Repository`]): the same tools and
//! shell edit an in-memory copy in the browser ([`VirtualRepo`]) and real files natively
//! ([`DiskRepo`]). Every path from a model or a command becomes a [`RepoPath`], confined to the
//! root, before anything is touched. Also here: archives in and out, `git diff`-style patches
//! both ways, and tracking what a run changed at the cost of the change.

pub mod archive;
pub mod changes;
#[cfg(not(target_arch = "wasm32"))]
mod disk_repo;
mod error;
pub mod patch;
mod path;
mod repo;
mod virtual_repo;

pub use archive::ImportLimits;
pub use changes::{ChangeTracker, TrackLimits};
#[cfg(not(target_arch = "wasm32"))]
pub use disk_repo::DiskRepo;
pub use error::RepoError;
pub use patch::Change;
pub use path::RepoPath;
pub use repo::{DirEntry, EntryKind, Repository, SKIPPED_DIRS, Snapshot, Stamp};
pub use virtual_repo::{DEFAULT_MAX_REPO_BYTES, VirtualRepo};
