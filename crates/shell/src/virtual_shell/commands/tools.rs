//! Commands backed by the caller: `git diff`/`git status` (through [`VersionControl`]) and
//! Python (through [`PythonRunner`]); and `printf`'s formatter.

use super::{Ctx, errno};
use crate::virtual_shell::arith::parse_integer;
use crate::virtual_shell::escape::backslash_escapes;
use crate::virtual_shell::interp::Exec;
use crate::virtual_shell::{ProgramIo, Stream};
use lilypad_repo::Change;
use lilypad_repo::RepoPath;

/// `path` relative to `cwd`, as git prints paths in `git status`.
fn relative_to(path: &RepoPath, cwd: &RepoPath) -> String {
    let p: Vec<&str> = path.components().collect();
    let c: Vec<&str> = cwd.components().collect();
    let common = p.iter().zip(&c).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = std::iter::repeat_n("..", c.len() - common).collect();
    parts.extend(&p[common..]);
    parts.join("/")
}

pub(super) fn git(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let Some(vcs) = ctx.sh.vcs else {
        ctx.err("fatal: not a git repository (or any of the parent directories): .git");
        return Ok(128);
    };
    // Global options before the subcommand.
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match a.as_str() {
            "-C" | "-c" => i += 2,
            _ if a.starts_with('-') => i += 1,
            _ => break,
        }
    }
    let Some(sub) = args.get(i) else {
        ctx.err("usage: git [--version] [--help] [-C <path>] <command> [<args>]");
        return Ok(1);
    };
    let rest = &args[i + 1..];
    match sub.as_str() {
        "diff" => {
            let mut paths = Vec::new();
            let mut mode = "patch";
            for a in rest {
                match a.as_str() {
                    "--stat" => mode = "stat",
                    "--name-only" => mode = "names",
                    "--name-status" => mode = "name-status",
                    "--" | "HEAD" | "--cached" | "--staged" => {}
                    _ if a.starts_with('-') => {}
                    _ => match ctx.resolve(a) {
                        Ok(p) => paths.push(p),
                        Err(e) => {
                            ctx.err(format_args!(
                                "fatal: {a}: '{a}' is outside repository ({})",
                                errno(&e)
                            ));
                            return Ok(128);
                        }
                    },
                }
            }
            let repo = &*ctx.sh.repo;
            if mode == "names" || mode == "name-status" {
                let changes = match vcs.status(repo) {
                    Ok(c) => c,
                    Err(e) => {
                        ctx.err(format_args!("fatal: {e}"));
                        return Ok(128);
                    }
                };
                let mut text = String::new();
                for (change, p) in changes {
                    if change == Change::Added
                        || !(paths.is_empty() || paths.iter().any(|q| p.starts_with(q)))
                    {
                        continue;
                    }
                    if mode == "name-status" {
                        text.push(if change == Change::Deleted { 'D' } else { 'M' });
                        text.push('\t');
                    }
                    text.push_str(p.as_str());
                    text.push('\n');
                }
                ctx.outs(&text);
                return Ok(0);
            }
            match vcs.diff(repo, &paths) {
                Ok(d) if mode == "stat" => {
                    let s = diff_stat(&d);
                    ctx.outs(&s);
                }
                Ok(d) => ctx.outs(&d),
                Err(e) => {
                    ctx.err(format_args!("fatal: {e}"));
                    return Ok(128);
                }
            }
            Ok(0)
        }
        "status" => {
            let short = rest.iter().any(|a| {
                matches!(
                    a.as_str(),
                    "-s" | "--short" | "--porcelain" | "-sb" | "--porcelain=v1"
                )
            });
            let porcelain = rest.iter().any(|a| a.starts_with("--porcelain"));
            let changes = match vcs.status(&*ctx.sh.repo) {
                Ok(c) => c,
                Err(e) => {
                    ctx.err(format_args!("fatal: {e}"));
                    return Ok(128);
                }
            };
            let cwd = ctx.sh.cwd.clone();
            let shown = |p: &RepoPath| {
                if porcelain {
                    p.as_str().to_string()
                } else {
                    relative_to(p, &cwd)
                }
            };
            let mut text = String::new();
            if short {
                // Tracked changes first, untracked files last, as git lists them.
                let ordered = changes
                    .iter()
                    .filter(|(c, _)| *c != Change::Added)
                    .chain(changes.iter().filter(|(c, _)| *c == Change::Added));
                for (change, p) in ordered {
                    let code = match change {
                        Change::Modified => " M",
                        Change::Deleted => " D",
                        Change::Added => "??",
                    };
                    text.push_str(&format!("{code} {}\n", shown(p)));
                }
            } else {
                text.push_str("On branch main\n");
                let tracked: Vec<_> = changes
                    .iter()
                    .filter(|(c, _)| *c != Change::Added)
                    .collect();
                let untracked: Vec<_> = changes
                    .iter()
                    .filter(|(c, _)| *c == Change::Added)
                    .collect();
                if !tracked.is_empty() {
                    text.push_str("Changes not staged for commit:\n");
                    text.push_str(
                        "  (use \"git add/rm <file>...\" to update what will be committed)\n",
                    );
                    text.push_str("  (use \"git restore <file>...\" to discard changes in working directory)\n");
                    for (c, p) in &tracked {
                        let what = if *c == Change::Deleted {
                            "deleted:    "
                        } else {
                            "modified:   "
                        };
                        text.push_str(&format!("\t{what}{}\n", shown(p)));
                    }
                    text.push('\n');
                }
                if !untracked.is_empty() {
                    text.push_str("Untracked files:\n");
                    text.push_str(
                        "  (use \"git add <file>...\" to include in what will be committed)\n",
                    );
                    for (_, p) in &untracked {
                        text.push_str(&format!("\t{}\n", shown(p)));
                    }
                    text.push('\n');
                }
                if changes.is_empty() {
                    text.push_str("nothing to commit, working tree clean\n");
                } else if tracked.is_empty() {
                    text.push_str("nothing added to commit but untracked files present (use \"git add\" to track)\n");
                } else {
                    text.push_str(
                        "no changes added to commit (use \"git add\" and/or \"git commit -a\")\n",
                    );
                }
            }
            ctx.outs(&text);
            Ok(0)
        }
        other => {
            ctx.err(format_args!(
                "git: '{other}' is not available in this shell (only `git diff` and `git status` are)"
            ));
            Ok(1)
        }
    }
}

