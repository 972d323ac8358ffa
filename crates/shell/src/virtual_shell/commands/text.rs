//! Text filters: cat, head, tail, wc, sort, uniq, tr, cut, tee, seq.

use std::cmp::Ordering;

use super::{Ctx, errno, quote, quotef, split_lines};
use crate::virtual_shell::glob::class_has as glob_class_has;
use crate::virtual_shell::interp::Exec;
use lilypad_repo::{EntryKind, RepoError};

/// Reads every operand (stdin when none), reporting failures as `cmd: name: error`; returns
/// the (name, bytes) pairs that could be read and whether any failed.
fn read_inputs(
    ctx: &mut Ctx<'_, '_>,
    cmd: &str,
    operands: &[String],
) -> (Vec<(String, Vec<u8>)>, bool) {
    let names: Vec<String> = if operands.is_empty() {
        vec!["-".into()]
    } else {
        operands.to_vec()
    };
    let mut out = Vec::new();
    let mut failed = false;
    for name in names {
        match read_file_operand(ctx, &name) {
            Ok(d) => out.push((name, d)),
            Err(e) => {
                ctx.err(format_args!("{cmd}: {}: {}", quotef(&name), errno(&e)));
                failed = true;
            }
        }
    }
    (out, failed)
}

/// Like [`Ctx::read_operand`] but a folder is an error (`Is a directory`), as reading one is.
fn read_file_operand(ctx: &mut Ctx<'_, '_>, name: &str) -> Result<Vec<u8>, RepoError> {
    if !matches!(name, "-" | "/dev/null" | "/dev/stdin") && ctx.kind(name) == Some(EntryKind::Dir) {
        return Err(RepoError::IsADirectory(name.into()));
    }
    ctx.read_operand(name)
}

pub(super) fn cat(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "cat",
        args,
        "n|number b|number-nonblank E|show-ends A|show-all s|squeeze-blank T|show-tabs v|show-nonprinting e t u",
        1
    );
    let number_nonblank = opts.has("b");
    let number = opts.has("n") || number_nonblank;
    let ends = opts.has("E") || opts.has("A") || opts.has("e");
    let tabs = opts.has("T") || opts.has("A") || opts.has("t");
    let squeeze = opts.has("s");
    let plain = !number && !ends && !tabs && !squeeze;
    let names: Vec<String> = if opts.operands.is_empty() {
        vec!["-".into()]
    } else {
        opts.operands.clone()
    };
    let mut status = 0;
    let mut line_no = 0u64;
    let mut prev_blank = false;
    for name in names {
        let data = match read_file_operand(ctx, &name) {
            Ok(d) => d,
            Err(e) => {
                ctx.err(format_args!("cat: {}: {}", quotef(&name), errno(&e)));
                status = 1;
                continue;
            }
        };
        if plain {
            ctx.out(&data);
            continue;
        }
        let mut out = Vec::with_capacity(data.len() + data.len() / 8);
        for chunk in data.split_inclusive(|&b| b == b'\n') {
            ctx.tick(1)?;
            let (line, nl) = match chunk.strip_suffix(b"\n") {
                Some(l) => (l, true),
                None => (chunk, false),
            };
            let blank = line.is_empty();
            if squeeze && blank && prev_blank {
                continue;
            }
            prev_blank = blank;
            if number && !(number_nonblank && blank) {
                line_no += 1;
                out.extend_from_slice(format!("{line_no:6}\t").as_bytes());
            }
            for &b in line {
                if tabs && b == b'\t' {
                    out.extend_from_slice(b"^I");
                } else {
                    out.push(b);
                }
            }
            if nl {
                if ends {
                    out.push(b'$');
                }
                out.push(b'\n');
            }
        }
        ctx.out(&out);
    }
    Ok(status)
}

/// `-5` and tail's `+5` are old spellings of `-n 5` / `-n +5`.
fn normalize_count_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        let prev_takes_value =
            i > 0 && matches!(args[i - 1].as_str(), "-n" | "-c" | "--lines" | "--bytes");
        if !prev_takes_value && a.len() > 1 && a.starts_with('-') && digits(&a[1..]) {
            out.push("-n".into());
            out.push(a[1..].to_string());
        } else if !prev_takes_value && i == 0 && a.starts_with('+') && digits(&a[1..]) {
            out.push("-n".into());
            out.push(a.clone());
        } else {
            out.push(a.clone());
        }
    }
    out
}

