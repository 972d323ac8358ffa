//! An in-memory repository: the browser's working copy of an imported project. It remembers a
//! baseline to diff against and can undo its own mutations one by one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::patch::{self, Change};
use crate::repo::{DirEntry, EntryKind, Repository, SKIPPED_DIRS, Snapshot};
use crate::{RepoError, RepoPath};

/// Undo history is dropped oldest first past this many bytes of saved contents (the newest step
/// is always kept), so a long session cannot grow without bound.
const UNDO_BUDGET_BYTES: usize = 64 << 20;

#[derive(Clone, Debug)]
pub struct VirtualRepo {
    root: String,
    files: BTreeMap<RepoPath, Vec<u8>>,
    /// Every folder, including the parents of every file; the root is implied.
    dirs: BTreeSet<RepoPath>,
    baseline: Snapshot,
    undo: VecDeque<UndoStep>,
    undo_bytes: usize,
    /// The most the files may hold together; a write past it fails.
    max_bytes: u64,
}

/// What an in-memory repository holds at most unless told otherwise: a command writing without
/// end fails with an error rather than exhausting the machine's memory.
pub const DEFAULT_MAX_REPO_BYTES: u64 = 1 << 30;

/// The state of what one mutation could touch, taken before it ran: every file and folder below
/// each scope, and whether each scope's ancestor folders existed. Restoring it puts exactly
/// those entries back, so a step costs only the contents the mutation touched.
#[derive(Clone, Debug)]
struct UndoStep {
    scopes: Vec<RepoPath>,
    files: Vec<(RepoPath, Vec<u8>)>,
    dirs: Vec<RepoPath>,
    bytes: usize,
}

/// What may move where, for every repository: something that exists, never the root or a
/// folder into itself, never onto a folder, and a folder never onto a file; a file may replace
/// a file, as `mv` does. Gives what `from` is, or `None` when `from == to` leaves nothing to do.
pub(crate) fn check_rename(
    repo: &impl Repository,
    from: &RepoPath,
    to: &RepoPath,
) -> Result<Option<EntryKind>, RepoError> {
    let root = repo.root();
    let from_kind = repo
        .kind(from)
        .ok_or_else(|| RepoError::NotFound(from.display_under(root)))?;
    let to_kind = repo.kind(to);
    if from.is_root() || (to.starts_with(from) && to != from) {
        return Err(RepoError::InvalidPath {
            path: to.display_under(root),
            reason: "cannot move a folder into itself",
        });
    }
    if from == to {
        return Ok(None);
    }
    if to_kind == Some(EntryKind::Dir) || (to_kind.is_some() && from_kind == EntryKind::Dir) {
        return Err(RepoError::AlreadyExists(to.display_under(root)));
    }
    Ok(Some(from_kind))
}

fn ancestors(path: &RepoPath) -> impl Iterator<Item = RepoPath> {
    std::iter::successors(path.parent(), RepoPath::parent).filter(|p| !p.is_root())
}

impl VirtualRepo {
    /// An empty repository shown to the model at `root` (e.g. `/repo`).
    pub fn new(root: &str) -> Self {
        Self {
            root: root.trim_end_matches('/').to_string(),
            files: BTreeMap::new(),
            dirs: BTreeSet::new(),
            baseline: Snapshot::new(),
            undo: VecDeque::new(),
            undo_bytes: 0,
            max_bytes: DEFAULT_MAX_REPO_BYTES,
        }
    }

    /// Caps the files' total size at `bytes`.
    pub fn with_max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Takes the current files as the baseline that [`VirtualRepo::diff`] compares against.
    pub fn set_baseline(&mut self) {
        self.baseline = self
            .current()
            .into_iter()
            .map(|(p, d)| (p, d.to_vec()))
            .collect();
    }

    pub fn baseline(&self) -> &Snapshot {
        &self.baseline
    }

    /// The contents of the file at `path`, borrowed.
    fn file(&self, path: &RepoPath) -> Result<&[u8], RepoError> {
        match self.kind(path) {
            Some(EntryKind::File) => Ok(&self.files[path]),
            Some(EntryKind::Dir) => Err(RepoError::IsADirectory(self.shown(path))),
            None => Err(RepoError::NotFound(self.shown(path))),
        }
    }

    /// A `git diff`-style patch from the baseline to the current files.
    pub fn diff(&self) -> String {
        patch::diff_between(&self.baseline, &self.current())
    }

