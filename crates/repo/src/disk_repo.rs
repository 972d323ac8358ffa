//! A repository over a real folder (native only). Paths arrive as [`RepoPath`]s, already
//! confined lexically; what is left to check here is symbolic links: every existing component
//! of a path is resolved, and a link leading outside the root (or to nothing) is refused, so no
//! operation reads or writes outside the folder. (A link swapped in between the check and the
//! operation is not guarded against; the agent is not racing itself.)
//!
//! Only regular files are opened, and never in a way that can block: a FIFO, socket or device
//! in the folder is refused (checked on the open file, so a swap cannot slip one in). A file
//! with more than one hard link is replaced by a new file rather than written in place, since
//! its other name may be outside the folder. One unreadable entry (a link loop, a file that
//! vanished mid-walk) is left out of listings and walks rather than failing them.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::repo::{DirEntry, EntryKind, Repository, SKIPPED_DIRS, Stamp};
use crate::virtual_repo::check_rename;
use crate::{RepoError, RepoPath};

#[derive(Clone, Debug)]
pub struct DiskRepo {
    /// Canonical: absolute, without links, so a resolved path lies inside exactly when it
    /// starts with this.
    root: PathBuf,
    root_str: String,
}

/// What a walk does on meeting a link that leads outside the root.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnEscape {
    /// Leave it out, as if it were not there (listing and walking for the agent).
    Skip,
    /// Fail with [`RepoError::SymlinkEscape`] (importing, where dropping a file silently would
    /// lose part of the project).
    Fail,
}

impl DiskRepo {
    /// Opens `folder` as a repository; its canonical path becomes [`Repository::root`].
    pub fn open(folder: impl AsRef<Path>) -> Result<Self, RepoError> {
        let folder = folder.as_ref();
        let shown = folder.display().to_string();
        let root = fs::canonicalize(folder).map_err(|e| map_io(shown.clone(), e))?;
        let meta = fs::metadata(&root).map_err(|e| map_io(shown.clone(), e))?;
        if !meta.is_dir() {
            return Err(RepoError::NotADirectory(shown));
        }
        let root_str = root
            .to_str()
            .ok_or(RepoError::InvalidPath {
                path: shown,
                reason: "the folder's path is not UTF-8",
            })?
            .to_string();
        Ok(Self { root, root_str })
    }

    /// The canonical folder.
    pub fn path(&self) -> &Path {
        &self.root
    }

    fn shown(&self, path: &RepoPath) -> String {
        path.display_under(&self.root_str)
    }

    fn io_error(&self, path: &RepoPath, e: io::Error) -> RepoError {
        map_io(self.shown(path), e)
    }

    /// The real path of `path`, once no existing component is a link leading outside the root
    /// or to nothing. Components past the first missing one are not checked: they do not exist,
    /// so nothing can be a link there.
    fn real(&self, path: &RepoPath) -> Result<PathBuf, RepoError> {
        let mut prefix = self.root.clone();
        let mut seen = RepoPath::root();
        for component in path.components() {
            prefix.push(component);
            seen = seen.join(component)?;
            match fs::symlink_metadata(&prefix) {
                Ok(meta) if meta.file_type().is_symlink() => self.check_link(&prefix, &seen)?,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                // A file where a folder is expected: the path does not exist.
                Err(e) if e.kind() == io::ErrorKind::NotADirectory => break,
                Err(e) => return Err(self.io_error(&seen, e)),
            }
        }
        Ok(path
            .components()
            .fold(self.root.clone(), |full, c| full.join(c)))
    }