pub(super) fn head_tail(ctx: &mut Ctx<'_, '_>, args: &[String], head: bool) -> Exec {
    let cmd = if head { "head" } else { "tail" };
    let args = normalize_count_args(args);
    let opts = opts!(
        ctx,
        cmd,
        &args,
        "n|lines= c|bytes= q|quiet|silent v|verbose f|follow F s|sleep-interval= z|zero-terminated",
        1
    );
    let bytes_mode = opts
        .list
        .iter()
        .rev()
        .find(|(k, _)| *k == "n" || *k == "c")
        .is_some_and(|(k, _)| *k == "c");
    let spec = if bytes_mode {
        opts.value("c")
    } else {
        opts.value("n")
    }
    .unwrap_or("10")
    .to_string();
    let (from_start, negative, count) = match parse_count(&spec) {
        Some(x) => x,
        None => {
            let what = if bytes_mode { "bytes" } else { "lines" };
            ctx.err(format_args!(
                "{cmd}: invalid number of {what}: {}",
                quote(&spec)
            ));
            return Ok(1);
        }
    };
    let names: Vec<String> = if opts.operands.is_empty() {
        vec!["-".into()]
    } else {
        opts.operands.clone()
    };
    let headers = !opts.has("q") && (names.len() > 1 || opts.has("v"));
    let mut status = 0;
    let mut first = true;
    for name in &names {
        let data = match read_file_operand(ctx, name) {
            Ok(d) => d,
            Err(RepoError::IsADirectory(_)) => {
                if headers {
                    let sep = if first { "" } else { "\n" };
                    ctx.outs(&format!("{sep}==> {name} <==\n"));
                    first = false;
                }
                ctx.err(format_args!(
                    "{cmd}: error reading {}: Is a directory",
                    quote(name)
                ));
                status = 1;
                continue;
            }
            Err(e) => {
                ctx.err(format_args!(
                    "{cmd}: cannot open {} for reading: {}",
                    quote(name),
                    errno(&e)
                ));
                status = 1;
                continue;
            }
        };
        if headers {
            let sep = if first { "" } else { "\n" };
            let shown = if name == "-" { "standard input" } else { name };
            ctx.outs(&format!("{sep}==> {shown} <==\n"));
        }
        first = false;
        ctx.tick(data.len() as u64 / 64)?;
        let slice: &[u8] = if bytes_mode {
            let n = count.min(data.len());
            match (head, negative, from_start) {
                (true, false, _) => &data[..n],
                (true, true, _) => &data[..data.len() - n],
                (false, _, true) => &data[count.saturating_sub(1).min(data.len())..],
                (false, _, false) => &data[data.len() - n..],
            }
        } else {
            // Offsets of line starts, so slicing keeps the bytes exactly.
            let mut starts = vec![0];
            starts.extend(
                data.iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'\n')
                    .map(|(i, _)| i + 1),
            );
            if starts.last() == Some(&data.len()) {
                starts.pop();
            }
            let lines = starts.len();
            let at = |i: usize| if i >= lines { data.len() } else { starts[i] };
            match (head, negative, from_start) {
                (true, false, _) => &data[..at(count)],
                (true, true, _) => &data[..at(lines.saturating_sub(count))],
                (false, _, true) => &data[at(count.saturating_sub(1))..],
                (false, _, false) => &data[at(lines.saturating_sub(count))..],
            }
        };
        ctx.out(slice);
    }
    Ok(status)
}

/// `N`, `-N` (head: all but the last N) or `+N` (tail: from the Nth), with GNU's size
/// suffixes: (from_start, negative, count).
fn parse_count(spec: &str) -> Option<(bool, bool, usize)> {
    let (from_start, negative, digits) = match spec.as_bytes().first()? {
        b'+' => (true, false, &spec[1..]),
        b'-' => (false, true, &spec[1..]),
        _ => (false, false, spec),
    };
    let split = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let n: usize = digits[..split].parse().ok()?;
    let mult: usize = match &digits[split..] {
        "" => 1,
        "b" => 512,
        "k" | "K" | "KiB" => 1024,
        "kB" => 1000,
        "M" | "MiB" => 1 << 20,
        "MB" => 1_000_000,
        "G" | "GiB" => 1 << 30,
        _ => return None,
    };
    Some((from_start, negative, n.saturating_mul(mult)))
}