    /// Files added, modified or deleted since the baseline, in path order.
    pub fn changed_files(&self) -> Vec<(RepoPath, Change)> {
        patch::changes_between(&self.baseline, &self.current())
    }

    /// Applies a unified patch (see [`patch::apply`]) as one undoable mutation: all of it or,
    /// on error, none of it. Folders left empty by deleted files are removed, as `git apply`
    /// does.
    pub fn apply_patch(&mut self, patch: &str) -> Result<(), RepoError> {
        let planned = patch::plan(patch, |p| self.files.get(p).map(Vec::as_slice))?;
        let scopes: Vec<RepoPath> = planned.keys().cloned().collect();
        self.journaled(&scopes, |repo| {
            for (path, content) in planned {
                match content {
                    Some(data) => repo.write_file(&path, data)?,
                    None => {
                        repo.remove_entry(&path)?;
                        repo.prune_empty_parents(&path);
                    }
                }
            }
            Ok(())
        })
    }

    /// Reverts the most recent mutation (write, remove, folder creation, rename or patch).
    pub fn undo(&mut self) -> Result<(), RepoError> {
        let step = self.undo.pop_back().ok_or(RepoError::NothingToUndo)?;
        self.undo_bytes -= step.bytes;
        self.restore(step);
        Ok(())
    }

    /// How many mutations [`VirtualRepo::undo`] can still revert.
    pub fn undo_steps(&self) -> usize {
        self.undo.len()
    }

    /// Forgets the undo history (an imported project starts without one).
    pub(crate) fn clear_undo(&mut self) {
        self.undo.clear();
        self.undo_bytes = 0;
    }

    /// Every folder, for export.
    pub(crate) fn dirs(&self) -> impl Iterator<Item = &RepoPath> {
        self.dirs.iter()
    }

    /// The files a snapshot holds (version-control folders left out), borrowed.
    fn current(&self) -> BTreeMap<RepoPath, &[u8]> {
        self.files
            .iter()
            .filter(|(p, _)| !p.components().any(|c| SKIPPED_DIRS.contains(&c)))
            .map(|(p, d)| (p.clone(), d.as_slice()))
            .collect()
    }

    /// Runs `mutation`, first saving what lies under `scopes`. On success the saved state becomes
    /// an undo step (unless nothing changed); on error it is restored, so a failed mutation
    /// leaves no half-done change behind.
    fn journaled(
        &mut self,
        scopes: &[RepoPath],
        mutation: impl FnOnce(&mut Self) -> Result<(), RepoError>,
    ) -> Result<(), RepoError> {
        let step = self.capture(scopes);
        match mutation(self) {
            Ok(()) => {
                if !self.matches(&step) {
                    self.push_undo(step);
                }
                Ok(())
            }
            Err(e) => {
                self.restore(step);
                Err(e)
            }
        }
    }

