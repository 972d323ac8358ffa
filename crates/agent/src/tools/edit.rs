//! `Edit`: exact string replacement in one file.
//!
//! An empty `old_string` creates the file when it does not exist, or fills it when it exists
//! but is empty (as Claude Code's Edit does); a non-empty file is refused, since "replace
//! nothing" would silently mean "prepend" or "overwrite".

use super::args::{Args, Kind, Param, Spec};
use super::{resolve, text_file};
use crate::Repository;

pub(super) const SPEC: Spec = Spec {
    name: "Edit",
    description: "Performs exact string replacements in a file.\n\
\n\
Usage:\n\
- Read the file before editing it, so old_string is copied from its real content.\n\
- file_path must be an absolute path inside the repository (a relative path is taken from the repository root).\n\
- old_string must match the file exactly, including whitespace and indentation. When copying from Read's output, keep the exact indentation (tabs or spaces) that follows the line-number prefix (spaces, the line number, then a tab), and never include any part of that prefix in old_string or new_string.\n\
- The edit fails if old_string does not occur in the file, or occurs more than once while replace_all is false: then add surrounding lines to old_string to make it unique, or set replace_all to change every occurrence (handy for renaming a variable across the file).\n\
- old_string and new_string must differ.\n\
- An empty old_string creates the file with new_string as its content when the file does not exist yet (or is empty).\n\
- Prefer editing existing files to creating new ones.",
    params: &[
        Param::required(
            "file_path",
            Kind::String,
            "The absolute path of the file to modify",
        ),
        Param::required("old_string", Kind::String, "The exact text to replace"),
        Param::required(
            "new_string",
            Kind::String,
            "The text to replace it with (must be different from old_string)",
        ),
        Param::optional(
            "replace_all",
            Kind::Boolean,
            "Replace every occurrence of old_string (default false)",
        ),
    ],
};

pub(super) fn run(repo: &mut dyn Repository, args: &Args) -> Result<String, String> {
    let (path, shown) = resolve(repo, args.text("file_path"))?;
    let (old, new) = (args.text("old_string"), args.text("new_string"));
    let replace_all = args.flag("replace_all").unwrap_or(false);
    if old == new {
        return Err("No changes to make: old_string and new_string are exactly the same.".into());
    }
    let existing = text_file(repo, &path, "Edit changes")?;
    let write = |repo: &mut dyn Repository, text: &str| {
        repo.write(&path, text.as_bytes())
            .map_err(|e| e.to_string())
    };

    if old.is_empty() {
        return match existing {
            None => {
                write(repo, new)?;
                Ok(format!("File created successfully at: {shown}"))
            }
            Some(data) if data.is_empty() => {
                write(repo, new)?;
                Ok(format!("The file {shown} has been updated."))
            }
            Some(_) => Err(format!(
                "old_string is empty but {shown} already has content. An empty old_string only \
                 creates a new (or empty) file; to change this one, give the exact text to replace."
            )),
        };
    }

    let data = existing.ok_or_else(|| format!("File does not exist: {shown}"))?;
    let text = String::from_utf8(data)
        .map_err(|_| format!("{shown} is not valid UTF-8 text; Edit changes UTF-8 files only."))?;

    let (old, new) = match crlf_forms(&text, old, new) {
        Some(forms) => forms,
        None => (old.to_string(), new.to_string()),
    };
    let count = text.matches(old.as_str()).count();
    if count == 0 {
        return Err(not_found(&shown, &old));
    }
    if count > 1 && !replace_all {
        return Err(format!(
            "Found {count} matches of old_string in {shown}, but replace_all is false. To replace \
             every occurrence, set replace_all to true. To replace only one, add surrounding \
             lines to old_string so that it matches exactly once."
        ));
    }
    write(repo, &text.replace(old.as_str(), &new))?;
    let plural = if count == 1 { "" } else { "s" };
    Ok(format!(
        "The file {shown} has been updated: {count} replacement{plural} made."
    ))
}

/// Read shows lines without their `\r`, so an old_string copied from a CRLF file has bare `\n`.
/// When it only matches with `\r\n` line ends, both strings are edited in that form.
fn crlf_forms(text: &str, old: &str, new: &str) -> Option<(String, String)> {
    if text.contains(old) || !old.contains('\n') || old.contains('\r') || !text.contains("\r\n") {
        return None;
    }
    let crlf = |s: &str| s.replace('\n', "\r\n");
    let old = crlf(old);
    text.contains(&old).then(|| (old, crlf(new)))
}

fn not_found(shown: &str, old: &str) -> String {
    // The most common miss: lines copied from Read with their `   12\t` prefix.
    let prefixed = old.lines().next().is_some_and(|line| {
        let rest = line.trim_start_matches(' ');
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        digits > 0 && rest[digits..].starts_with('\t')
    });
    let hint = if prefixed {
        " old_string seems to start with Read's line-number prefix (spaces, a number, a tab): \
         give only the file's text after the tab."
    } else {
        " It must match exactly, including whitespace and indentation: Read the file again and \
         copy the text."
    };
    format!("String to replace not found in {shown}.{hint}")
}