/// `git diff --stat` from a unified diff.
fn diff_stat(diff: &str) -> String {
    let mut files: Vec<(String, usize, usize)> = Vec::new();
    for line in diff.lines() {
        if let Some(rest) = line.strip_prefix("diff --git a/") {
            let name = rest.split(" b/").next().unwrap_or(rest).to_string();
            files.push((name, 0, 0));
        } else if let Some(f) = files.last_mut() {
            if line.starts_with('+') && !line.starts_with("+++") {
                f.1 += 1;
            } else if line.starts_with('-') && !line.starts_with("---") {
                f.2 += 1;
            }
        }
    }
    if files.is_empty() {
        return String::new();
    }
    let width = files.iter().map(|f| f.0.len()).max().unwrap_or(0);
    let count_w = files
        .iter()
        .map(|f| (f.1 + f.2).to_string().len())
        .max()
        .unwrap_or(1);
    let mut out = String::new();
    for (name, add, del) in &files {
        out.push_str(&format!(
            " {name:<width$} | {:>count_w$} {}{}\n",
            add + del,
            "+".repeat((*add).min(60)),
            "-".repeat((*del).min(60))
        ));
    }
    let (adds, dels): (usize, usize) = files.iter().fold((0, 0), |(a, d), f| (a + f.1, d + f.2));
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            one.to_string()
        } else {
            many.to_string()
        }
    };
    out.push_str(&format!(
        " {} {} changed",
        files.len(),
        plural(files.len(), "file", "files")
    ));
    if adds > 0 {
        out.push_str(&format!(
            ", {adds} {}(+)",
            plural(adds, "insertion", "insertions")
        ));
    }
    if dels > 0 {
        out.push_str(&format!(
            ", {dels} {}(-)",
            plural(dels, "deletion", "deletions")
        ));
    }
    out.push('\n');
    out
}

pub(super) async fn python(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let name = ctx.name.to_string();
    let mut argv = vec![name.clone()];
    argv.extend(args.iter().cloned());
    let stdin = ctx.stdin();
    let cwd = ctx.sh.cwd.clone();
    let sh = &mut *ctx.sh;
    let Some(runner) = sh.python.as_mut() else {
        ctx.err(format_args!("bash: {name}: command not found"));
        return Ok(127);
    };
    let mut io = ProgramIo::new(stdin).with_time_left(sh.budget.time_left());
    let status = runner.run(&mut *sh.repo, &cwd, &argv, &mut io).await;
    for (stream, bytes) in io.output() {
        let fd = if *stream == Stream::Stderr {
            ctx.fds.err
        } else {
            ctx.fds.out
        };
        ctx.sh.write(fd, bytes);
    }
    // The program ran outside the step count: a runner that stopped it at the limit (or one
    // that overran it) ends the command as timed out.
    ctx.sh.budget.check_clock()?;
    Ok(status)
}

// ---- printf ----

/// bash's `printf`: the format is reused until the arguments run out.
pub(super) struct Printf<'a> {
    args: &'a [String],
    next: usize,
    pub errors: Vec<String>,
}

struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    width: Option<usize>,
    precision: Option<usize>,
}