    /// Files below any of `scopes`, in path order.
    fn files_in<'s>(
        &'s self,
        scopes: &'s [RepoPath],
    ) -> impl Iterator<Item = (&'s RepoPath, &'s [u8])> {
        self.files
            .iter()
            .filter(|(p, _)| scopes.iter().any(|s| p.starts_with(s)))
            .map(|(p, d)| (p, d.as_slice()))
    }

    /// Folders below any of `scopes` or above one (the parents a mutation may create).
    fn dirs_in<'s>(&'s self, scopes: &'s [RepoPath]) -> impl Iterator<Item = &'s RepoPath> {
        self.dirs
            .iter()
            .filter(|d| scopes.iter().any(|s| d.starts_with(s) || s.starts_with(d)))
    }

    fn capture(&self, scopes: &[RepoPath]) -> UndoStep {
        let files: Vec<(RepoPath, Vec<u8>)> = self
            .files_in(scopes)
            .map(|(p, d)| (p.clone(), d.to_vec()))
            .collect();
        let bytes = files.iter().map(|(p, d)| p.as_str().len() + d.len()).sum();
        UndoStep {
            scopes: scopes.to_vec(),
            dirs: self.dirs_in(scopes).cloned().collect(),
            files,
            bytes,
        }
    }

    /// True when the entries `step` saved are exactly as they are now.
    fn matches(&self, step: &UndoStep) -> bool {
        let saved_files = step.files.iter().map(|(p, d)| (p, d.as_slice()));
        self.files_in(&step.scopes).eq(saved_files)
            && self.dirs_in(&step.scopes).eq(step.dirs.iter())
    }

    fn restore(&mut self, step: UndoStep) {
        for scope in &step.scopes {
            self.files.retain(|p, _| !p.starts_with(scope));
            self.dirs.retain(|p| !p.starts_with(scope));
            for ancestor in ancestors(scope) {
                self.dirs.remove(&ancestor);
            }
        }
        self.files.extend(step.files);
        self.dirs.extend(step.dirs);
    }

    fn push_undo(&mut self, step: UndoStep) {
        self.undo_bytes += step.bytes;
        self.undo.push_back(step);
        while self.undo_bytes > UNDO_BUDGET_BYTES && self.undo.len() > 1 {
            if let Some(old) = self.undo.pop_front() {
                self.undo_bytes -= old.bytes;
            }
        }
    }

    fn add_parents(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        for p in ancestors(path) {
            if self.files.contains_key(&p) {
                return Err(RepoError::NotADirectory(p.display_under(&self.root)));
            }
            self.dirs.insert(p);
        }
        Ok(())
    }

    fn prune_empty_parents(&mut self, path: &RepoPath) {
        for dir in ancestors(path) {
            let has_children = self.files.keys().any(|p| p.parent().as_ref() == Some(&dir))
                || self.dirs.iter().any(|p| p.parent().as_ref() == Some(&dir));
            if has_children {
                break;
            }
            self.dirs.remove(&dir);
        }
    }

    fn shown(&self, path: &RepoPath) -> String {
        path.display_under(&self.root)
    }

    fn write_file(&mut self, path: &RepoPath, data: Vec<u8>) -> Result<(), RepoError> {
        if self.kind(path) == Some(EntryKind::Dir) {
            return Err(RepoError::IsADirectory(self.shown(path)));
        }
        let others: u64 = self
            .files
            .iter()
            .filter(|(p, _)| *p != path)
            .map(|(_, d)| d.len() as u64)
            .sum();
        if others + data.len() as u64 > self.max_bytes {
            return Err(RepoError::RepositoryFull {
                path: self.shown(path),
                limit: self.max_bytes,
            });
        }
        self.add_parents(path)?;
        self.files.insert(path.clone(), data);
        Ok(())
    }

    fn remove_entry(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        match self.kind(path) {
            Some(EntryKind::File) => {
                self.files.remove(path);
            }
            Some(EntryKind::Dir) => {
                self.files.retain(|p, _| !p.starts_with(path));
                self.dirs.retain(|p| !p.starts_with(path));
            }
            None => return Err(RepoError::NotFound(self.shown(path))),
        }
        Ok(())
    }

    fn create_dirs(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        match self.kind(path) {
            Some(EntryKind::Dir) => Ok(()),
            Some(EntryKind::File) => Err(RepoError::AlreadyExists(self.shown(path))),
            None => {
                self.add_parents(path)?;
                self.dirs.insert(path.clone());
                Ok(())
            }
        }
    }

    fn move_entry(&mut self, from: &RepoPath, to: &RepoPath) -> Result<(), RepoError> {
        let Some(kind) = check_rename(self, from, to)? else {
            return Ok(());
        };
        self.add_parents(to)?;
        let moved = |p: &RepoPath| -> Result<RepoPath, RepoError> {
            let rest = &p.as_str()[from.as_str().len()..];
            RepoPath::new(&format!("{}{rest}", to.as_str()))
        };
        match kind {
            EntryKind::File => {
                if let Some(data) = self.files.remove(from) {
                    self.files.insert(to.clone(), data);
                }
            }
            EntryKind::Dir => {
                let files: Vec<_> = self
                    .files
                    .keys()
                    .filter(|p| p.starts_with(from))
                    .cloned()
                    .collect();
                for p in files {
                    if let Some(data) = self.files.remove(&p) {
                        self.files.insert(moved(&p)?, data);
                    }
                }
                let dirs: Vec<_> = self
                    .dirs
                    .iter()
                    .filter(|p| p.starts_with(from))
                    .cloned()
                    .collect();
                for d in dirs {
                    self.dirs.remove(&d);
                    self.dirs.insert(moved(&d)?);
                }
            }
        }
        Ok(())
    }
}

impl Repository for VirtualRepo {
    fn root(&self) -> &str {
        &self.root
    }

    fn kind(&self, path: &RepoPath) -> Option<EntryKind> {
        if path.is_root() || self.dirs.contains(path) {
            Some(EntryKind::Dir)
        } else if self.files.contains_key(path) {
            Some(EntryKind::File)
        } else {
            None
        }
    }

