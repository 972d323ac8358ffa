//! `Glob`: file paths matching a pattern, below a folder.

use globset::GlobBuilder;

use super::args::{Args, Kind, Param, Spec};
use super::resolve;
use crate::{EntryKind, RepoPath, Repository};

pub(super) const MAX_RESULTS: usize = 1000;

pub(super) const SPEC: Spec = Spec {
    name: "Glob",
    description: "Fast file pattern matching over the repository.\n\
\n\
Usage:\n\
- Supports glob patterns like \"**/*.py\" or \"src/**/*.ts\": `*` matches within one path component, `**` across directories, `?` one character, `[abc]` a class and `{a,b}` alternatives.\n\
- The pattern is matched against paths relative to `path` (or against absolute paths if it starts with the repository root).\n\
- Returns matching file paths as absolute paths, sorted, at most 1000 (the reply says when there were more).\n\
- Use it to find files by name; use Bash with `grep -rn` to search file contents.\n\
- Version-control folders such as .git are not searched.",
    params: &[
        Param::required(
            "pattern",
            Kind::String,
            "The glob pattern to match files against",
        ),
        Param::optional(
            "path",
            Kind::String,
            "The directory to search in, as an absolute path (default: the repository root). Omit it to search the whole repository",
        ),
    ],
};

pub(super) fn run(repo: &dyn Repository, args: &Args) -> Result<String, String> {
    let (dir, shown_dir) = resolve(repo, args.str("path").unwrap_or("."))?;
    match repo.kind(&dir) {
        None => return Err(format!("Directory does not exist: {shown_dir}")),
        Some(EntryKind::File) => {
            return Err(format!(
                "{shown_dir} is a file, not a directory; `path` must be a directory."
            ));
        }
        Some(EntryKind::Dir) => {}
    }
    let pattern = args.text("pattern");
    // An absolute pattern is matched against repository-relative paths, a relative one against
    // paths below `dir`.
    let root_prefix = format!("{}/", repo.root().trim_end_matches('/'));
    let (pattern, from_root) = match pattern.strip_prefix(&root_prefix) {
        Some(rest) => (rest, true),
        None if pattern.starts_with('/') => {
            return Err(format!(
                "pattern `{pattern}` is outside the repository root `{}`.",
                repo.root()
            ));
        }
        None => (pattern.strip_prefix("./").unwrap_or(pattern), false),
    };
    if pattern.is_empty() {
        return Err("pattern is empty; try \"**/*\" for every file.".into());
    }
    if pattern.split('/').any(|part| part == "..") {
        return Err(format!(
            "pattern `{pattern}` contains `..`; set `path` to the directory to search instead."
        ));
    }
    let matcher = GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("Invalid glob pattern: {e}"))?
        .compile_matcher();

    let skip = if dir.is_root() || from_root {
        0
    } else {
        dir.as_str().len() + 1
    };
    let mut found: Vec<RepoPath> = repo
        .walk_files(&dir)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|p| {
            p.as_str()
                .get(skip..)
                .is_some_and(|rel| matcher.is_match(rel))
        })
        .collect();
    if found.is_empty() {
        return Ok("No files found".into());
    }
    found.sort();
    let total = found.len();
    let mut out: Vec<String> = found
        .iter()
        .take(MAX_RESULTS)
        .map(|p| p.display_under(repo.root()))
        .collect();
    if total > MAX_RESULTS {
        out.push(format!(
            "(Results are truncated: showing the first {MAX_RESULTS} of {total} files. Use a more \
             specific path or pattern.)"
        ));
    }
    Ok(out.join("\n"))
}
