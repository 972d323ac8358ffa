//! Unified patches between snapshots, in the format `git diff` writes and `git apply` reads: a
//! session's changes can be shown or downloaded as a patch, and a patch (from the model or from
//! git) applied to a repository.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use std::time::Duration;

use diffy::patch_set::{FileOperation, ParseOptions, PatchKind, PatchSet};

use similar::{Algorithm, TextDiff};

use crate::{RepoError, RepoPath, Snapshot};

/// How a file differs between a baseline and the current state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

/// A `git diff`-style patch turning `baseline` into `current`, one section per changed file in
/// path order. Files that are not UTF-8 text (or hold NUL bytes) get git's
/// `Binary files … differ` line, which names the change but carries no contents.
pub fn diff(baseline: &Snapshot, current: &Snapshot) -> String {
    diff_between(baseline, current)
}

/// Applies a unified patch (git's extended format or plain `---`/`+++` sections) to `snapshot`.
/// Either every file section applies or `snapshot` is left untouched; the error names the file
/// and hunk that failed.
pub fn apply(snapshot: &mut Snapshot, patch: &str) -> Result<(), RepoError> {
    let planned = plan(patch, |p| snapshot.get(p).map(Vec::as_slice))?;
    for (path, content) in planned {
        match content {
            Some(data) => snapshot.insert(path, data),
            None => snapshot.remove(&path),
        };
    }
    Ok(())
}