    fn read(&self, path: &RepoPath) -> Result<Vec<u8>, RepoError> {
        self.file(path).map(<[u8]>::to_vec)
    }

    fn file_len(&self, path: &RepoPath) -> Result<u64, RepoError> {
        self.file(path).map(|data| data.len() as u64)
    }

    fn read_head(&self, path: &RepoPath, max: usize) -> Result<Vec<u8>, RepoError> {
        self.file(path)
            .map(|data| data[..data.len().min(max)].to_vec())
    }

    fn write(&mut self, path: &RepoPath, data: &[u8]) -> Result<(), RepoError> {
        self.journaled(std::slice::from_ref(path), |repo| {
            repo.write_file(path, data.to_vec())
        })
    }

    fn remove(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        self.journaled(std::slice::from_ref(path), |repo| repo.remove_entry(path))
    }

    fn create_dir_all(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        self.journaled(std::slice::from_ref(path), |repo| repo.create_dirs(path))
    }

    fn rename(&mut self, from: &RepoPath, to: &RepoPath) -> Result<(), RepoError> {
        self.journaled(&[from.clone(), to.clone()], |repo| {
            repo.move_entry(from, to)
        })
    }

    fn list_dir(&self, path: &RepoPath) -> Result<Vec<DirEntry>, RepoError> {
        match self.kind(path) {
            Some(EntryKind::Dir) => {}
            Some(EntryKind::File) => return Err(RepoError::NotADirectory(self.shown(path))),
            None => return Err(RepoError::NotFound(self.shown(path))),
        }
        let is_child = |p: &RepoPath| p.parent().as_ref() == Some(path);
        let mut out: Vec<DirEntry> = self
            .dirs
            .iter()
            .filter(|p| is_child(p))
            .map(|p| DirEntry {
                name: p.file_name().into(),
                kind: EntryKind::Dir,
                len: 0,
            })
            .chain(
                self.files
                    .iter()
                    .filter(|(p, _)| is_child(p))
                    .map(|(p, d)| DirEntry {
                        name: p.file_name().into(),
                        kind: EntryKind::File,
                        len: d.len() as u64,
                    }),
            )
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn walk_files(&self, path: &RepoPath) -> Result<Vec<RepoPath>, RepoError> {
        match self.kind(path) {
            Some(EntryKind::File) => return Ok(vec![path.clone()]),
            None => return Err(RepoError::NotFound(self.shown(path))),
            Some(EntryKind::Dir) => {}
        }
        Ok(self
            .files
            .keys()
            .filter(|p| p.starts_with(path))
            .filter(|p| {
                !p.components()
                    .skip(path.components().count())
                    .any(|c| SKIPPED_DIRS.contains(&c))
            })
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RepoPath {
        RepoPath::new(s).unwrap()
    }

    #[test]
    fn files_folders_and_listing() {
        let mut r = VirtualRepo::new("/repo");
        r.write(&p("src/app/main.py"), b"print(1)\n").unwrap();
        r.write(&p("README.md"), b"hi").unwrap();
        r.create_dir_all(&p("empty/dir")).unwrap();
        assert_eq!(r.kind(&p("src/app")), Some(EntryKind::Dir));
        assert_eq!(r.read(&p("src/app/main.py")).unwrap(), b"print(1)\n");
        let names: Vec<_> = r
            .list_dir(&RepoPath::root())
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["README.md", "empty", "src"]);
        assert!(matches!(r.read(&p("src")), Err(RepoError::IsADirectory(_))));
        assert!(matches!(r.read(&p("nope")), Err(RepoError::NotFound(_))));
        assert!(matches!(
            r.write(&p("README.md/x"), b""),
            Err(RepoError::NotADirectory(_))
        ));
        assert!(matches!(
            r.write(&p("src"), b""),
            Err(RepoError::IsADirectory(_))
        ));
    }

    #[test]
    fn rename_and_remove_folders() {
        let mut r = VirtualRepo::new("/repo");
        r.write(&p("a/b/c.txt"), b"c").unwrap();
        r.write(&p("a/d.txt"), b"d").unwrap();
        r.write(&p("ab.txt"), b"ab").unwrap();
        r.rename(&p("a"), &p("z/y")).unwrap();
        assert_eq!(
            r.walk_files(&RepoPath::root()).unwrap(),
            [p("ab.txt"), p("z/y/b/c.txt"), p("z/y/d.txt")]
        );
        assert!(r.rename(&p("z"), &p("z/y/q")).is_err());
        r.remove(&p("z")).unwrap();
        assert_eq!(r.walk_files(&RepoPath::root()).unwrap(), [p("ab.txt")]);
        assert_eq!(r.kind(&p("z/y")), None);
    }

    #[test]
    fn undo_reverts_each_kind_of_mutation() {
        let mut r = VirtualRepo::new("/repo");
        r.write(&p("a/b.txt"), b"1").unwrap();
        r.write(&p("a/c/d.txt"), b"d").unwrap();
        r.clear_undo();
        let start = r.clone();
        let same = |r: &VirtualRepo| r.files == start.files && r.dirs == start.dirs;

        r.write(&p("new/deep/x.txt"), b"x").unwrap();
        r.undo().unwrap();
        assert!(same(&r), "new file and the folders made for it are gone");
        r.write(&p("a/b.txt"), b"2").unwrap();
        r.undo().unwrap();
        assert!(same(&r), "overwritten contents come back");
        r.remove(&p("a")).unwrap();
        r.undo().unwrap();
        assert!(same(&r), "a removed folder comes back whole");
        r.create_dir_all(&p("e/f")).unwrap();
        r.undo().unwrap();
        assert!(same(&r));
        r.rename(&p("a/c"), &p("z/c")).unwrap();
        r.undo().unwrap();
        assert!(same(&r), "a renamed folder moves back");

        // Several steps unwind newest first.
        r.write(&p("a/b.txt"), b"2").unwrap();
        r.write(&p("a/b.txt"), b"3").unwrap();
        r.remove(&p("a/c")).unwrap();
        assert_eq!(r.undo_steps(), 3);
        r.undo().unwrap();
        assert_eq!(r.read(&p("a/c/d.txt")).unwrap(), b"d");
        r.undo().unwrap();
        assert_eq!(r.read(&p("a/b.txt")).unwrap(), b"2");
        r.undo().unwrap();
        assert!(same(&r));
        assert!(matches!(r.undo(), Err(RepoError::NothingToUndo)));
    }

    #[test]
    fn undo_skips_no_ops_and_failures_leave_nothing_behind() {
        let mut r = VirtualRepo::new("/repo");
        r.write(&p("x/file"), b"f").unwrap();
        r.clear_undo();
        r.create_dir_all(&p("x")).unwrap();
        r.write(&p("x/file"), b"f").unwrap();
        r.rename(&p("x"), &p("x")).unwrap();
        assert_eq!(r.undo_steps(), 0, "nothing changed, so nothing to undo");

        // The deepest missing folder would be made before the file in the way is found.
        let before = (r.files.clone(), r.dirs.clone());
        assert!(matches!(
            r.write(&p("x/file/y/z.txt"), b""),
            Err(RepoError::NotADirectory(_))
        ));
        assert_eq!((r.files.clone(), r.dirs.clone()), before);
        assert_eq!(r.undo_steps(), 0);
        // A folder cannot replace a file.
        r.create_dir_all(&p("d")).unwrap();
        assert!(matches!(
            r.rename(&p("d"), &p("x/file")),
            Err(RepoError::AlreadyExists(_))
        ));
        assert_eq!(r.read(&p("x/file")).unwrap(), b"f");
    }

    #[test]
    fn undo_history_stays_within_its_budget() {
        let mut r = VirtualRepo::new("/repo");
        let step = |bytes| UndoStep {
            scopes: Vec::new(),
            files: Vec::new(),
            dirs: Vec::new(),
            bytes,
        };
        r.push_undo(step(UNDO_BUDGET_BYTES / 2 + 1));
        r.push_undo(step(UNDO_BUDGET_BYTES / 2 + 1));
        assert_eq!(r.undo_steps(), 1, "the oldest step is dropped");
        r.push_undo(step(UNDO_BUDGET_BYTES * 2));
        assert_eq!(
            r.undo_steps(),
            1,
            "the newest is kept even when larger than the budget"
        );
        assert_eq!(r.undo_bytes, UNDO_BUDGET_BYTES * 2);
    }

    #[test]
    fn walk_skips_git() {
        let mut r = VirtualRepo::new("/repo");
        r.write(&p(".git/HEAD"), b"ref").unwrap();
        r.write(&p("x.py"), b"").unwrap();
        assert_eq!(r.walk_files(&RepoPath::root()).unwrap(), [p("x.py")]);
        assert_eq!(r.snapshot().unwrap().len(), 1);
    }
}