pub(super) fn wc(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "wc",
        args,
        "l|lines w|words c|bytes m|chars L|max-line-length",
        1
    );
    let mut show: Vec<char> = ['l', 'w', 'm', 'c', 'L']
        .into_iter()
        .filter(|c| opts.has(&c.to_string()))
        .collect();
    if show.is_empty() {
        show = vec!['l', 'w', 'c'];
    }
    let names: Vec<String> = if opts.operands.is_empty() {
        vec!["-".into()]
    } else {
        opts.operands.clone()
    };
    let mut rows: Vec<(Option<[u64; 5]>, String)> = Vec::new();
    let mut status = 0;
    // Column width: digits of the total size of the regular files, at least 7 when a pipe
    // is among the inputs, 1 for a single count of a single file (GNU's rule).
    let mut regular_total = 0u64;
    let mut min_width = 1;
    for name in &names {
        let stdin_len = ctx.sh.input_file_len(ctx.fds.stdin);
        let data = match read_file_operand(ctx, name) {
            Ok(d) => d,
            Err(e) => {
                ctx.err(format_args!("wc: {}: {}", quotef(name), errno(&e)));
                status = 1;
                if matches!(e, RepoError::IsADirectory(_)) {
                    rows.push((Some([0; 5]), name.clone()));
                } else {
                    rows.push((None, name.clone()));
                }
                continue;
            }
        };
        match (name.as_str(), stdin_len) {
            ("-", Some(len)) => regular_total += len,
            ("-", None) => min_width = 7,
            _ => regular_total += data.len() as u64,
        }
        ctx.tick(data.len() as u64 / 64)?;
        let text = String::from_utf8_lossy(&data);
        let lines = data.iter().filter(|&&b| b == b'\n').count() as u64;
        let words = text
            .split(|c: char| c.is_whitespace())
            .filter(|w| !w.is_empty())
            .count() as u64;
        let chars = text.chars().count() as u64;
        let longest = text
            .split('\n')
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0) as u64;
        rows.push((
            Some([lines, words, chars, data.len() as u64, longest]),
            if name == "-" && opts.operands.is_empty() {
                String::new()
            } else {
                name.clone()
            },
        ));
    }
    let mut width = regular_total.to_string().len().max(min_width);
    if names.len() == 1 && show.len() == 1 {
        width = 1;
    }
    let col = |c: char| match c {
        'l' => 0,
        'w' => 1,
        'm' => 2,
        'c' => 3,
        _ => 4,
    };
    let mut total = [0u64; 5];
    let mut out = String::new();
    for (counts, name) in &rows {
        let Some(counts) = counts else { continue };
        for (i, t) in total.iter_mut().enumerate() {
            *t = if i == 4 {
                (*t).max(counts[i])
            } else {
                *t + counts[i]
            };
        }
        let cells: Vec<String> = show
            .iter()
            .map(|&c| format!("{:>width$}", counts[col(c)]))
            .collect();
        out.push_str(&cells.join(" "));
        if !name.is_empty() {
            out.push(' ');
            out.push_str(name);
        }
        out.push('\n');
    }
    if names.len() > 1 {
        let cells: Vec<String> = show
            .iter()
            .map(|&c| format!("{:>width$}", total[col(c)]))
            .collect();
        out.push_str(&cells.join(" "));
        out.push_str(" total\n");
    }
    ctx.outs(&out);
    Ok(status)
}

// ---- sort ----

#[derive(Clone, Copy, Default)]
struct KeyOpts {
    numeric: bool,
    general: bool,
    human: bool,
    version: bool,
    fold: bool,
    reverse: bool,
    blanks: bool,
    dictionary: bool,
}

impl KeyOpts {
    fn any(&self) -> bool {
        self.numeric
            || self.general
            || self.human
            || self.version
            || self.fold
            || self.reverse
            || self.blanks
            || self.dictionary
    }

    fn apply_letters(&mut self, letters: &str) -> bool {
        for c in letters.chars() {
            match c {
                'n' => self.numeric = true,
                'g' => self.general = true,
                'h' => self.human = true,
                'V' => self.version = true,
                'f' => self.fold = true,
                'r' => self.reverse = true,
                'b' => self.blanks = true,
                'd' => self.dictionary = true,
                _ => return false,
            }
        }
        true
    }
}

struct Key {
    start_field: usize,
    start_char: usize,
    end_field: Option<usize>,
    end_char: usize,
    opts: KeyOpts,
}

