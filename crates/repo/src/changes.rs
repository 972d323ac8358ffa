//! What a run changed in its repository, at the cost of the change rather than of the
//! repository: the files are read once at the start, and after each step only files whose
//! [`Stamp`] moved are read again (where the repository keeps no stamps, as in memory,
//! contents are compared). Build outputs and whatever the repository's `.gitignore` files
//! ignore are not tracked, as `git diff` would not show them. Contents are kept up to a
//! per-file and a total budget; a change to a file past them is reported the way git reports a
//! binary change (named, without contents).

use std::collections::BTreeMap;
use std::sync::Arc as Rc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::patch::{self, Change};
use crate::repo::Stamp;
use crate::{EntryKind, RepoError, RepoPath, Repository};

/// Folders that hold what builds and tools generate, never what a patch should carry, skipped
/// even where no `.gitignore` names them.
pub const BUILD_DIRS: &[&str] = &[
    "node_modules",
    "target",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".ruff_cache",
    ".eggs",
];

/// How much of the repository's contents a tracker keeps in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackLimits {
    /// Files larger than this are tracked by stamp and size alone.
    pub max_file_bytes: u64,
    /// Contents kept in all (the start and the changed files); past it, files are tracked by
    /// stamp and size alone.
    pub max_total_bytes: u64,
}

impl Default for TrackLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: 8 << 20,
            max_total_bytes: 256 << 20,
        }
    }
}

#[derive(Clone, Debug)]
struct Seen {
    stamp: Option<Stamp>,
    len: u64,
    /// `None`: past the limits, not kept.
    data: Option<Rc<[u8]>>,
    /// Where the repository keeps no stamps, a hash of contents that were not kept.
    hash: Option<u64>,
}

impl Seen {
    fn kept_bytes(&self) -> u64 {
        self.data.as_ref().map_or(0, |d| d.len() as u64)
    }

    /// Whether `self` (the start) and `now` may differ.
    fn differs_from(&self, now: &Seen) -> bool {
        match (&self.data, &now.data) {
            (Some(a), Some(b)) => !Rc::ptr_eq(a, b) && a != b,
            // Without both contents, the stamp (or, without stamps, the hash) decides.
            _ if self.stamp.is_some() => self.len != now.len || self.stamp != now.stamp,
            _ => self.len != now.len || self.hash.is_none() || self.hash != now.hash,
        }
    }
}

/// The start of a run and the latest look at its repository.
pub struct ChangeTracker {
    limits: TrackLimits,
    start: BTreeMap<RepoPath, Seen>,
    now: BTreeMap<RepoPath, Seen>,
    rules: std::cell::RefCell<IgnoreRules>,
}

/// Each folder's ignore rules, read the first time the folder is walked and kept: a
/// `.gitignore` the model edits does not change what is tracked (a file it starts to ignore
/// would look deleted, one it stops ignoring added).
#[derive(Default)]
pub struct IgnoreRules {
    by_dir: BTreeMap<RepoPath, Option<Rc<Gitignore>>>,
}

impl ChangeTracker {
    /// Takes the repository's current files as the start.
    pub fn new(repo: &dyn Repository, limits: TrackLimits) -> Result<Self, RepoError> {
        let mut tracker = Self {
            limits,
            start: BTreeMap::new(),
            now: BTreeMap::new(),
            rules: Default::default(),
        };
        tracker.start = tracker.observe(repo)?;
        tracker.now = tracker.start.clone();
        Ok(tracker)
    }

    /// Looks at the repository again. Fails only when its root cannot be listed; an entry that
    /// cannot be read is left out (it no longer holds a file the tools can use).
    pub fn update(&mut self, repo: &dyn Repository) -> Result<(), RepoError> {
        self.now = self.observe(repo)?;
        Ok(())
    }

    fn observe(&self, repo: &dyn Repository) -> Result<BTreeMap<RepoPath, Seen>, RepoError> {
        let mut budget = self
            .limits
            .max_total_bytes
            .saturating_sub(self.start.values().map(Seen::kept_bytes).sum());
        let mut out = BTreeMap::new();
        for path in tracked_files(repo, &mut self.rules.borrow_mut())? {
            let stamp = repo.stamp(&path);
            let previous = self.now.get(&path).or_else(|| self.start.get(&path));
            if let Some(prev) = previous
                && stamp.is_some()
                && prev.stamp == stamp
            {
                if !self.start.get(&path).is_some_and(|s| same_data(s, prev)) {
                    budget = budget.saturating_sub(prev.kept_bytes());
                }
                out.insert(path, prev.clone());
                continue;
            }
            let Ok(len) = repo.file_len(&path) else {
                continue;
            };
            let keep = len <= self.limits.max_file_bytes && len <= budget;
            let mut hash = None;
            let data = if keep || stamp.is_none() {
                let Ok(data) = repo.read(&path) else {
                    continue;
                };
                if keep && data.len() as u64 <= budget {
                    Some(Rc::<[u8]>::from(data))
                } else {
                    // Without stamps, a hash stands for the contents too large to keep.
                    hash = Some(content_hash(&data));
                    None
                }
            } else {
                None
            };
            // Unchanged contents share the start's copy, so they cost no budget.
            let data = match (data, self.start.get(&path).and_then(|s| s.data.as_ref())) {
                (Some(new), Some(old)) if new == *old => Some(Rc::clone(old)),
                (data, _) => {
                    budget = budget.saturating_sub(data.as_ref().map_or(0, |d| d.len() as u64));
                    data
                }
            };
            out.insert(
                path,
                Seen {
                    stamp,
                    len,
                    data,
                    hash,
                },
            );
        }
        Ok(out)
    }