/// [`Change`]s between two maps of file contents, in path order. Generic over the value so a
/// repository can compare borrowed contents without copying them into a [`Snapshot`].
pub fn changes_between<A: AsRef<[u8]>, B: AsRef<[u8]>>(
    baseline: &BTreeMap<RepoPath, A>,
    current: &BTreeMap<RepoPath, B>,
) -> Vec<(RepoPath, Change)> {
    let mut out: Vec<_> = baseline
        .iter()
        .filter_map(|(path, old)| match current.get(path) {
            None => Some((path.clone(), Change::Deleted)),
            Some(new) if new.as_ref() != old.as_ref() => Some((path.clone(), Change::Modified)),
            Some(_) => None,
        })
        .collect();
    out.extend(
        current
            .keys()
            .filter(|p| !baseline.contains_key(*p))
            .map(|p| (p.clone(), Change::Added)),
    );
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// [`diff`] over borrowed or owned contents.
pub fn diff_between<A: AsRef<[u8]>, B: AsRef<[u8]>>(
    baseline: &BTreeMap<RepoPath, A>,
    current: &BTreeMap<RepoPath, B>,
) -> String {
    let mut out = String::new();
    for (path, _) in changes_between(baseline, current) {
        let old = baseline.get(&path).map(AsRef::as_ref);
        let new = current.get(&path).map(AsRef::as_ref);
        file_diff(&mut out, &path, old, new);
    }
    out
}

const DEV_NULL: &str = "/dev/null";

/// Stands for contents that were not kept (a file too large to track whole): it reads as
/// binary, so its change is named the way git names a binary change, without contents.
pub(crate) const UNKEPT: &[u8] = b"\0";

/// How long one file's line diff may search for the shortest edit; past it the diff is coarser
/// (more lines removed and re-added) but still applies exactly.
const DIFF_TIMEOUT: Duration = Duration::from_millis(500);

/// One file's section: `old`/`new` are `None` where the file does not exist.
pub(crate) fn file_diff(out: &mut String, path: &RepoPath, old: Option<&[u8]>, new: Option<&[u8]>) {
    let a = format!("a/{}", path.as_str());
    let b = format!("b/{}", path.as_str());
    // Writing to a String cannot fail.
    let _ = writeln!(out, "diff --git {} {}", quote(&a), quote(&b));
    match (old, new) {
        (None, _) => out.push_str("new file mode 100644\n"),
        (_, None) => out.push_str("deleted file mode 100644\n"),
        _ => {}
    }
    let old_name = if old.is_some() { a } else { DEV_NULL.into() };
    let new_name = if new.is_some() { b } else { DEV_NULL.into() };
    match (
        as_text(old.unwrap_or_default()),
        as_text(new.unwrap_or_default()),
    ) {
        // An empty file created or deleted: git writes the header alone.
        (Some(""), Some("")) => {}
        (Some(old_text), Some(new_text)) => {
            // The `---`/`+++` lines are written here as git writes them: a name holding a space
            // ends with a tab, so tools reading up to a tab get it whole. The hunks follow them.
            let tab = |name: &str| if name.contains(' ') { "\t" } else { "" };
            let _ = writeln!(out, "--- {}{}", quote(&old_name), tab(&old_name));
            let _ = writeln!(out, "+++ {}{}", quote(&new_name), tab(&new_name));
            if has_bare_cr(old_text) || has_bare_cr(new_text) {
                // `similar` ends a line at a lone `\r`; git and the patch parser only at `\n`.
                // diffy splits as they do (without a deadline: such files are rare).
                let patch = diffy::DiffOptions::new()
                    .create_patch(old_text, new_text)
                    .to_string();
                out.extend(patch.splitn(3, '\n').skip(2));
            } else {
                let lines = TextDiff::configure()
                    .algorithm(Algorithm::Myers)
                    .timeout(DIFF_TIMEOUT)
                    .diff_lines(old_text, new_text);
                let _ = write!(out, "{}", lines.unified_diff().context_radius(3));
            }
        }
        _ => {
            let _ = writeln!(
                out,
                "Binary files {} and {} differ",
                quote(&old_name),
                quote(&new_name)
            );
        }
    }
}

/// Whether `text` holds a `\r` that does not start a `\r\n`.
fn has_bare_cr(text: &str) -> bool {
    text.match_indices('\r')
        .any(|(i, _)| text.as_bytes().get(i + 1) != Some(&b'\n'))
}

/// Text as git sees it: NUL bytes make a file binary. Other invalid UTF-8 is treated as binary
/// too, since a patch here is a `str`.
fn as_text(data: &[u8]) -> Option<&str> {
    if data.contains(&0) {
        return None;
    }
    std::str::from_utf8(data).ok()
}

/// Git's C-style quoting for names holding control characters, `"` or `\`; other names are
/// written as they are.
fn quote(name: &str) -> String {
    let needs_quoting = |b: u8| b < 0x20 || b == 0x7f || b == b'"' || b == b'\\';
    if !name.bytes().any(needs_quoting) {
        return name.into();
    }
    let mut out = String::from("\"");
    for ch in name.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\{:03o}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What applying `patch` would do, without doing it: the new contents of every file it touches
/// (`None` for a deleted file). `read` gives a file's current contents. Sections apply in order,
/// each seeing the results of the ones before.
pub(crate) fn plan<'a>(
    patch: &str,
    read: impl Fn(&RepoPath) -> Option<&'a [u8]>,
) -> Result<BTreeMap<RepoPath, Option<Vec<u8>>>, RepoError> {
    // Git's format has `diff --git` headers; without one the sections are plain unified diffs.
    let format = if patch.lines().any(|l| l.starts_with("diff --git ")) {
        ParseOptions::gitdiff()
    } else {
        ParseOptions::unidiff()
    };
    let mut planned: BTreeMap<RepoPath, Option<Vec<u8>>> = BTreeMap::new();
    let current =
        |planned: &BTreeMap<RepoPath, Option<Vec<u8>>>, path: &RepoPath| -> Option<Vec<u8>> {
            match planned.get(path) {
                Some(staged) => staged.clone(),
                None => read(path).map(<[u8]>::to_vec),
            }
        };
    for section in PatchSet::parse_bytes(patch.as_bytes(), format) {
        let section = section.map_err(|e| RepoError::Patch(e.to_string()))?;
        let kind = section.patch();
        match section.operation() {
            FileOperation::Create(name) => {
                let path = patch_path(name, true)?;
                if current(&planned, &path).is_some() {
                    return Err(RepoError::Patch(format!(
                        "`{path}` already exists, but the patch creates it"
                    )));
                }
                let data = patched(&path, &[], kind)?;
                planned.insert(path, Some(data));
            }
            FileOperation::Delete(name) => {
                let path = patch_path(name, true)?;
                let old = existing(current(&planned, &path), &path)?;
                // A text deletion lists every line: what is left over was changed since.
                if let PatchKind::Text(_) = kind
                    && !patched(&path, &old, kind)?.is_empty()
                {
                    return Err(RepoError::Patch(format!(
                        "`{path}` has lines the patch does not delete; it changed since the patch was made"
                    )));
                }
                planned.insert(path, None);
            }
            FileOperation::Modify { original, modified } => {
                let original = patch_path(original, true)?;
                let modified = patch_path(modified, true)?;
                // Plain diffs may name a backup as the original (`x.orig` → `x`): patch the
                // one that exists, in place.
                let path = if current(&planned, &original).is_some() {
                    original
                } else {
                    modified
                };
                let old = existing(current(&planned, &path), &path)?;
                let data = patched(&path, &old, kind)?;
                planned.insert(path, Some(data));
            }
            FileOperation::Rename { from, to } | FileOperation::Copy { from, to } => {
                let is_rename = section.operation().is_rename();
                // `rename from`/`copy from` lines carry no `a/`/`b/` prefix.
                let from = patch_path(from, false)?;
                let to = patch_path(to, false)?;
                let old = existing(current(&planned, &from), &from)?;
                if to != from && current(&planned, &to).is_some() {
                    return Err(RepoError::Patch(format!(
                        "`{to}` already exists, but the patch {} `{from}` onto it",
                        if is_rename { "renames" } else { "copies" }
                    )));
                }
                let data = patched(&to, &old, kind)?;
                if is_rename {
                    planned.insert(from, None);
                }
                planned.insert(to, Some(data));
            }
        }
    }
    Ok(planned)
}

fn existing(data: Option<Vec<u8>>, path: &RepoPath) -> Result<Vec<u8>, RepoError> {
    data.ok_or_else(|| {
        RepoError::Patch(format!("`{path}` does not exist, but the patch changes it"))
    })
}

fn patched(path: &RepoPath, old: &[u8], kind: &PatchKind<'_, [u8]>) -> Result<Vec<u8>, RepoError> {
    match kind {
        PatchKind::Text(patch) => diffy::apply_bytes(old, patch).map_err(|e| {
            RepoError::Patch(format!(
                "`{path}`: {e}: its context and removed lines are not in the file"
            ))
        }),
        PatchKind::Binary(_) => Err(RepoError::Patch(format!(
            "`{path}`: a binary change carries no contents a text patch can apply"
        ))),
    }
}

/// A file name from a patch as a repository path. `strip` drops git's `a/`/`b/` prefix, which
/// `---`/`+++` and `diff --git` names carry.
fn patch_path(name: &[u8], strip: bool) -> Result<RepoPath, RepoError> {
    let text = std::str::from_utf8(name).map_err(|_| {
        RepoError::Patch(format!(
            "file name `{}` is not UTF-8",
            String::from_utf8_lossy(name)
        ))
    })?;
    let text = match text.strip_prefix("a/").or_else(|| text.strip_prefix("b/")) {
        Some(rest) if strip => rest,
        _ => text,
    };
    let path = RepoPath::new(text).map_err(|e| RepoError::Patch(format!("file `{text}`: {e}")))?;
    if path.is_root() {
        return Err(RepoError::Patch(format!(
            "file name `{text}` names no file"
        )));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(files: &[(&str, &str)]) -> Snapshot {
        files
            .iter()
            .map(|(p, d)| (RepoPath::new(p).unwrap(), d.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn diff_then_apply_round_trips() {
        let old = snap(&[("a.txt", "1\n2\n3\n"), ("gone.txt", "x"), ("same", "s\n")]);
        let new = snap(&[
            ("a.txt", "1\nTWO\n3"),
            ("new/b.txt", "b\n"),
            ("same", "s\n"),
        ]);
        let patch = diff(&old, &new);
        assert!(patch.contains("\\ No newline at end of file\n"), "{patch}");
        assert!(
            !patch.contains("same"),
            "unchanged files have no section: {patch}"
        );
        let mut applied = old.clone();
        apply(&mut applied, &patch).unwrap();
        assert_eq!(applied, new);
    }

    /// A whole file rewritten (every line different, shifted): the diff's search is cut off by
    /// its deadline at worst, and the patch still turns one into the other exactly.
    #[test]
    fn a_rewritten_long_file_diffs_and_applies() {
        let old: String = (0..40_000).map(|i| format!("line {i}\n")).collect();
        let new: String = (0..40_000)
            .map(|i| format!("row {}\n", (i * 7919) % 40_000))
            .collect();
        let (old, new) = (snap(&[("big.txt", &old)]), snap(&[("big.txt", &new)]));
        let patch = diff(&old, &new);
        let mut applied = old.clone();
        apply(&mut applied, &patch).unwrap();
        assert_eq!(applied, new);
    }

    /// A lone `\r` is part of its line, as git sees it; CRLF line ends survive too.
    #[test]
    fn carriage_returns_stay_inside_their_lines() {
        for (old, new) in [
            ("a\rb\n", "a\rc\n"),
            ("x\ry", "x\rz"),
            ("one\r\ntwo\r\n", "one\r\nTWO\r\n"),
        ] {
            let before = snap(&[("f.txt", old), ("g.txt", "g\n")]);
            let after = snap(&[("f.txt", new), ("g.txt", "G\n")]);
            let patch = diff(&before, &after);
            let mut applied = before.clone();
            apply(&mut applied, &patch).unwrap();
            assert_eq!(applied, after, "{patch:?}");
        }
    }

    #[test]
    fn quotes_names_like_git() {
        assert_eq!(quote("a/plain name.txt"), "a/plain name.txt");
        assert_eq!(quote("a/tab\there\"\\"), "\"a/tab\\there\\\"\\\\\"");
        assert_eq!(quote("a/\u{1}"), "\"a/\\001\"");
    }

    #[test]
    fn failed_hunk_names_file_and_leaves_snapshot_alone() {
        let mut s = snap(&[("ok.txt", "a\n"), ("bad.txt", "x\n")]);
        let patch = "--- a/ok.txt\n+++ b/ok.txt\n@@ -1 +1 @@\n-a\n+A\n\
                     --- a/bad.txt\n+++ b/bad.txt\n@@ -1 +1 @@\n-y\n+Y\n";
        let err = apply(&mut s, patch).unwrap_err().to_string();
        assert!(err.contains("bad.txt") && err.contains("hunk #1"), "{err}");
        assert_eq!(s, snap(&[("ok.txt", "a\n"), ("bad.txt", "x\n")]));
    }
}