fn parse_key(spec: &str, global: KeyOpts) -> Option<Key> {
    let (start, end) = match spec.split_once(',') {
        Some((s, e)) => (s, Some(e)),
        None => (spec, None),
    };
    let pos = |s: &str| -> Option<(usize, usize, String)> {
        let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
        let (num, letters) = s.split_at(split);
        let (f, c) = match num.split_once('.') {
            Some((f, c)) => (f.parse().ok()?, c.parse().ok()?),
            None => (num.parse().ok()?, 0),
        };
        Some((f, c, letters.to_string()))
    };
    let (sf, sc, sl) = pos(start)?;
    if sf == 0 {
        return None;
    }
    let mut opts = KeyOpts::default();
    if !opts.apply_letters(&sl) {
        return None;
    }
    let (end_field, end_char) = match end {
        Some(e) => {
            let (ef, ec, el) = pos(e)?;
            if !opts.apply_letters(&el) {
                return None;
            }
            (Some(ef), ec)
        }
        None => (None, 0),
    };
    if !opts.any() {
        opts = global;
    }
    Some(Key {
        start_field: sf,
        start_char: sc.max(1),
        end_field,
        end_char,
        opts,
    })
}

/// Byte ranges of the fields of `line`: split at `sep`, or (by default) each field starts
/// with the blanks before it.
fn fields(line: &[u8], sep: Option<u8>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    match sep {
        Some(s) => {
            let mut start = 0;
            for (i, &b) in line.iter().enumerate() {
                if b == s {
                    out.push((start, i));
                    start = i + 1;
                }
            }
            out.push((start, line.len()));
        }
        None => {
            let mut i = 0;
            while i < line.len() {
                let start = i;
                while i < line.len() && (line[i] == b' ' || line[i] == b'\t') {
                    i += 1;
                }
                while i < line.len() && line[i] != b' ' && line[i] != b'\t' {
                    i += 1;
                }
                out.push((start, i));
            }
        }
    }
    out
}

fn key_slice<'l>(line: &'l [u8], key: &Key, sep: Option<u8>) -> &'l [u8] {
    let f = fields(line, sep);
    let skip_blanks = |mut p: usize, limit: usize| {
        while p < limit && (line[p] == b' ' || line[p] == b'\t') {
            p += 1;
        }
        p
    };
    let Some(&(fs, fe)) = f.get(key.start_field - 1) else {
        return &[];
    };
    let mut start = if key.opts.blanks || key.start_char > 1 && sep.is_none() {
        skip_blanks(fs, fe)
    } else {
        fs
    };
    start = (start + key.start_char - 1).min(fe);
    let end = match key.end_field {
        None => line.len(),
        Some(ef) => match f.get(ef.saturating_sub(1)) {
            None => line.len(),
            Some(&(es, ee)) => {
                if key.end_char == 0 {
                    ee
                } else {
                    let base = if key.opts.blanks {
                        skip_blanks(es, ee)
                    } else {
                        es
                    };
                    (base + key.end_char).min(ee)
                }
            }
        },
    };
    if end <= start { &[] } else { &line[start..end] }
}

fn leading_number(s: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(s);
    let t = text.trim_start();
    let mut end = 0;
    let b = t.as_bytes();
    if end < b.len() && (b[end] == b'-' || b[end] == b'+') {
        end += 1;
    }
    while end < b.len() && (b[end].is_ascii_digit() || b[end] == b'.') {
        end += 1;
    }
    t[..end].parse().unwrap_or(0.0)
}

fn human_number(s: &[u8]) -> f64 {
    let n = leading_number(s);
    let text = String::from_utf8_lossy(s);
    let t = text.trim_start().trim_start_matches(['-', '+']);
    let suffix = t
        .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
        .chars()
        .next();
    let exp = match suffix {
        Some('K' | 'k') => 1,
        Some('M') => 2,
        Some('G') => 3,
        Some('T') => 4,
        Some('P') => 5,
        Some('E') => 6,
        _ => 0,
    };
    n * 1024f64.powi(exp)
}

/// Natural order: runs of digits compare by value (`sort -V`).
fn version_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let si = i;
            while i < a.len() && a[i].is_ascii_digit() {
                i += 1;
            }
            let sj = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let na = String::from_utf8_lossy(&a[si..i])
                .trim_start_matches('0')
                .to_string();
            let nb = String::from_utf8_lossy(&b[sj..j])
                .trim_start_matches('0')
                .to_string();
            let o = na.len().cmp(&nb.len()).then_with(|| na.cmp(&nb));
            if o != Ordering::Equal {
                return o;
            }
        } else {
            let o = a[i].cmp(&b[j]);
            if o != Ordering::Equal {
                return o;
            }
            i += 1;
            j += 1;
        }
    }
    (a.len() - i).cmp(&(b.len() - j))
}