    /// Files added, modified or deleted since the start, in path order.
    pub fn changes(&self) -> Vec<(RepoPath, Change)> {
        let mut out: Vec<_> = self
            .start
            .iter()
            .filter_map(|(path, start)| match self.now.get(path) {
                None => Some((path.clone(), Change::Deleted)),
                Some(now) if start.differs_from(now) => Some((path.clone(), Change::Modified)),
                Some(_) => None,
            })
            .collect();
        out.extend(
            self.now
                .keys()
                .filter(|p| !self.start.contains_key(*p))
                .map(|p| (p.clone(), Change::Added)),
        );
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// A `git diff`-style patch from the start to the latest look (see [`patch::diff`]).
    pub fn patch(&self) -> String {
        let mut out = String::new();
        for (path, _) in self.changes() {
            patch::file_diff(
                &mut out,
                &path,
                contents(self.start.get(&path)),
                contents(self.now.get(&path)),
            );
        }
        out
    }
}

/// FNV-1a: stable, dependency-free, enough to tell a changed file from an unchanged one.
fn content_hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A file's contents for a patch: `None` where it does not exist.
fn contents(seen: Option<&Seen>) -> Option<&[u8]> {
    seen.map(|s| s.data.as_deref().unwrap_or(patch::UNKEPT))
}

fn same_data(a: &Seen, b: &Seen) -> bool {
    match (&a.data, &b.data) {
        (Some(x), Some(y)) => Rc::ptr_eq(x, y),
        _ => false,
    }
}

/// Every file a patch should cover: a walk that skips [`BUILD_DIRS`] and what the `.gitignore`
/// files (the root's and every folder's) and `.git/info/exclude` ignore, with each folder's
/// rules as `rules` first saw them.
pub fn tracked_files(
    repo: &dyn Repository,
    rules: &mut IgnoreRules,
) -> Result<Vec<RepoPath>, RepoError> {
    let root = RepoPath::root();
    let mut out = Vec::new();
    let exclude_key = RepoPath::new(".git/info").unwrap_or_else(|_| root.clone());
    let base = rules
        .by_dir
        .entry(exclude_key)
        .or_insert_with(|| {
            let exclude = RepoPath::new(".git/info/exclude").ok();
            Some(ignore_file(repo, &root, exclude.as_ref()))
        })
        .clone()
        .unwrap_or_else(|| Rc::new(Gitignore::empty()));
    let mut pending = vec![(root.clone(), vec![base])];
    while let Some((dir, chain)) = pending.pop() {
        let entries = match repo.list_dir(&dir) {
            Ok(entries) => entries,
            Err(_) if !dir.is_root() => continue,
            Err(RepoError::NotFound(_)) => return Ok(out),
            Err(e) => return Err(e),
        };
        let mut chain = chain;
        let own = rules.by_dir.entry(dir.clone()).or_insert_with(|| {
            let own = dir
                .join(".gitignore")
                .ok()
                .map(|file| ignore_file(repo, &dir, Some(&file)));
            own.filter(|g| !g.is_empty())
        });
        if let Some(own) = own {
            chain.push(own.clone());
        }
        for entry in entries {
            let Ok(path) = dir.join(&entry.name) else {
                continue;
            };
            let is_dir = entry.kind == EntryKind::Dir;
            if crate::SKIPPED_DIRS.contains(&entry.name.as_str())
                || (is_dir && BUILD_DIRS.contains(&entry.name.as_str()))
                || ignored(&chain, &path, is_dir)
            {
                continue;
            }
            if is_dir {
                // A linked folder is not walked, as `Repository::walk_files` does not: a link
                // to a parent would repeat the tree without end.
                if !repo.is_link(&path) {
                    pending.push((path, chain.clone()));
                }
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The rules of one ignore file (`file`, read through the repository), anchored at `dir`;
/// empty when there is none.
fn ignore_file(repo: &dyn Repository, dir: &RepoPath, file: Option<&RepoPath>) -> Rc<Gitignore> {
    let mut builder = GitignoreBuilder::new(format!("/{}", dir.as_str()));
    if let Some(file) = file
        && repo.kind(file) == Some(EntryKind::File)
        && let Ok(data) = repo.read_head(file, 1 << 20)
    {
        for line in String::from_utf8_lossy(&data).lines() {
            // A line the matcher cannot read is ignored, as git ignores it.
            let _ = builder.add_line(None, line);
        }
    }
    Rc::new(builder.build().unwrap_or_else(|_| Gitignore::empty()))
}

/// Whether the deepest rule set that has a say ignores `path`.
fn ignored(rules: &[Rc<Gitignore>], path: &RepoPath, is_dir: bool) -> bool {
    let full = format!("/{}", path.as_str());
    for set in rules.iter().rev() {
        let matched = set.matched(&full, is_dir);
        if matched.is_ignore() {
            return true;
        }
        if matched.is_whitelist() {
            return false;
        }
    }
    false
}