impl<'a> Printf<'a> {
    pub fn new(args: &'a [String]) -> Self {
        Printf {
            args,
            next: 0,
            errors: Vec::new(),
        }
    }

    pub fn run(&mut self, format: &str) -> String {
        let mut out = String::new();
        loop {
            let before = self.next;
            let stop = self.once(format, &mut out);
            if stop || self.next >= self.args.len() || self.next == before {
                break;
            }
        }
        out
    }

    fn arg(&mut self) -> Option<&'a str> {
        let a = self.args.get(self.next).map(String::as_str);
        if a.is_some() {
            self.next += 1;
        }
        a
    }

    fn int_arg(&mut self) -> i64 {
        let Some(a) = self.arg() else { return 0 };
        let t = a.trim();
        if let Some(c) = t.strip_prefix('\'').or_else(|| t.strip_prefix('"')) {
            return c.chars().next().map_or(0, |c| c as i64);
        }
        let (neg, body) = match t.strip_prefix('-') {
            Some(b) => (true, b),
            None => (false, t.strip_prefix('+').unwrap_or(t)),
        };
        match parse_integer(body) {
            Some(v) => {
                if neg {
                    -v
                } else {
                    v
                }
            }
            None => {
                self.errors.push(format!("{a}: invalid number"));
                let digits: String = body.chars().take_while(|c| c.is_ascii_digit()).collect();
                let v = digits.parse().unwrap_or(0);
                if neg { -v } else { v }
            }
        }
    }

    fn float_arg(&mut self) -> f64 {
        let Some(a) = self.arg() else { return 0.0 };
        let t = a.trim();
        if let Some(c) = t.strip_prefix('\'').or_else(|| t.strip_prefix('"')) {
            return c.chars().next().map_or(0.0, |c| c as u32 as f64);
        }
        t.parse().unwrap_or_else(|_| {
            self.errors.push(format!("{a}: invalid number"));
            0.0
        })
    }

    /// One pass over the format; true when `%b`'s `\c` ended all output.
    fn once(&mut self, format: &str, out: &mut String) -> bool {
        let chars: Vec<char> = format.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            i += 1;
            if c == '\\' {
                let start = i - 1;
                // Let the shared escape reader handle one escape at a time.
                let mut end = i + 1;
                if chars.get(i).is_some_and(|e| ('0'..='7').contains(e)) {
                    while end < chars.len() && end < i + 3 && ('0'..='7').contains(&chars[end]) {
                        end += 1;
                    }
                } else if chars.get(i) == Some(&'x') {
                    while end < chars.len() && end < i + 3 && chars[end].is_ascii_hexdigit() {
                        end += 1;
                    }
                }
                let end = end.min(chars.len());
                let piece: String = chars[start..end].iter().collect();
                out.push_str(&backslash_escapes(&piece, true).0);
                i = end;
                continue;
            }
            if c != '%' {
                out.push(c);
                continue;
            }
            if chars.get(i) == Some(&'%') {
                out.push('%');
                i += 1;
                continue;
            }
            let mut spec = Spec {
                left: false,
                zero: false,
                plus: false,
                space: false,
                alt: false,
                width: None,
                precision: None,
            };
            while let Some(&f) = chars.get(i) {
                match f {
                    '-' => spec.left = true,
                    '0' => spec.zero = true,
                    '+' => spec.plus = true,
                    ' ' => spec.space = true,
                    '#' => spec.alt = true,
                    _ => break,
                }
                i += 1;
            }
            let number = |i: &mut usize, this: &mut Self| -> Option<usize> {
                if chars.get(*i) == Some(&'*') {
                    *i += 1;
                    let v = this.int_arg();
                    return Some(v.unsigned_abs() as usize);
                }
                let start = *i;
                while chars.get(*i).is_some_and(|c| c.is_ascii_digit()) {
                    *i += 1;
                }
                (start < *i).then(|| {
                    chars[start..*i]
                        .iter()
                        .collect::<String>()
                        .parse()
                        .unwrap_or(0)
                })
            };
            spec.width = number(&mut i, self).map(|w| w.min(1 << 16));
            if chars.get(i) == Some(&'.') {
                i += 1;
                spec.precision = Some(number(&mut i, self).unwrap_or(0).min(1 << 16));
            }
            while matches!(chars.get(i), Some('l' | 'h' | 'L' | 'q' | 'j' | 'z' | 't')) {
                i += 1;
            }
            let Some(&conv) = chars.get(i) else {
                self.errors.push("%: missing format character".into());
                return true;
            };
            i += 1;
            let body = match conv {
                's' => {
                    let s = self.arg().unwrap_or("");
                    match spec.precision {
                        Some(p) => s.chars().take(p).collect(),
                        None => s.to_string(),
                    }
                }
                'b' => {
                    let (s, go_on) = backslash_escapes(self.arg().unwrap_or(""), false);
                    out.push_str(&pad(&spec, "", &s, false));
                    if !go_on {
                        return true;
                    }
                    continue;
                }
                'q' => shell_quote(self.arg().unwrap_or("")),
                'c' => self
                    .arg()
                    .and_then(|a| a.chars().next())
                    .map(String::from)
                    .unwrap_or_default(),
                'd' | 'i' => {
                    let v = self.int_arg();
                    let digits = with_precision(v.unsigned_abs().to_string(), spec.precision);
                    let sign = spec.sign(v < 0);
                    out.push_str(&pad(&spec, sign, &digits, spec.precision.is_none()));
                    continue;
                }
                'u' | 'o' | 'x' | 'X' => {
                    let v = self.int_arg() as u64;
                    let digits = match conv {
                        'u' => v.to_string(),
                        'o' => format!("{v:o}"),
                        'x' => format!("{v:x}"),
                        _ => format!("{v:X}"),
                    };
                    let digits = with_precision(digits, spec.precision);
                    let prefix = match conv {
                        'x' if spec.alt && v != 0 => "0x",
                        'X' if spec.alt && v != 0 => "0X",
                        'o' if spec.alt => "0",
                        _ => "",
                    };
                    out.push_str(&pad(&spec, prefix, &digits, spec.precision.is_none()));
                    continue;
                }
                'f' | 'F' | 'e' | 'E' | 'g' | 'G' => {
                    let v = self.float_arg();
                    let p = spec.precision.unwrap_or(6);
                    let mut digits = match conv {
                        'f' | 'F' => format!("{:.*}", p, v.abs()),
                        'e' | 'E' => exp_form(v.abs(), p),
                        _ => general_form(v.abs(), p, spec.alt),
                    };
                    if conv.is_ascii_uppercase() {
                        digits = digits.to_uppercase();
                    }
                    let sign = spec.sign(v.is_sign_negative() && v != 0.0);
                    out.push_str(&pad(&spec, sign, &digits, true));
                    continue;
                }
                other => {
                    self.errors
                        .push(format!("%{other}: invalid format character"));
                    return true;
                }
            };
            out.push_str(&pad(&spec, "", &body, false));
        }
        false
    }
}