fn compare_with(a: &[u8], b: &[u8], o: &KeyOpts) -> Ordering {
    let ord = if o.numeric || o.general {
        leading_number(a)
            .partial_cmp(&leading_number(b))
            .unwrap_or(Ordering::Equal)
    } else if o.human {
        human_number(a)
            .partial_cmp(&human_number(b))
            .unwrap_or(Ordering::Equal)
    } else if o.version {
        version_cmp(a, b)
    } else {
        let norm = |s: &[u8]| -> Vec<u8> {
            s.iter()
                .copied()
                .filter(|c| !o.dictionary || c.is_ascii_alphanumeric() || *c == b' ' || *c == b'\t')
                .map(|c| if o.fold { c.to_ascii_uppercase() } else { c })
                .collect()
        };
        if o.fold || o.dictionary {
            norm(a).cmp(&norm(b))
        } else {
            a.cmp(b)
        }
    };
    if o.reverse { ord.reverse() } else { ord }
}

pub(super) fn sort(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "sort",
        args,
        "r|reverse n|numeric-sort u|unique f|ignore-case k|key= t|field-separator= h|human-numeric-sort \
         V|version-sort o|output= s|stable b|ignore-leading-blanks g|general-numeric-sort c|check d|dictionary-order \
         S|buffer-size= T|temporary-directory= parallel=",
        2
    );
    let mut global = KeyOpts::default();
    for (k, _) in &opts.list {
        global.apply_letters(k);
    }
    let sep = match opts.value("t") {
        Some(t) if t.len() == 1 => Some(t.as_bytes()[0]),
        Some("\\t") => Some(b'\t'),
        Some(t) => {
            ctx.err(format_args!("sort: multi-character tab {}", quote(t)));
            return Ok(2);
        }
        None => None,
    };
    let mut keys = Vec::new();
    for spec in opts.values("k") {
        match parse_key(spec, global) {
            Some(k) => keys.push(k),
            None => {
                ctx.err(format_args!(
                    "sort: invalid number at field start: invalid count at start of {}",
                    quote(spec)
                ));
                return Ok(2);
            }
        }
    }
    let (inputs, failed) = read_inputs(ctx, "sort", &opts.operands);
    if failed {
        return Ok(2);
    }
    let mut lines: Vec<&[u8]> = Vec::new();
    for (_, data) in &inputs {
        lines.extend(split_lines(data).0);
    }
    ctx.tick(lines.len() as u64)?;
    let stable = opts.has("s") || opts.has("u");
    let cmp = |a: &[u8], b: &[u8]| -> Ordering {
        let mut ord = Ordering::Equal;
        if keys.is_empty() {
            ord = compare_with(a, b, &global);
        } else {
            for k in &keys {
                ord = compare_with(key_slice(a, k, sep), key_slice(b, k, sep), &k.opts);
                if ord != Ordering::Equal {
                    break;
                }
            }
        }
        if ord == Ordering::Equal && !stable {
            ord = a.cmp(b);
            if global.reverse {
                ord = ord.reverse();
            }
        }
        ord
    };
    if opts.has("c") {
        for (i, w) in lines.windows(2).enumerate() {
            let bad = cmp(w[0], w[1]) == Ordering::Greater
                || (opts.has("u") && cmp(w[0], w[1]) == Ordering::Equal);
            if bad {
                let name = opts.operands.first().map_or("-", String::as_str);
                ctx.err(format_args!(
                    "sort: {name}:{}: disorder: {}",
                    i + 2,
                    String::from_utf8_lossy(w[1])
                ));
                return Ok(1);
            }
        }
        return Ok(0);
    }
    lines.sort_by(|a, b| cmp(a, b));
    if opts.has("u") {
        lines.dedup_by(|b, a| cmp(a, b) == Ordering::Equal);
    }
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    match opts.value("o") {
        Some(file) => {
            let written = ctx.resolve(file).and_then(|p| ctx.sh.repo.write(&p, &out));
            if let Err(e) = written {
                ctx.err(format_args!("sort: open failed: {file}: {}", errno(&e)));
                return Ok(2);
            }
        }
        None => ctx.out(&out),
    }
    Ok(0)
}

