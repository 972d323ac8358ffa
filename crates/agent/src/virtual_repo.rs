//! An in-memory repository: the browser's working copy of an imported project.

use std::collections::{BTreeMap, BTreeSet};

use crate::repo::{DirEntry, EntryKind, Repository, SKIPPED_DIRS};
use crate::{RepoError, RepoPath};

#[derive(Clone, Debug)]
pub struct VirtualRepo {
    root: String,
    files: BTreeMap<RepoPath, Vec<u8>>,
    /// Every folder, including the parents of every file; the root is implied.
    dirs: BTreeSet<RepoPath>,
}

impl VirtualRepo {
    /// An empty repository shown to the model at `root` (e.g. `/repo`).
    pub fn new(root: &str) -> Self {
        Self {
            root: root.trim_end_matches('/').to_string(),
            files: BTreeMap::new(),
            dirs: BTreeSet::new(),
        }
    }

    fn add_parents(&mut self, path: &RepoPath) -> Result<(), RepoError> {
        let mut parent = path.parent();
        while let Some(p) = parent {
            if p.is_root() {
                break;
            }
            if self.files.contains_key(&p) {
                return Err(RepoError::NotADirectory(p.display_under(&self.root)));
            }
            self.dirs.insert(p.clone());
            parent = p.parent();
        }
        Ok(())
    }

    fn shown(&self, path: &RepoPath) -> String {
        path.display_under(&self.root)
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
        match self.kind(path) {
            Some(EntryKind::File) => Ok(self.files[path].clone()),
            Some(EntryKind::Dir) => Err(RepoError::IsADirectory(self.shown(path))),
            None => Err(RepoError::NotFound(self.shown(path))),
        }
    }

    fn write(&mut self, path: &RepoPath, data: &[u8]) -> Result<(), RepoError> {
        if self.kind(path) == Some(EntryKind::Dir) {
            return Err(RepoError::IsADirectory(self.shown(path)));
        }
        self.add_parents(path)?;
        self.files.insert(path.clone(), data.to_vec());
        Ok(())
    }

    fn remove(&mut self, path: &RepoPath) -> Result<(), RepoError> {
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

    fn create_dir_all(&mut self, path: &RepoPath) -> Result<(), RepoError> {
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

    fn rename(&mut self, from: &RepoPath, to: &RepoPath) -> Result<(), RepoError> {
        let kind = self
            .kind(from)
            .ok_or_else(|| RepoError::NotFound(self.shown(from)))?;
        if from.is_root() || (to.starts_with(from) && to != from) {
            return Err(RepoError::InvalidPath {
                path: self.shown(to),
                reason: "cannot move a folder into itself",
            });
        }
        if from == to {
            return Ok(());
        }
        if self.kind(to) == Some(EntryKind::Dir) {
            return Err(RepoError::AlreadyExists(self.shown(to)));
        }
        self.add_parents(to)?;
        let moved = |p: &RepoPath| -> RepoPath {
            let rest = &p.as_str()[from.as_str().len()..];
            RepoPath::new(&format!("{}{rest}", to.as_str())).expect("renamed path stays valid")
        };
        match kind {
            EntryKind::File => {
                let data = self.files.remove(from).expect("file exists");
                self.files.insert(to.clone(), data);
            }
            EntryKind::Dir => {
                let files: Vec<_> = self
                    .files
                    .keys()
                    .filter(|p| p.starts_with(from))
                    .cloned()
                    .collect();
                for p in files {
                    let data = self.files.remove(&p).expect("listed");
                    self.files.insert(moved(&p), data);
                }
                let dirs: Vec<_> = self.dirs.iter().filter(|p| p.starts_with(from)).cloned().collect();
                for d in dirs {
                    self.dirs.remove(&d);
                    self.dirs.insert(moved(&d));
                }
            }
        }
        Ok(())
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
            .chain(self.files.iter().filter(|(p, _)| is_child(p)).map(|(p, d)| DirEntry {
                name: p.file_name().into(),
                kind: EntryKind::File,
                len: d.len() as u64,
            }))
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
        let names: Vec<_> = r.list_dir(&RepoPath::root()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["README.md", "empty", "src"]);
        assert!(matches!(r.read(&p("src")), Err(RepoError::IsADirectory(_))));
        assert!(matches!(r.read(&p("nope")), Err(RepoError::NotFound(_))));
        assert!(matches!(r.write(&p("README.md/x"), b""), Err(RepoError::NotADirectory(_))));
        assert!(matches!(r.write(&p("src"), b""), Err(RepoError::IsADirectory(_))));
    }

    #[test]
    fn rename_and_remove_folders() {
        let mut r = VirtualRepo::new("/repo");
        r.write(&p("a/b/c.txt"), b"c").unwrap();
        r.write(&p("a/d.txt"), b"d").unwrap();
        r.write(&p("ab.txt"), b"ab").unwrap();
        r.rename(&p("a"), &p("z/y")).unwrap();
        assert_eq!(r.walk_files(&RepoPath::root()).unwrap(), [p("ab.txt"), p("z/y/b/c.txt"), p("z/y/d.txt")]);
        assert!(r.rename(&p("z"), &p("z/y/q")).is_err());
        r.remove(&p("z")).unwrap();
        assert_eq!(r.walk_files(&RepoPath::root()).unwrap(), [p("ab.txt")]);
        assert_eq!(r.kind(&p("z/y")), None);
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
