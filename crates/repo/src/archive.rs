//! Importing a project into a [`VirtualRepo`] (from a zip, a .tar.gz or, natively, a folder)
//! and exporting one as a zip. Archives come from users and the web, so every entry name is
//! confined with [`RepoPath::new`] and the expanded size is capped before anything is kept.

use std::cell::Cell;
use std::io::{self, Cursor, Read, Write};
use std::rc::Rc;

use crate::repo::SKIPPED_DIRS;
use crate::{RepoError, RepoPath, Repository, VirtualRepo};

/// Caps that stop an archive bomb (a small archive expanding to gigabytes or to millions of
/// entries) before it fills memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportLimits {
    /// Bytes of file contents, all files together.
    pub max_total_bytes: u64,
    /// Entries of any kind (files, folders, links).
    pub max_entries: usize,
}

impl Default for ImportLimits {
    fn default() -> Self {
        Self {
            max_total_bytes: 256 << 20,
            max_entries: 100_000,
        }
    }
}

/// Folders that hold tool metadata rather than the project: macOS's Finder adds `__MACOSX` to
/// every zip it makes.
const IGNORED_DIRS: &[&str] = &["__MACOSX"];

enum Item {
    File(Vec<u8>),
    Dir,
}

/// Entries read from an archive, with the caps enforced as they are read.
struct Entries {
    limits: ImportLimits,
    items: Vec<(String, Item)>,
    total_bytes: u64,
    seen: usize,
}

impl Entries {
    fn new(limits: ImportLimits) -> Self {
        Self {
            limits,
            items: Vec::new(),
            total_bytes: 0,
            seen: 0,
        }
    }

    /// Counts one entry of any kind against the entry cap.
    fn count(&mut self) -> Result<(), RepoError> {
        self.seen += 1;
        if self.seen > self.limits.max_entries {
            return Err(too_many(&self.limits));
        }
        Ok(())
    }

    /// Reads one file's contents, never more than the bytes left under the size cap, whatever
    /// size the archive claims.
    fn add_file(&mut self, name: String, reader: impl Read) -> Result<(), RepoError> {
        let left = self.limits.max_total_bytes - self.total_bytes;
        let mut data = Vec::new();
        reader
            .take(left.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(|e| RepoError::Archive(format!("entry `{name}`: {e}")))?;
        self.total_bytes += data.len() as u64;
        if self.total_bytes > self.limits.max_total_bytes {
            return Err(too_large(&self.limits));
        }
        self.items.push((name, Item::File(data)));
        Ok(())
    }
}

fn too_many(limits: &ImportLimits) -> RepoError {
    RepoError::Archive(format!(
        "more than {} entries; refusing to import it",
        limits.max_entries
    ))
}

fn too_large(limits: &ImportLimits) -> RepoError {
    RepoError::Archive(format!(
        "expands to more than {} bytes; refusing to import it",
        limits.max_total_bytes
    ))
}

/// Imports a zip or a .tar.gz, told apart by their first bytes.
pub fn import_archive(
    root: &str,
    data: &[u8],
    limits: ImportLimits,
) -> Result<VirtualRepo, RepoError> {
    if data.starts_with(b"PK") {
        import_zip(root, data, limits)
    } else if data.starts_with(&[0x1f, 0x8b]) {
        import_tar_gz(root, data, limits)
    } else {
        Err(RepoError::Archive(
            "neither a zip nor a .tar.gz file".into(),
        ))
    }
}

/// Imports files picked in a browser (a folder picker's `webkitRelativePath` and contents), with
/// the same caps, confinement, skipped folders and unwrapping of a single top folder as archives.
pub fn import_files(
    root: &str,
    files: impl IntoIterator<Item = (String, Vec<u8>)>,
    limits: ImportLimits,
) -> Result<VirtualRepo, RepoError> {
    let mut entries = Entries::new(limits);
    for (name, data) in files {
        entries.count()?;
        entries.add_file(name, data.as_slice())?;
    }
    build(root, entries.items)
}

/// Imports a zip into a new repository shown at `root`. Symbolic links are left out (an
/// in-memory repository has none); a single folder wrapping everything is unwrapped.
pub fn import_zip(root: &str, data: &[u8], limits: ImportLimits) -> Result<VirtualRepo, RepoError> {
    let mut archive = zip::ZipArchive::new(Cursor::new(data))
        .map_err(|e| RepoError::Archive(format!("not a readable zip file: {e}")))?;
    // The central directory gives the count up front: refuse before reading anything.
    if archive.len() > limits.max_entries {
        return Err(too_many(&limits));
    }
    let mut entries = Entries::new(limits);
    for index in 0..archive.len() {
        let file = archive
            .by_index(index)
            .map_err(|e| RepoError::Archive(format!("entry #{}: {e}", index + 1)))?;
        entries.count()?;
        let name = file
            .name()
            .map_err(|e| RepoError::Archive(format!("entry #{}: {e}", index + 1)))?
            .into_owned();
        if file.is_dir() {
            entries.items.push((name, Item::Dir));
        } else if !file.is_symlink() {
            entries.add_file(name, file)?;
        }
    }
    build(root, entries.items)
}

/// Imports a gzip-compressed tar (what GitHub's "Download tar.gz" gives) into a new repository
/// shown at `root`. Only files and folders are kept: links, devices and git's pax header entry
/// are left out. A single folder wrapping everything is unwrapped.
pub fn import_tar_gz(
    root: &str,
    data: &[u8],
    limits: ImportLimits,
) -> Result<VirtualRepo, RepoError> {
    // Entries that are skipped still expand (headers, padding, skipped data): cap the whole
    // stream too, with room for the headers of a full set of entries.
    let stream_cap = limits
        .max_total_bytes
        .saturating_add((limits.max_entries as u64).saturating_mul(2048));
    let hit_cap = Rc::new(Cell::new(false));
    let stream = Capped {
        inner: flate2::read::MultiGzDecoder::new(data),
        left: stream_cap,
        hit: hit_cap.clone(),
    };
    let mut archive = tar::Archive::new(stream);
    let mut entries = Entries::new(limits);
    let result = (|| -> Result<(), RepoError> {
        let list = archive
            .entries()
            .map_err(|e| tar_error("cannot read it", e))?;
        for entry in list {
            let entry = entry.map_err(|e| tar_error("cannot read an entry", e))?;
            entries.count()?;
            let name = String::from_utf8(entry.path_bytes().into_owned()).map_err(|e| {
                RepoError::Archive(format!(
                    "entry name `{}` is not UTF-8",
                    String::from_utf8_lossy(e.as_bytes())
                ))
            })?;
            match entry.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    entries.add_file(name, entry)?
                }
                tar::EntryType::Directory => entries.items.push((name, Item::Dir)),
                _ => {}
            }
        }
        Ok(())
    })();
    match result {
        Err(_) if hit_cap.get() => Err(too_large(&limits)),
        Err(e) => Err(e),
        Ok(()) => build(root, entries.items),
    }
}

