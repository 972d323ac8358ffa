//! `Write`: creates or replaces a whole file.

use super::args::{Args, Kind, Param, Spec};
use super::resolve;
use crate::{EntryKind, Repository};

pub(super) const SPEC: Spec = Spec {
    name: "Write",
    description: "Writes a file in the repository.\n\
\n\
Usage:\n\
- file_path must be an absolute path inside the repository (a relative path is taken from the repository root). Missing parent directories are created.\n\
- This tool overwrites the existing file if there is one at that path, replacing all of its content. Read an existing file before overwriting it.\n\
- Prefer Edit for changing part of an existing file: it sends only the changed text.\n\
- Do not create files the task does not need (such as documentation or notes files).",
    params: &[
        Param::required(
            "file_path",
            Kind::String,
            "The absolute path of the file to write (must be inside the repository)",
        ),
        Param::required(
            "content",
            Kind::String,
            "The complete content to write to the file",
        ),
    ],
};

pub(super) fn run(repo: &mut dyn Repository, args: &Args) -> Result<String, String> {
    let (path, shown) = resolve(repo, args.text("file_path"))?;
    let existed = repo.kind(&path) == Some(EntryKind::File);
    repo.write(&path, args.text("content").as_bytes())
        .map_err(|e| e.to_string())?;
    Ok(if existed {
        format!("The file {shown} has been updated.")
    } else {
        format!("File created successfully at: {shown}")
    })
}
