//! Repository-relative paths. Every path a tool or the shell receives is resolved here, so
//! confinement to the repository root is decided in one place.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::RepoError;

/// A normalised path inside a repository: `/`-separated components, no `.`, `..` or empty
/// components, never absolute. The empty path is the repository root.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RepoPath(String);

impl RepoPath {
    pub fn root() -> Self {
        Self(String::new())
    }

    /// Resolves `input` as the model or a shell command wrote it. Absolute inputs must lie under
    /// `root` (the repository's displayed absolute path, e.g. `/repo`); relative inputs are taken
    /// from `cwd`. `..` may move up inside the repository but never above its root.
    pub fn resolve(root: &str, cwd: &RepoPath, input: &str) -> Result<Self, RepoError> {
        if input.is_empty() {
            return Err(RepoError::InvalidPath {
                path: input.into(),
                reason: "empty path",
            });
        }
        if input.contains('\0') {
            return Err(RepoError::InvalidPath {
                path: input.into(),
                reason: "contains a NUL byte",
            });
        }
        let input_slashes = input.replace('\\', "/");
        let root_trimmed = root.trim_end_matches('/');
        let (mut parts, rest): (Vec<&str>, &str) = if input_slashes.starts_with('/') {
            let rest = if input_slashes == root_trimmed || root_trimmed.is_empty() {
                input_slashes.strip_prefix(root_trimmed).unwrap_or("")
            } else if let Some(rest) = input_slashes
                .strip_prefix(root_trimmed)
                .filter(|r| r.starts_with('/'))
            {
                rest
            } else {
                return Err(RepoError::OutsideRoot {
                    path: input.into(),
                    root: root.into(),
                });
            };
            (Vec::new(), rest)
        } else {
            (cwd.components().collect(), input_slashes.as_str())
        };
        for part in rest.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return Err(RepoError::OutsideRoot {
                            path: input.into(),
                            root: root.into(),
                        });
                    }
                }
                p => parts.push(p),
            }
        }
        Ok(Self(parts.join("/")))
    }

    /// Builds a path from already-relative text (archive entries, walked folders), with the
    /// same rules as [`RepoPath::resolve`] from the root.
    pub fn new(relative: &str) -> Result<Self, RepoError> {
        if relative.starts_with('/') || relative.starts_with('\\') {
            return Err(RepoError::InvalidPath {
                path: relative.into(),
                reason: "absolute path where a repository-relative one is needed",
            });
        }
        if relative.is_empty() {
            return Ok(Self::root());
        }
        Self::resolve("/", &Self::root(), relative)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    pub fn parent(&self) -> Option<RepoPath> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.rfind('/') {
            Some(i) => Self(self.0[..i].to_string()),
            None => Self::root(),
        })
    }

    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    pub fn join(&self, name: &str) -> Result<RepoPath, RepoError> {
        Self::resolve("/", self, name)
    }

    /// True when `self` is `other` or lies below it.
    pub fn starts_with(&self, other: &RepoPath) -> bool {
        other.is_root()
            || self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }

    /// The absolute form shown to the model: `root` + `/` + path.
    pub fn display_under(&self, root: &str) -> String {
        let root = root.trim_end_matches('/');
        if self.is_root() {
            if root.is_empty() {
                "/".into()
            } else {
                root.into()
            }
        } else {
            format!("{root}/{}", self.0)
        }
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_root() { "." } else { &self.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(input: &str) -> Result<RepoPath, RepoError> {
        RepoPath::resolve("/repo", &RepoPath::new("src").unwrap(), input)
    }

    #[test]
    fn resolves_absolute_and_relative() {
        assert_eq!(r("/repo/a/b.py").unwrap().as_str(), "a/b.py");
        assert_eq!(r("/repo").unwrap(), RepoPath::root());
        assert_eq!(r("/repo/").unwrap(), RepoPath::root());
        assert_eq!(r("x.py").unwrap().as_str(), "src/x.py");
        assert_eq!(r("./x//y/../z.py").unwrap().as_str(), "src/x/z.py");
        assert_eq!(r("..").unwrap(), RepoPath::root());
        assert_eq!(r("../lib\\m.py").unwrap().as_str(), "lib/m.py");
    }

    #[test]
    fn refuses_every_escape() {
        for bad in [
            "../..",
            "../../etc/passwd",
            "/etc/passwd",
            "/repository/x",
            "/repo/../etc",
            "/repo/a/../../x",
            "/",
            "..\\..\\x",
        ] {
            assert!(
                matches!(r(bad), Err(RepoError::OutsideRoot { .. })),
                "{bad} -> {:?}",
                r(bad)
            );
        }
        assert!(matches!(r(""), Err(RepoError::InvalidPath { .. })));
        assert!(matches!(r("a\0b"), Err(RepoError::InvalidPath { .. })));
        assert!(matches!(
            RepoPath::new("/x"),
            Err(RepoError::InvalidPath { .. })
        ));
        assert!(matches!(
            RepoPath::new("a/../../x"),
            Err(RepoError::OutsideRoot { .. })
        ));
    }

    #[test]
    fn parent_join_and_prefix() {
        let p = RepoPath::new("a/b/c.py").unwrap();
        assert_eq!(p.parent().unwrap().as_str(), "a/b");
        assert_eq!(p.file_name(), "c.py");
        assert!(p.starts_with(&RepoPath::new("a/b").unwrap()));
        assert!(!p.starts_with(&RepoPath::new("a/bc").unwrap()));
        assert!(
            !RepoPath::new("a/bc")
                .unwrap()
                .starts_with(&RepoPath::new("a/b").unwrap())
        );
        assert_eq!(p.display_under("/repo"), "/repo/a/b/c.py");
        assert_eq!(RepoPath::root().display_under("/repo/"), "/repo");
        assert_eq!(RepoPath::root().parent(), None);
    }
}