pub(super) fn uniq(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "uniq",
        args,
        "c|count d|repeated u|unique i|ignore-case f|skip-fields= s|skip-chars= w|check-chars=",
        1
    );
    let input = opts.operands.first().cloned().unwrap_or_else(|| "-".into());
    let data = match read_file_operand(ctx, &input) {
        Ok(d) => d,
        Err(e) => {
            ctx.err(format_args!("uniq: {}: {}", quotef(&input), errno(&e)));
            return Ok(1);
        }
    };
    let skip_fields: usize = opts.value("f").and_then(|v| v.parse().ok()).unwrap_or(0);
    let skip_chars: usize = opts.value("s").and_then(|v| v.parse().ok()).unwrap_or(0);
    let check: Option<usize> = opts.value("w").and_then(|v| v.parse().ok());
    let fold = opts.has("i");
    let key = |l: &[u8]| -> Vec<u8> {
        let f = fields(l, None);
        let start = if skip_fields == 0 {
            0
        } else {
            f.get(skip_fields - 1).map_or(l.len(), |x| x.1)
        };
        let s = &l[(start + skip_chars).min(l.len())..];
        let s = &s[..check.unwrap_or(s.len()).min(s.len())];
        if fold {
            s.to_ascii_lowercase()
        } else {
            s.to_vec()
        }
    };
    let (lines, _) = split_lines(&data);
    ctx.tick(lines.len() as u64)?;
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let k = key(lines[i]);
        let mut j = i + 1;
        while j < lines.len() && key(lines[j]) == k {
            j += 1;
        }
        let n = j - i;
        let show = (!opts.has("d") || n > 1) && (!opts.has("u") || n == 1);
        if show {
            if opts.has("c") {
                out.extend_from_slice(format!("{n:7} ").as_bytes());
            }
            out.extend_from_slice(lines[i]);
            out.push(b'\n');
        }
        i = j;
    }
    match opts.operands.get(1) {
        Some(file) => {
            if let Err(e) = ctx.resolve(file).and_then(|p| ctx.sh.repo.write(&p, &out)) {
                ctx.err(format_args!("uniq: {}: {}", quotef(file), errno(&e)));
                return Ok(1);
            }
        }
        None => ctx.out(&out),
    }
    Ok(0)
}