fn tar_error(what: &str, e: io::Error) -> RepoError {
    RepoError::Archive(format!("not a readable .tar.gz file: {what}: {e}"))
}

/// A reader that fails once more than `left` bytes have come through, noting it in `hit`.
struct Capped<R> {
    inner: R,
    left: u64,
    hit: Rc<Cell<bool>>,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            self.hit.set(true);
            return Err(io::Error::other("archive expands past the size cap"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Imports a folder on disk into a new repository shown at `root`. Version-control folders are
/// skipped and a symbolic link leading outside the folder fails the import.
#[cfg(not(target_arch = "wasm32"))]
pub fn import_dir(
    root: &str,
    folder: &std::path::Path,
    limits: ImportLimits,
) -> Result<VirtualRepo, RepoError> {
    use crate::disk_repo::{DiskRepo, OnEscape};

    let disk = DiskRepo::open(folder)?;
    let mut entries = Entries::new(limits);
    let mut repo = VirtualRepo::new(root);
    for path in disk.walk(&RepoPath::root(), OnEscape::Fail)? {
        entries.count()?;
        // Sizes are known up front, so one huge file is refused without being read.
        entries.total_bytes += disk.file_len(&path)?;
        if entries.total_bytes > limits.max_total_bytes {
            return Err(too_large(&limits));
        }
        repo.write(&path, &disk.read(&path)?)?;
    }
    Ok(finish(repo))
}

/// A fresh repository's starting point: its files are the baseline, with nothing to undo.
fn finish(mut repo: VirtualRepo) -> VirtualRepo {
    repo.set_baseline();
    repo.clear_undo();
    repo
}

/// Builds the repository from archive entries: names are confined (any escape fails the whole
/// import), tool folders dropped and a single wrapping folder unwrapped.
fn build(root: &str, items: Vec<(String, Item)>) -> Result<VirtualRepo, RepoError> {
    let mut kept = Vec::with_capacity(items.len());
    for (name, item) in items {
        let path = RepoPath::new(&name)
            .map_err(|e| RepoError::Archive(format!("entry `{name}` is refused: {e}")))?;
        let ignored = path
            .components()
            .any(|c| SKIPPED_DIRS.contains(&c) || IGNORED_DIRS.contains(&c));
        if !ignored {
            kept.push((name, path, item));
        }
    }
    let wrapper = single_wrapper(
        kept.iter()
            .map(|(_, path, item)| (path, matches!(item, Item::File(_)))),
    );
    let mut repo = VirtualRepo::new(root);
    for (name, path, item) in kept {
        let path = match &wrapper {
            Some(top) => match path
                .as_str()
                .strip_prefix(top.as_str())
                .and_then(|r| r.strip_prefix('/'))
            {
                Some(rest) => RepoPath::new(rest)?,
                None => continue, // the wrapping folder itself
            },
            None => path,
        };
        let written = match item {
            Item::File(_) if path.is_root() => Err(RepoError::InvalidPath {
                path: name.clone(),
                reason: "a file entry without a name",
            }),
            Item::File(data) => repo.write(&path, &data),
            Item::Dir if path.is_root() => Ok(()),
            Item::Dir => repo.create_dir_all(&path),
        };
        written.map_err(|e| RepoError::Archive(format!("entry `{name}` is refused: {e}")))?;
    }
    Ok(finish(repo))
}

/// The one top-level folder every entry lies in, as GitHub's archives wrap a project, or `None`
/// when files sit at the top or there are several top-level names.
fn single_wrapper<'a>(entries: impl Iterator<Item = (&'a RepoPath, bool)>) -> Option<RepoPath> {
    let mut top: Option<&str> = None;
    let mut any_file = false;
    for (path, is_file) in entries {
        // A `./` entry (as `tar` writes for the current folder) says nothing about wrapping.
        let Some(first) = path.components().next() else {
            continue;
        };
        if is_file && path.components().nth(1).is_none() {
            return None; // a file at the top level
        }
        any_file |= is_file;
        match top {
            Some(t) if t != first => return None,
            _ => top = Some(first),
        }
    }
    if !any_file {
        return None;
    }
    top.and_then(|t| RepoPath::new(t).ok())
}

/// The repository as a zip (for download), every entry inside one folder named after the
/// repository's root (`/repo` → `repo/`) so it unpacks tidily and imports back unchanged.
pub fn export_zip(repo: &VirtualRepo) -> Result<Vec<u8>, RepoError> {
    let folder = RepoPath::new(repo.root().trim_start_matches('/'))
        .ok()
        .map(|p| p.file_name().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "repo".into());
    let zip_error =
        |e: zip::result::ZipError| RepoError::Archive(format!("cannot write the zip: {e}"));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o644);
    let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
    writer
        .add_directory(format!("{folder}/"), options.unix_permissions(0o755))
        .map_err(zip_error)?;
    for dir in repo.dirs() {
        if !dir.components().any(|c| SKIPPED_DIRS.contains(&c)) {
            writer
                .add_directory(
                    format!("{folder}/{}/", dir.as_str()),
                    options.unix_permissions(0o755),
                )
                .map_err(zip_error)?;
        }
    }
    for path in repo.walk_files(&RepoPath::root())? {
        writer
            .start_file(format!("{folder}/{}", path.as_str()), options)
            .map_err(zip_error)?;
        writer
            .write_all(&repo.read(&path)?)
            .map_err(|e| RepoError::Archive(format!("cannot write the zip: {e}")))?;
    }
    Ok(writer.finish().map_err(zip_error)?.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[(&str, bool)]) -> Vec<(RepoPath, bool)> {
        list.iter()
            .map(|(p, f)| (RepoPath::new(p).unwrap(), *f))
            .collect()
    }

    fn wrapper_of(list: &[(&str, bool)]) -> Option<String> {
        let entries = paths(list);
        single_wrapper(entries.iter().map(|(p, f)| (p, *f))).map(|p| p.as_str().to_string())
    }

    #[test]
    fn unwraps_only_a_single_top_folder() {
        assert_eq!(
            wrapper_of(&[("proj", false), ("proj/a.txt", true), ("proj/src/b", true)]).as_deref(),
            Some("proj")
        );
        assert_eq!(wrapper_of(&[("proj/a.txt", true), ("other/b", true)]), None);
        assert_eq!(wrapper_of(&[("proj/a.txt", true), ("top.txt", true)]), None);
        // Only folders, no files: nothing to unwrap into.
        assert_eq!(wrapper_of(&[("proj", false), ("proj/empty", false)]), None);
        assert_eq!(wrapper_of(&[]), None);
    }

    #[test]
    fn capped_reader_stops_at_its_limit() {
        let hit = Rc::new(Cell::new(false));
        let mut reader = Capped {
            inner: &[0u8; 10][..],
            left: 4,
            hit: hit.clone(),
        };
        let mut out = Vec::new();
        assert!(reader.read_to_end(&mut out).is_err());
        assert!(hit.get());
    }
}