    /// Resolves the link at `full` (shown as `seen`); refuses it unless it lands inside the root.
    fn check_link(&self, full: &Path, seen: &RepoPath) -> Result<(), RepoError> {
        match fs::canonicalize(full) {
            Ok(target) if target.starts_with(&self.root) => Ok(()),
            Ok(_) => Err(RepoError::SymlinkEscape {
                path: self.shown(seen),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(RepoError::BrokenSymlink {
                path: self.shown(seen),
            }),
            Err(e) => Err(self.io_error(seen, e)),
        }
    }

    /// Metadata of what `path` names (following an inside link), or `None` when nothing is there.
    fn meta(&self, path: &RepoPath) -> Result<Option<fs::Metadata>, RepoError> {
        let full = self.real(path)?;
        match fs::metadata(&full) {
            Ok(meta) => Ok(Some(meta)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(self.io_error(path, e)),
        }
    }

    /// Opens the regular file at `path` for reading. `O_NONBLOCK` keeps a FIFO from blocking
    /// the open; the type (a folder included) is then checked on the open file itself.
    fn open_file(&self, path: &RepoPath) -> Result<(File, fs::Metadata), RepoError> {
        let full = self.real(path)?;
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&full)
            .map_err(|e| self.io_error(path, e))?;
        let meta = file.metadata().map_err(|e| self.io_error(path, e))?;
        self.check_regular(path, &meta)?;
        Ok((file, meta))
    }

    fn check_regular(&self, path: &RepoPath, meta: &fs::Metadata) -> Result<(), RepoError> {
        let kind = meta.file_type();
        let what = if kind.is_file() {
            return Ok(());
        } else if kind.is_dir() {
            return Err(RepoError::IsADirectory(self.shown(path)));
        } else if kind.is_fifo() {
            "FIFO (named pipe)"
        } else if kind.is_socket() {
            "socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "device"
        } else {
            "special file"
        };
        Err(RepoError::NotARegularFile {
            path: self.shown(path),
            what,
        })
    }

    /// Writes `data` as the whole file at `full`. A file with other hard links gets a new
    /// inode (written beside it, then renamed over it) so the other names keep their contents.
    fn write_file(&self, path: &RepoPath, full: &Path, data: &[u8]) -> Result<(), RepoError> {
        let io_error = |e| self.io_error(path, e);
        match fs::metadata(full) {
            Ok(meta) if meta.is_file() && meta.nlink() > 1 => {
                // Rename onto the real file, not onto an inside link to it.
                let target = fs::canonicalize(full).map_err(io_error)?;
                return replace_file(&target, data, meta.permissions()).map_err(io_error);
            }
            Ok(meta) => self.check_regular(path, &meta)?,
            Err(_) => {}
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(full)
            .map_err(|e| match e.raw_os_error() {
                // A FIFO nobody reads: opening it for writing without blocking fails so.
                Some(libc::ENXIO) => RepoError::NotARegularFile {
                    path: self.shown(path),
                    what: "FIFO (named pipe)",
                },
                _ => io_error(e),
            })?;
        let meta = file.metadata().map_err(io_error)?;
        self.check_regular(path, &meta)?;
        file.write_all(data).map_err(io_error)
    }

    /// Creates the missing parent folders of `path`, refusing when one of them is a file.
    fn make_parents(&self, path: &RepoPath) -> Result<(), RepoError> {
        let Some(parent) = path.parent() else {
            return Ok(());
        };
        let mut seen = RepoPath::root();
        for component in parent.components() {
            seen = seen.join(component)?;
            if self.meta(&seen)?.is_some_and(|meta| !meta.is_dir()) {
                return Err(RepoError::NotADirectory(self.shown(&seen)));
            }
        }
        fs::create_dir_all(self.real(&parent)?).map_err(|e| self.io_error(&parent, e))
    }

    /// The entries of the folder `dir` (real path `full`) that the agent may see: UTF-8 names
    /// that are single path components, and links only when they stay inside the root.
    fn entries(
        &self,
        dir: &RepoPath,
        full: &Path,
        on_escape: OnEscape,
    ) -> Result<Vec<(RepoPath, fs::Metadata, bool)>, RepoError> {
        let mut out = Vec::new();
        for entry in fs::read_dir(full).map_err(|e| self.io_error(dir, e))? {
            let entry = entry.map_err(|e| self.io_error(dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            // A name with `\` would be read back as two components: it cannot be addressed.
            let Ok(path) = dir.join(name) else { continue };
            if path.file_name() != name {
                continue;
            }
            // Past this point an entry that cannot be examined (a link loop, a file removed
            // mid-walk) is left out when listing, and fails an import.
            let examined = entry
                .file_type()
                .map_err(|e| self.io_error(&path, e))
                .and_then(|file_type| {
                    let is_link = file_type.is_symlink();
                    if is_link {
                        self.check_link(&entry.path(), &path)?;
                    }
                    let meta = fs::metadata(entry.path()).map_err(|e| self.io_error(&path, e))?;
                    Ok((meta, is_link))
                });
            match examined {
                Ok((meta, is_link)) => out.push((path, meta, is_link)),
                Err(RepoError::BrokenSymlink { .. }) => {}
                Err(e) if on_escape == OnEscape::Fail => return Err(e),
                Err(_) => {}
            }
        }
        Ok(out)
    }

    /// [`Repository::walk_files`], choosing what a link out of the root does.
    pub(crate) fn walk(
        &self,
        path: &RepoPath,
        on_escape: OnEscape,
    ) -> Result<Vec<RepoPath>, RepoError> {
        match self.meta(path)? {
            // A root deleted by the model holds no files: every file was removed.
            None if path.is_root() => return Ok(Vec::new()),
            None => return Err(RepoError::NotFound(self.shown(path))),
            Some(meta) if !meta.is_dir() => return Ok(vec![path.clone()]),
            Some(_) => {}
        }
        let mut out = Vec::new();
        let mut pending = vec![path.clone()];
        while let Some(dir) = pending.pop() {
            let full = self.real(&dir)?;
            let entries = match self.entries(&dir, &full, on_escape) {
                Ok(entries) => entries,
                // A folder that cannot be listed (no permission, removed mid-walk) holds
                // nothing the agent can see.
                Err(_) if on_escape == OnEscape::Skip && dir != *path => continue,
                Err(e) => return Err(e),
            };
            for (child, meta, is_link) in entries {
                // A `.git` file (worktrees, submodules) is as off-limits as the folder.
                if SKIPPED_DIRS.contains(&child.file_name()) {
                    continue;
                }
                if meta.is_file() {
                    out.push(child);
                } else if meta.is_dir() && !is_link {
                    pending.push(child);
                }
            }
        }
        out.sort();
        Ok(out)
    }
}

/// Writes `data` to a new file beside `target` and renames it over `target`.
fn replace_file(target: &Path, data: &[u8], permissions: fs::Permissions) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let temp = target.with_file_name(format!(
        ".{name}.lilypad-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(data)?;
        file.set_permissions(permissions)?;
        fs::rename(&temp, target)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written
}

fn map_io(shown: String, e: io::Error) -> RepoError {
    match e.kind() {
        io::ErrorKind::NotFound => RepoError::NotFound(shown),
        io::ErrorKind::AlreadyExists => RepoError::AlreadyExists(shown),
        io::ErrorKind::IsADirectory => RepoError::IsADirectory(shown),
        io::ErrorKind::NotADirectory => RepoError::NotADirectory(shown),
        _ => RepoError::Io {
            path: shown,
            source: e,
        },
    }
}

impl Repository for DiskRepo {
    fn root(&self) -> &str {
        &self.root_str
    }

    fn kind(&self, path: &RepoPath) -> Option<EntryKind> {
        match self.meta(path) {
            Ok(Some(meta)) if meta.is_dir() => Some(EntryKind::Dir),
            Ok(Some(meta)) if meta.is_file() => Some(EntryKind::File),
            _ => None,
        }
    }

    fn read(&self, path: &RepoPath) -> Result<Vec<u8>, RepoError> {
        let (mut file, meta) = self.open_file(path)?;
        let mut data = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut data)
            .map_err(|e| self.io_error(path, e))?;
        Ok(data)
    }

    fn file_len(&self, path: &RepoPath) -> Result<u64, RepoError> {
        match self.meta(path)? {
            Some(meta) if meta.is_dir() => Err(RepoError::IsADirectory(self.shown(path))),
            Some(meta) => {
                self.check_regular(path, &meta)?;
                Ok(meta.len())
            }
            None => Err(RepoError::NotFound(self.shown(path))),
        }
    }

    fn read_head(&self, path: &RepoPath, max: usize) -> Result<Vec<u8>, RepoError> {
        let (file, meta) = self.open_file(path)?;
        let mut data = Vec::with_capacity(meta.len().min(max as u64) as usize);
        file.take(max as u64)
            .read_to_end(&mut data)
            .map_err(|e| self.io_error(path, e))?;
        Ok(data)
    }

    fn is_link(&self, path: &RepoPath) -> bool {
        self.real(path)
            .and_then(|full| fs::symlink_metadata(full).map_err(|e| self.io_error(path, e)))
            .is_ok_and(|meta| meta.file_type().is_symlink())
    }

    fn stamp(&self, path: &RepoPath) -> Option<Stamp> {
        let meta = self.meta(path).ok()??;
        let time = |secs: i64, nanos: i64| (secs as u64).wrapping_mul(1_000_000_000) ^ nanos as u64;
        Some(Stamp([
            meta.len(),
            time(meta.mtime(), meta.mtime_nsec()),
            time(meta.ctime(), meta.ctime_nsec()),
            meta.ino(),
            meta.dev(),
        ]))
    }

    fn write(&mut self, path: &RepoPath, data: &[u8]) -> Result<(), RepoError> {
        let full = self.real(path)?;
        if path.is_root() || self.meta(path)?.is_some_and(|m| m.is_dir()) {
            return Err(RepoError::IsADirectory(self.shown(path)));
        }
        self.make_parents(path)?;
        self.write_file(path, &full, data)
    }

    fn remove(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        if path.is_root() {
            return Err(RepoError::InvalidPath {
                path: self.shown(path),
                reason: "the repository root itself cannot be removed",
            });
        }
        let full = self.real(path)?;
        let meta = fs::symlink_metadata(&full).map_err(|e| self.io_error(path, e))?;
        // A link is removed itself, never what it points to.
        let removed = if meta.is_dir() {
            fs::remove_dir_all(&full)
        } else {
            fs::remove_file(&full)
        };
        removed.map_err(|e| self.io_error(path, e))
    }

    fn create_dir_all(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        let full = self.real(path)?;
        match self.meta(path)? {
            Some(meta) if meta.is_dir() => return Ok(()),
            Some(_) => return Err(RepoError::AlreadyExists(self.shown(path))),
            None => {}
        }
        self.make_parents(path)?;
        fs::create_dir_all(full).map_err(|e| self.io_error(path, e))
    }

    fn rename(&mut self, from: &RepoPath, to: &RepoPath) -> Result<(), RepoError> {
        let from_full = self.real(from)?;
        let to_full = self.real(to)?;
        if check_rename(self, from, to)?.is_none() {
            return Ok(());
        }
        self.make_parents(to)?;
        fs::rename(from_full, to_full).map_err(|e| self.io_error(from, e))
    }

    fn list_dir(&self, path: &RepoPath) -> Result<Vec<DirEntry>, RepoError> {
        match self.meta(path)? {
            None => return Err(RepoError::NotFound(self.shown(path))),
            Some(meta) if !meta.is_dir() => return Err(RepoError::NotADirectory(self.shown(path))),
            Some(_) => {}
        }
        let full = self.real(path)?;
        let mut out: Vec<DirEntry> = self
            .entries(path, &full, OnEscape::Skip)?
            .into_iter()
            .filter(|(_, meta, _)| meta.is_dir() || meta.is_file())
            .map(|(child, meta, _)| DirEntry {
                name: child.file_name().to_string(),
                kind: if meta.is_dir() {
                    EntryKind::Dir
                } else {
                    EntryKind::File
                },
                len: if meta.is_dir() { 0 } else { meta.len() },
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn walk_files(&self, path: &RepoPath) -> Result<Vec<RepoPath>, RepoError> {
        self.walk(path, OnEscape::Skip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_keep_their_meaning() {
        let e = map_io("/r/x".into(), io::Error::from(io::ErrorKind::NotFound));
        assert!(matches!(e, RepoError::NotFound(p) if p == "/r/x"));
        let e = map_io(
            "/r/x".into(),
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert!(
            matches!(e, RepoError::Io { ref path, .. } if path == "/r/x"),
            "{e}"
        );
        assert!(e.to_string().starts_with("/r/x: "));
    }
}