/// Expands a `tr` set: escapes, ranges, `[:class:]`, `[c*n]`.
fn tr_set(spec: &str) -> Result<Vec<char>, String> {
    let chars: Vec<char> = spec.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let unescape = |i: &mut usize| -> char {
        let c = chars[*i];
        *i += 1;
        if c != '\\' || *i >= chars.len() {
            return c;
        }
        let e = chars[*i];
        *i += 1;
        match e {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'a' => '\x07',
            'b' => '\x08',
            'f' => '\x0c',
            'v' => '\x0b',
            '0'..='7' => {
                let mut v = e.to_digit(8).unwrap_or(0);
                let mut n = 1;
                while n < 3 && *i < chars.len() && ('0'..='7').contains(&chars[*i]) {
                    v = v * 8 + chars[*i].to_digit(8).unwrap_or(0);
                    *i += 1;
                    n += 1;
                }
                char::from_u32(v).unwrap_or('?')
            }
            other => other,
        }
    };
    while i < chars.len() {
        if chars[i] == '[' && chars.get(i + 1) == Some(&':') {
            let rest: String = chars[i + 2..].iter().collect();
            if let Some(end) = rest.find(":]") {
                let class = &rest[..end];
                let members: Vec<char> = (0u8..128)
                    .map(char::from)
                    .filter(|&c| glob_class_has(class, c))
                    .collect();
                if members.is_empty() {
                    return Err(format!("invalid character class {}", quote(class)));
                }
                out.extend(members);
                i += 2 + class.chars().count() + 2;
                continue;
            }
        }
        if chars[i] == '[' {
            // `[c*n]`: c repeated n times (or to fill, when n is empty).
            let rest: String = chars[i + 1..].iter().collect();
            if let Some(close) = rest.find(']') {
                let inner: Vec<char> = rest[..close].chars().collect();
                if inner.len() >= 2 && inner[1] == '*' {
                    let n: usize = inner[2..].iter().collect::<String>().parse().unwrap_or(0);
                    out.extend(std::iter::repeat_n(inner[0], n.min(1 << 16)));
                    i += 1 + rest[..close].chars().count() + 1;
                    continue;
                }
            }
        }
        let c = unescape(&mut i);
        if chars.get(i) == Some(&'-') && i + 1 < chars.len() {
            i += 1;
            let hi = unescape(&mut i);
            if hi < c {
                return Err(format!(
                    "range-endpoints of '{c}-{hi}' are in reverse collating sequence order"
                ));
            }
            out.extend((c as u32..=hi as u32).filter_map(char::from_u32));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

pub(super) fn tr(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "tr",
        args,
        "c|C|complement d|delete s|squeeze-repeats t|truncate-set1",
        1
    );
    let (delete, squeeze, complement) = (opts.has("d"), opts.has("s"), opts.has("c"));
    let ops = &opts.operands;
    // Translating needs two sets, and so does deleting while squeezing.
    let need_two = !(delete || squeeze && ops.len() == 1) || (delete && squeeze);
    if ops.is_empty() {
        return Ok(ctx.usage("tr", "missing operand", 1));
    }
    if need_two && ops.len() < 2 {
        ctx.err(format_args!("tr: missing operand after {}", quote(&ops[0])));
        let why = if delete {
            "Two strings must be given when both deleting and squeezing repeats."
        } else {
            "Two strings must be given when translating."
        };
        ctx.err(why);
        ctx.err("Try 'tr --help' for more information.");
        return Ok(1);
    }
    if ops.len() > 2 || (delete && !squeeze && ops.len() > 1) {
        let extra = &ops[if delete && !squeeze { 1 } else { 2 }];
        return Ok(ctx.usage("tr", &format!("extra operand {}", quote(extra)), 1));
    }
    let set1 = match tr_set(&ops[0]) {
        Ok(s) => s,
        Err(e) => {
            ctx.err(format_args!("tr: {e}"));
            return Ok(1);
        }
    };
    let set2 = match ops.get(1).map(|s| tr_set(s)).transpose() {
        Ok(s) => s,
        Err(e) => {
            ctx.err(format_args!("tr: {e}"));
            return Ok(1);
        }
    };
    let input = String::from_utf8_lossy(&ctx.stdin()).into_owned();
    ctx.tick(input.len() as u64 / 64)?;
    let in1 = |c: char| set1.contains(&c) != complement;
    let mut out = String::with_capacity(input.len());
    let squeeze_set: Vec<char> = if delete || set2.is_none() {
        set1.clone()
    } else {
        set2.clone().unwrap_or_default()
    };
    let squeeze_has = |c: char| {
        if delete || set2.is_none() {
            squeeze_set.contains(&c) != complement
        } else {
            squeeze_set.contains(&c)
        }
    };
    for c in input.chars() {
        let mapped = if delete {
            if in1(c) {
                continue;
            }
            c
        } else if let Some(s2) = set2.as_ref().filter(|s| !s.is_empty()) {
            if complement {
                if in1(c) { s2[s2.len() - 1] } else { c }
            } else {
                match set1.iter().rposition(|&x| x == c) {
                    Some(p) => s2.get(p).copied().unwrap_or(s2[s2.len() - 1]),
                    None => c,
                }
            }
        } else {
            c
        };
        if squeeze && squeeze_has(mapped) && out.ends_with(mapped) {
            continue;
        }
        out.push(mapped);
    }
    ctx.outs(&out);
    Ok(0)
}

/// A cut list (`1,3-5,7-`) as inclusive 1-based ranges.
fn cut_list(spec: &str) -> Option<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    for part in spec.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (
                if a.is_empty() { 1 } else { a.parse().ok()? },
                if b.is_empty() {
                    usize::MAX
                } else {
                    b.parse().ok()?
                },
            ),
            None => {
                let n = part.parse().ok()?;
                (n, n)
            }
        };
        if lo == 0 || hi < lo {
            return None;
        }
        out.push((lo, hi));
    }
    Some(out)
}

pub(super) fn cut(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "cut",
        args,
        "d|delimiter= f|fields= c|characters= b|bytes= s|only-delimited complement output-delimiter= n",
        1
    );
    let (mode, spec) = match (opts.value("f"), opts.value("c").or(opts.value("b"))) {
        (Some(f), None) => ('f', f),
        (None, Some(c)) => ('c', c),
        (Some(_), Some(_)) => {
            return Ok(ctx.usage("cut", "only one type of list may be specified", 1));
        }
        (None, None) => {
            return Ok(ctx.usage(
                "cut",
                "you must specify a list of bytes, characters, or fields",
                1,
            ));
        }
    };
    let Some(ranges) = cut_list(spec) else {
        return Ok(ctx.usage("cut", &format!("invalid field value {}", quote(spec)), 1));
    };
    let delim = opts.value("d").unwrap_or("\t");
    if delim.chars().count() != 1 {
        return Ok(ctx.usage("cut", "the delimiter must be a single character", 1));
    }
    let out_delim = opts.value("output-delimiter").unwrap_or(delim).to_string();
    let complement = opts.has("complement");
    let wanted = |i: usize| ranges.iter().any(|&(lo, hi)| lo <= i && i <= hi) != complement;
    let (inputs, failed) = read_inputs(ctx, "cut", &opts.operands);
    let mut out = String::new();
    for (_, data) in &inputs {
        let text = String::from_utf8_lossy(data);
        let (lines, _) = split_lines(text.as_bytes());
        ctx.tick(lines.len() as u64)?;
        for line in lines {
            let line = String::from_utf8_lossy(line);
            if mode == 'c' {
                out.extend(
                    line.chars()
                        .enumerate()
                        .filter(|(i, _)| wanted(i + 1))
                        .map(|(_, c)| c),
                );
            } else if !line.contains(delim) {
                if opts.has("s") {
                    continue;
                }
                out.push_str(&line);
            } else {
                let picked: Vec<&str> = line
                    .split(delim)
                    .enumerate()
                    .filter(|(i, _)| wanted(i + 1))
                    .map(|(_, f)| f)
                    .collect();
                out.push_str(&picked.join(&out_delim));
            }
            out.push('\n');
        }
    }
    ctx.outs(&out);
    Ok(i32::from(failed))
}