impl Spec {
    /// What goes before a number: `-`, or what the `+`/space flags ask for.
    fn sign(&self, negative: bool) -> &'static str {
        if negative {
            "-"
        } else if self.plus {
            "+"
        } else if self.space {
            " "
        } else {
            ""
        }
    }
}

fn with_precision(digits: String, precision: Option<usize>) -> String {
    match precision {
        Some(p) if digits.len() < p => format!("{}{digits}", "0".repeat(p - digits.len())),
        Some(0) if digits == "0" => String::new(),
        _ => digits,
    }
}

fn pad(spec: &Spec, sign: &str, body: &str, zero_ok: bool) -> String {
    let len = sign.chars().count() + body.chars().count();
    let width = spec.width.unwrap_or(0);
    if len >= width {
        return format!("{sign}{body}");
    }
    let fill = width - len;
    if spec.left {
        format!("{sign}{body}{}", " ".repeat(fill))
    } else if spec.zero && zero_ok {
        format!("{sign}{}{body}", "0".repeat(fill))
    } else {
        format!("{}{sign}{body}", " ".repeat(fill))
    }
}

/// C's `%e`: one digit, `precision` decimals, a signed two-digit exponent.
fn exp_form(v: f64, precision: usize) -> String {
    let s = format!("{:.*e}", precision, v);
    match s.split_once('e') {
        Some((mant, exp)) => {
            let e: i32 = exp.parse().unwrap_or(0);
            format!("{mant}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
        }
        None => s,
    }
}

/// C's `%g`: `%e` or `%f` by exponent, trailing zeros removed unless `#`.
fn general_form(v: f64, precision: usize, alt: bool) -> String {
    let p = precision.max(1);
    let exp = if v == 0.0 {
        0
    } else {
        exp_form(v, p - 1)
            .split_once('e')
            .and_then(|(_, e)| e.parse::<i32>().ok())
            .unwrap_or(0)
    };
    let mut s = if exp < -4 || exp >= p as i32 {
        exp_form(v, p - 1)
    } else {
        format!("{:.*}", (p as i32 - 1 - exp).max(0) as usize, v)
    };
    if !alt {
        let (mant, tail) = match s.find('e') {
            Some(i) => (s[..i].to_string(), s[i..].to_string()),
            None => (s.clone(), String::new()),
        };
        let mant = if mant.contains('.') {
            mant.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            mant
        };
        s = format!("{mant}{tail}");
    }
    s
}

/// bash's `%q`: backslashes before characters the shell would interpret.
fn shell_quote(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    let mut out = String::new();
    for c in s.chars() {
        if !(c.is_ascii_alphanumeric() || "_-./,:=@%+^".contains(c)) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
