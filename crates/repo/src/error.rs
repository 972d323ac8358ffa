use std::io;

use thiserror::Error;

/// What can go wrong touching a repository. Messages are written for the model to read: a tool
/// that fails returns this text as its observation.
#[derive(Debug, Error)]
pub enum RepoError {
    #[error("path `{path}` is outside the repository root `{root}`")]
    OutsideRoot { path: String, root: String },
    #[error("invalid path `{path}`: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("`{0}` does not exist")]
    NotFound(String),
    #[error("`{0}` is a directory")]
    IsADirectory(String),
    #[error("`{0}` is not a directory")]
    NotADirectory(String),
    #[error("`{0}` already exists")]
    AlreadyExists(String),
    #[error("symbolic link `{path}` points outside the repository")]
    SymlinkEscape { path: String },
    /// Refused rather than followed: writing through a link to nothing would create its target,
    /// wherever that is.
    #[error("symbolic link `{path}` points to nothing")]
    BrokenSymlink { path: String },
    /// A FIFO, socket or device: opening one can block forever or read without end.
    #[error(
        "`{path}` is a {what}, not a regular file; the file tools read and write regular files only"
    )]
    NotARegularFile { path: String, what: &'static str },
    #[error(
        "cannot write `{path}`: the repository would hold more than its limit of {limit} bytes; \
         remove files you made or write less"
    )]
    RepositoryFull { path: String, limit: u64 },
    #[error("archive: {0}")]
    Archive(String),
    #[error("patch: {0}")]
    Patch(String),
    #[error("nothing to undo")]
    NothingToUndo,
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}
