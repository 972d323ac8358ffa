//! The repository an agent works on. The agent and its tools see only this trait, so the same
//! code edits an in-memory repository in the browser and real files natively.

use std::collections::BTreeMap;

use crate::{RepoError, RepoPath};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub kind: EntryKind,
    /// Size in bytes for files, 0 for folders.
    pub len: u64,
}

/// Every file's bytes, keyed by path: what a patch is computed between.
pub type Snapshot = BTreeMap<RepoPath, Vec<u8>>;

/// A file's fingerprint that changes whenever its contents may have (natively: size,
/// modification and status-change times, inode), so a change tracker re-reads only files whose
/// stamp moved. Opaque: only compared for equality.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stamp(pub [u64; 5]);

pub trait Repository {
    /// The absolute path the model sees as the repository's root (`/repo`, or the real folder
    /// natively). Tool paths are resolved against it with [`RepoPath::resolve`].
    fn root(&self) -> &str;

    fn kind(&self, path: &RepoPath) -> Option<EntryKind>;

    fn read(&self, path: &RepoPath) -> Result<Vec<u8>, RepoError>;

    /// Size in bytes of the file at `path`, without reading it.
    fn file_len(&self, path: &RepoPath) -> Result<u64, RepoError> {
        self.read(path).map(|data| data.len() as u64)
    }

    /// At most `max` bytes from the start of the file at `path`, without reading the rest.
    fn read_head(&self, path: &RepoPath, max: usize) -> Result<Vec<u8>, RepoError> {
        let mut data = self.read(path)?;
        data.truncate(max);
        Ok(data)
    }

    /// Whether `path` is a symbolic link. Walks do not enter linked folders (a link to a
    /// parent would make them endless).
    fn is_link(&self, _path: &RepoPath) -> bool {
        false
    }

    /// The file's [`Stamp`], or `None` where the repository keeps none (a change tracker then
    /// compares contents).
    fn stamp(&self, _path: &RepoPath) -> Option<Stamp> {
        None
    }

    /// Creates or replaces a file, creating missing parent folders.
    fn write(&mut self, path: &RepoPath, data: &[u8]) -> Result<(), RepoError>;

    /// Removes a file, or a folder with everything below it.
    fn remove(&mut self, path: &RepoPath) -> Result<(), RepoError>;

    fn create_dir_all(&mut self, path: &RepoPath) -> Result<(), RepoError>;

    /// Moves a file or folder; the destination's parent folders are created.
    fn rename(&mut self, from: &RepoPath, to: &RepoPath) -> Result<(), RepoError>;

    /// The entries of one folder, sorted by name.
    fn list_dir(&self, path: &RepoPath) -> Result<Vec<DirEntry>, RepoError>;

    /// Every file below `path` (recursively), sorted. Version-control folders (`.git`) are skipped.
    fn walk_files(&self, path: &RepoPath) -> Result<Vec<RepoPath>, RepoError>;

    /// All files and their contents, for diffs against a baseline.
    fn snapshot(&self) -> Result<Snapshot, RepoError> {
        let mut out = Snapshot::new();
        for p in self.walk_files(&RepoPath::root())? {
            let data = self.read(&p)?;
            out.insert(p, data);
        }
        Ok(out)
    }
}

/// Folder names a walk never enters: version-control internals are not the agent's to edit,
/// and the caches test runs leave behind are not part of a patch.
pub const SKIPPED_DIRS: &[&str] = &[".git", ".hg", ".svn", "__pycache__", ".pytest_cache"];