pub(super) fn rev(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let (inputs, failed) = read_inputs(ctx, "rev", args);
    let mut out = String::new();
    for (_, data) in &inputs {
        let (lines, ends) = split_lines(data);
        let n = lines.len();
        for (i, line) in lines.into_iter().enumerate() {
            out.extend(String::from_utf8_lossy(line).chars().rev());
            if i + 1 < n || ends {
                out.push('\n');
            }
        }
    }
    ctx.outs(&out);
    Ok(i32::from(failed))
}

pub(super) fn tee(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(ctx, "tee", args, "a|append i|ignore-interrupts p", 1);
    let data = ctx.stdin();
    let mut status = 0;
    for file in &opts.operands {
        if file == "/dev/null" {
            continue;
        }
        let r = ctx.resolve(file).and_then(|p| {
            let mut all = if opts.has("a") {
                ctx.sh.repo.read(&p).unwrap_or_default()
            } else {
                Vec::new()
            };
            all.extend_from_slice(&data);
            ctx.sh.repo.write(&p, &all)
        });
        if let Err(e) = r {
            ctx.err(format_args!("tee: {}: {}", quotef(file), errno(&e)));
            status = 1;
        }
    }
    ctx.out(&data);
    Ok(status)
}

pub(super) fn seq(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    // Negative numbers are operands, not options.
    let mut sep = "\n".to_string();
    let mut equal_width = false;
    let mut nums = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        i += 1;
        match a.as_str() {
            "-s" => {
                sep = args.get(i).cloned().unwrap_or_default();
                i += 1;
            }
            "-w" => equal_width = true,
            _ if a.starts_with("-s") && a.len() > 2 => sep = a[2..].to_string(),
            _ => nums.push(a.clone()),
        }
    }
    if nums.is_empty() || nums.len() > 3 {
        return Ok(ctx.usage(
            "seq",
            if nums.is_empty() {
                "missing operand"
            } else {
                "extra operand"
            },
            1,
        ));
    }
    let mut parsed = Vec::new();
    for n in &nums {
        match n.parse::<f64>() {
            Ok(v) if v.is_finite() => parsed.push(v),
            _ => {
                return Ok(ctx.usage(
                    "seq",
                    &format!("invalid floating point argument: {}", quote(n)),
                    1,
                ));
            }
        }
    }
    let decimals = nums
        .iter()
        .map(|n| n.split_once('.').map_or(0, |(_, d)| d.len()))
        .max()
        .unwrap_or(0);
    let (first, step, last) = match parsed[..] {
        [l] => (1.0, 1.0, l),
        [f, l] => (f, 1.0, l),
        [f, s, l] => (f, s, l),
        _ => unreachable!("one to three operands checked above"),
    };
    if step == 0.0 {
        return Ok(ctx.usage(
            "seq",
            &format!("invalid Zero increment value: {}", quote(&nums[1])),
            1,
        ));
    }
    // Written in chunks so a long sequence never sits in memory beyond the output limits.
    let width = if equal_width {
        [first, last]
            .iter()
            .map(|v| format!("{v:.decimals$}").len())
            .max()
            .unwrap_or(0)
    } else {
        0
    };
    let mut chunk = String::new();
    let mut k = 0u64;
    loop {
        let v = first + step * k as f64;
        if (step > 0.0 && v > last + 1e-9) || (step < 0.0 && v < last - 1e-9) {
            break;
        }
        ctx.tick(1)?;
        if k > 0 {
            chunk.push_str(&sep);
        }
        chunk.push_str(&format!("{:0>width$}", format!("{v:.decimals$}")));
        if chunk.len() > 1 << 16 {
            ctx.outs(&chunk);
            chunk.clear();
        }
        k += 1;
    }
    if k > 0 {
        chunk.push('\n');
    }
    ctx.outs(&chunk);
    Ok(0)
}
