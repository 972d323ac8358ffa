//! `grep` with GNU's output: `file:line:text`, context groups separated by `--`, counts,
//! file lists, recursive search with `--include`/`--exclude`.

use regex::bytes::Regex;

use super::posix_regex::compile;
use super::{Ctx, errno, parse_opts, spelled_under, split_lines};
use crate::virtual_shell::glob;
use crate::virtual_shell::interp::{Exec, Flow};
use lilypad_repo::{EntryKind, RepoPath};

struct Settings {
    re: Regex,
    invert: bool,
    word: bool,
    count: bool,
    files_with: bool,
    files_without: bool,
    only: bool,
    quiet: bool,
    line_numbers: bool,
    byte_offset: bool,
    with_name: bool,
    max_count: Option<u64>,
    before: usize,
    after: usize,
    text: bool,
    null: bool,
}

/// State across files: whether a `--` is due before the next context group.
struct Out {
    printed_any: bool,
    selected_any: bool,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Matches in `line` (for `-w`, only those standing as whole words).
fn find_matches(s: &Settings, line: &[u8], all: bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos <= line.len() {
        let Some(m) = s.re.find_at(line, pos) else {
            break;
        };
        let ok = !s.word
            || ((m.start() == 0 || !is_word_byte(line[m.start() - 1]))
                && (m.end() == line.len() || !is_word_byte(line[m.end()]))
                && m.start() != m.end());
        if ok {
            out.push((m.start(), m.end()));
            if !all {
                break;
            }
        }
        pos = if m.end() > m.start() && ok {
            m.end()
        } else {
            m.start() + 1
        };
    }
    out
}

impl Ctx<'_, '_> {
    /// Searches one file's bytes; returns whether a line was selected.
    fn grep_data(
        &mut self,
        s: &Settings,
        name: &str,
        data: &[u8],
        out: &mut Out,
    ) -> Result<bool, Flow> {
        let (lines, _) = split_lines(data);
        self.tick(lines.len() as u64)?;
        let binary = !s.text && data.contains(&0);
        let selected: Vec<bool> = lines
            .iter()
            .map(|l| find_matches(s, l, false).is_empty() == s.invert)
            .collect();
        let mut total = selected.iter().filter(|&&x| x).count() as u64;
        if let Some(m) = s.max_count {
            total = total.min(m);
        }
        let found = total > 0;
        let sep_name = if s.null { "\0" } else { ":" };
        if s.quiet {
            return Ok(found);
        }
        if s.count {
            let text = if s.with_name {
                format!("{name}{sep_name}{total}\n")
            } else {
                format!("{total}\n")
            };
            self.outs(&text);
            return Ok(found);
        }
        if s.files_with || s.files_without {
            if found == s.files_with {
                let end = if s.null { "\0" } else { "\n" };
                self.outs(&format!("{name}{end}"));
            }
            return Ok(found);
        }
        if binary {
            if found {
                self.err(format_args!("grep: {name}: binary file matches"));
            }
            return Ok(found);
        }
        let mut offsets = Vec::with_capacity(lines.len());
        let mut off = 0usize;
        for l in &lines {
            offsets.push(off);
            off += l.len() + 1;
        }
        let mut buf: Vec<u8> = Vec::new();
        let mut last_printed: Option<usize> = None;
        let mut after_left = 0usize;
        let mut emitted = 0u64;
        let prefix = |buf: &mut Vec<u8>, i: usize, sep: u8| {
            if s.with_name {
                buf.extend_from_slice(name.as_bytes());
                buf.push(if s.null { 0 } else { sep });
            }
            if s.line_numbers {
                buf.extend_from_slice(format!("{}", i + 1).as_bytes());
                buf.push(sep);
            }
            if s.byte_offset {
                buf.extend_from_slice(format!("{}", offsets[i]).as_bytes());
                buf.push(sep);
            }
        };
        for (i, line) in lines.iter().enumerate() {
            if s.max_count.is_some_and(|m| emitted >= m) {
                // After the last allowed match only trailing context remains.
                if after_left > 0 && !selected[i] {
                    prefix(&mut buf, i, b'-');
                    buf.extend_from_slice(line);
                    buf.push(b'\n');
                    last_printed = Some(i);
                    after_left -= 1;
                    continue;
                }
                break;
            }
            if selected[i] {
                let from = i
                    .saturating_sub(s.before)
                    .max(last_printed.map_or(0, |l| l + 1));
                let gap = last_printed.map_or(out.printed_any, |l| from > l + 1);
                if (s.before > 0 || s.after > 0) && gap && out.printed_any {
                    buf.extend_from_slice(b"--\n");
                }
                for (j, ctx_line) in lines.iter().enumerate().take(i).skip(from) {
                    prefix(&mut buf, j, b'-');
                    buf.extend_from_slice(ctx_line);
                    buf.push(b'\n');
                }
                if s.only {
                    if !s.invert {
                        for (a, b) in find_matches(s, line, true) {
                            if a == b {
                                continue;
                            }
                            prefix(&mut buf, i, b':');
                            buf.extend_from_slice(&line[a..b]);
                            buf.push(b'\n');
                        }
                    }
                } else {
                    prefix(&mut buf, i, b':');
                    buf.extend_from_slice(line);
                    buf.push(b'\n');
                }
                out.printed_any = true;
                last_printed = Some(i);
                after_left = s.after;
                emitted += 1;
            } else if after_left > 0 {
                prefix(&mut buf, i, b'-');
                buf.extend_from_slice(line);
                buf.push(b'\n');
                last_printed = Some(i);
                after_left -= 1;
            }
        }
        self.out(&buf);
        Ok(found)
    }
}

/// `-5` means `-C 5`.
fn normalize_context(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut options_done = false;
    for a in args {
        options_done |= a == "--";
        if !options_done
            && a.len() > 1
            && a.starts_with('-')
            && a[1..].chars().all(|c| c.is_ascii_digit())
        {
            out.push("-C".into());
            out.push(a[1..].to_string());
        } else {
            out.push(a.clone());
        }
    }
    out
}

pub(super) fn grep(ctx: &mut Ctx<'_, '_>, args: &[String], mode: Option<char>) -> Exec {
    let args = normalize_context(args);
    let opts = match parse_opts(
        &args,
        "E|extended-regexp F|fixed-strings G|basic-regexp P|perl-regexp e|regexp= f|file= i|ignore-case y \
         no-ignore-case v|invert-match w|word-regexp x|line-regexp c|count l|files-with-matches \
         L|files-without-match o|only-matching q|quiet|silent s|no-messages n|line-number H|with-filename \
         h|no-filename r|recursive R|dereference-recursive include= exclude= exclude-dir= m|max-count= \
         A|after-context= B|before-context= C|context= color? colour? a|text I b|byte-offset Z|null \
         T|initial-tab line-buffered U|binary binary-files= label= d|directories= D|devices= no-messages",
    ) {
        Ok(o) => o,
        Err(e) => {
            ctx.err(format_args!("grep: {e}"));
            ctx.err("Usage: grep [OPTION]... PATTERNS [FILE]...");
            ctx.err("Try 'grep --help' for more information.");
            return Ok(2);
        }
    };
    let mut operands = opts.operands.clone();
    let mut patterns: Vec<String> = opts.values("e").map(str::to_string).collect();
    for file in opts.values("f").map(str::to_string).collect::<Vec<_>>() {
        match ctx.read_operand(&file) {
            Ok(d) => patterns.extend(String::from_utf8_lossy(&d).lines().map(str::to_string)),
            Err(e) => {
                ctx.err(format_args!("grep: {file}: {}", errno(&e)));
                return Ok(2);
            }
        }
    }
    if patterns.is_empty() {
        if operands.is_empty() {
            ctx.err("Usage: grep [OPTION]... PATTERNS [FILE]...");
            ctx.err("Try 'grep --help' for more information.");
            return Ok(2);
        }
        patterns.push(operands.remove(0));
    }
    let patterns: Vec<String> = patterns
        .iter()
        .flat_map(|p| p.split('\n').map(str::to_string).collect::<Vec<_>>())
        .collect();
    // The last of -E/-F/-G/-P wins; egrep/fgrep start from their mode.
    let syntax = opts
        .list
        .iter()
        .rev()
        .find_map(|(k, _)| ["E", "F", "G", "P"].contains(k).then_some(*k))
        .map_or(mode.unwrap_or('G'), |k| k.chars().next().unwrap_or('G'));
    let nocase = opts
        .list
        .iter()
        .rev()
        .find(|(k, _)| *k == "i" || *k == "y" || *k == "no-ignore-case")
        .is_some_and(|(k, _)| *k != "no-ignore-case");
    let re = match compile(
        &patterns,
        syntax == 'E',
        syntax == 'F',
        syntax == 'P',
        nocase,
        opts.has("x"),
    ) {
        Ok(r) => r,
        Err(e) => {
            ctx.err(format_args!("grep: {e}"));
            return Ok(2);
        }
    };
    let num = |ctx: &mut Ctx<'_, '_>, key: &str, what: &str| -> Result<Option<usize>, i32> {
        match opts.value(key) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ctx.err(format_args!("grep: {v}: invalid {what} argument"));
                2
            }),
        }
    };
    let (context, before, after, max_count) = match (
        num(ctx, "C", "context length"),
        num(ctx, "B", "context length"),
        num(ctx, "A", "context length"),
        num(ctx, "m", "max count"),
    ) {
        (Ok(c), Ok(b), Ok(a), Ok(m)) => (c, b, a, m),
        _ => return Ok(2),
    };
    let recursive = opts.has("r") || opts.has("R") || opts.value("d") == Some("recurse");
    let implicit_dot = operands.is_empty() && recursive;
    if operands.is_empty() {
        operands.push(if recursive { ".".into() } else { "-".into() });
    }
    let any_dir = recursive && operands.iter().any(|o| ctx.kind(o) == Some(EntryKind::Dir));
    let with_name = if opts.has("H") || opts.has("h") {
        opts.list
            .iter()
            .rev()
            .find(|(k, _)| *k == "H" || *k == "h")
            .is_some_and(|(k, _)| *k == "H")
    } else {
        operands.len() > 1 || any_dir
    };
    let s = Settings {
        re,
        invert: opts.has("v"),
        word: opts.has("w"),
        count: opts.has("c"),
        files_with: opts.has("l"),
        files_without: opts.has("L"),
        only: opts.has("o"),
        quiet: opts.has("q"),
        line_numbers: opts.has("n"),
        byte_offset: opts.has("b"),
        with_name,
        max_count: max_count.map(|m| m as u64),
        before: before.or(context).unwrap_or(0),
        after: after.or(context).unwrap_or(0),
        text: opts.has("a") || opts.value("binary-files") == Some("text"),
        null: opts.has("Z"),
    };
    let includes: Vec<&str> = opts.values("include").collect();
    let excludes: Vec<&str> = opts.values("exclude").collect();
    let exclude_dirs: Vec<&str> = opts.values("exclude-dir").collect();
    let wanted_file = |name: &str| {
        let base = name.rsplit('/').next().unwrap_or(name);
        (includes.is_empty() || includes.iter().any(|g| glob::matches(g, base)))
            && !excludes.iter().any(|g| glob::matches(g, base))
    };
    let quiet_errors = opts.has("s");
    let mut out = Out {
        printed_any: false,
        selected_any: false,
    };
    let mut error = false;
    for operand in &operands {
        if operand == "-" {
            let data = ctx.stdin();
            let label = opts
                .value("label")
                .unwrap_or("(standard input)")
                .to_string();
            out.selected_any |= ctx.grep_data(&s, &label, &data, &mut out)?;
            continue;
        }
        let found = ctx
            .resolve(operand)
            .ok()
            .and_then(|p| ctx.sh.repo.kind(&p).map(|k| (p, k)));
        let Some((path, kind)) = found else {
            if !quiet_errors {
                let why = ctx
                    .resolve(operand)
                    .err()
                    .map_or("No such file or directory".to_string(), |e| errno(&e));
                ctx.err(format_args!("grep: {operand}: {why}"));
            }
            error = true;
            continue;
        };
        if kind == EntryKind::Dir {
            if !recursive {
                if opts.value("d") != Some("skip") && !quiet_errors {
                    ctx.err(format_args!("grep: {operand}: Is a directory"));
                    error = true;
                }
                continue;
            }
            let files = grep_walk(ctx, &path, &exclude_dirs)?;
            for file in files {
                let mut shown = spelled_under(operand, &path, &file);
                if implicit_dot {
                    shown = shown.trim_start_matches("./").to_string();
                }
                if !wanted_file(&shown) {
                    continue;
                }
                let Ok(data) = ctx.sh.repo.read(&file) else {
                    continue;
                };
                out.selected_any |= ctx.grep_data(&s, &shown, &data, &mut out)?;
                if s.quiet && out.selected_any {
                    return Ok(0);
                }
            }
            continue;
        }
        if !wanted_file(operand) {
            continue;
        }
        match ctx.sh.repo.read(&path) {
            Ok(data) => out.selected_any |= ctx.grep_data(&s, operand, &data, &mut out)?,
            Err(e) => {
                if !quiet_errors {
                    ctx.err(format_args!("grep: {operand}: {}", errno(&e)));
                }
                error = true;
            }
        }
        if s.quiet && out.selected_any {
            return Ok(0);
        }
    }
    Ok(if s.quiet && out.selected_any {
        0
    } else if error {
        2
    } else if out.selected_any {
        0
    } else {
        1
    })
}

/// Files below `dir` in name order, leaving out folders that `--exclude-dir` names.
fn grep_walk(
    ctx: &mut Ctx<'_, '_>,
    dir: &RepoPath,
    exclude_dirs: &[&str],
) -> Result<Vec<RepoPath>, Flow> {
    let entries = ctx.walk(dir)?;
    let mut skipped: Vec<RepoPath> = Vec::new();
    let mut files = Vec::new();
    for (p, kind) in entries {
        if skipped.iter().any(|s| p.starts_with(s)) {
            continue;
        }
        match kind {
            EntryKind::Dir
                if p != *dir && exclude_dirs.iter().any(|g| glob::matches(g, p.file_name())) =>
            {
                skipped.push(p)
            }
            EntryKind::Dir => {}
            EntryKind::File => files.push(p),
        }
    }
    Ok(files)
}
