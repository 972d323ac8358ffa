//! `Read`: a file's lines numbered as `cat -n` prints them.

use super::args::{Args, Kind, Param, Spec};
use super::{resolve, text_file};
use crate::Repository;

pub(super) const DEFAULT_LIMIT: u64 = 2000;
pub(super) const MAX_LINE_CHARS: usize = 2000;
pub(super) const MAX_OUTPUT_CHARS: usize = 20_000;

pub(super) const SPEC: Spec = Spec {
    name: "Read",
    description: "Reads a file from the repository.\n\
\n\
Usage:\n\
- file_path must be an absolute path inside the repository (a relative path is taken from the repository root).\n\
- By default it reads up to 2000 lines from the start of the file. For long files you can pass offset (the line number to start at, counting from 1) and limit (how many lines to read); otherwise prefer reading the whole file.\n\
- Lines longer than 2000 characters are cut, and one call returns at most 20,000 characters; the reply then says where it stopped and which offset reads on.\n\
- Results are in `cat -n` format: each line starts with its line number, right-aligned in 6 columns, and a tab. That prefix is not part of the file: never copy it into Edit's old_string or new_string.\n\
- Reads files, not directories: use Glob to find or list files, or Bash with `ls`.\n\
- Reading a file that does not exist returns an error, so it is fine to try a path.",
    params: &[
        Param::required(
            "file_path",
            Kind::String,
            "The absolute path of the file to read",
        ),
        Param::optional(
            "offset",
            Kind::Integer,
            "The line number to start reading from (1 is the first line). Only give it for files too long to read at once",
        ),
        Param::optional(
            "limit",
            Kind::Integer,
            "The number of lines to read (default 2000). Only give it for files too long to read at once",
        ),
    ],
};

pub(super) fn run(repo: &dyn Repository, args: &Args) -> Result<String, String> {
    let (path, shown) = resolve(repo, args.text("file_path"))?;
    let data = text_file(repo, &path, "Read shows")?
        .ok_or_else(|| format!("File does not exist: {shown}"))?;
    if data.is_empty() {
        return Ok(format!("The file {shown} exists but is empty."));
    }
    // Invalid UTF-8 in an otherwise textual file (a Latin-1 comment) shows as U+FFFD rather than
    // hiding the whole file.
    let text = String::from_utf8_lossy(&data);
    // 0 is taken as the first line: the model means "from the start".
    let first = args.count("offset").unwrap_or(1).max(1);
    let limit = args.count("limit").unwrap_or(DEFAULT_LIMIT);
    if limit == 0 {
        return Err("limit must be at least 1 line.".into());
    }
    let total = text.lines().count() as u64;
    if first > total {
        return Err(format!(
            "{shown} has {total} lines, fewer than offset {first}. Use a smaller offset."
        ));
    }

    let mut out = String::new();
    let mut out_chars = 0;
    let mut last = first - 1;
    let mut full = false;
    for (number, line) in (1..)
        .zip(text.lines())
        .skip((first - 1) as usize)
        .take(limit as usize)
    {
        let entry = format!("{number:>6}\t{}\n", cut_line(line));
        let chars = entry.chars().count();
        if out_chars + chars > MAX_OUTPUT_CHARS {
            full = true;
            break;
        }
        out.push_str(&entry);
        out_chars += chars;
        last = number;
    }
    out.pop();
    if full {
        out.push_str(&format!(
            "\n\n[Output cut at {MAX_OUTPUT_CHARS} characters: showed lines {first}-{last} of {total}. \
             Read on with offset={} (and a smaller limit if lines are long).]",
            last + 1
        ));
    } else if last < total {
        out.push_str(&format!(
            "\n\n[Showed lines {first}-{last} of {total}. Read on with offset={}.]",
            last + 1
        ));
    }
    Ok(out)
}

/// Lines past the limit are cut with a visible marker, so an Edit is not built from half a line.
fn cut_line(line: &str) -> String {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        None => line.to_string(),
        Some((end, _)) => format!(
            "{}... [line cut: {} more characters]",
            &line[..end],
            line[end..].chars().count()
        ),
    }
}
