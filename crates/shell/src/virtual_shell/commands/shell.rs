//! Builtins that act on the shell itself (`cd`, `export`, `set`, `exit`, `read`, `source`,
//! `bash -c`) and the small utilities bash users reach for (`echo`, `printf`, `test`,
//! `which`, `env`, `xargs`).

use super::{Ctx, available, errno, is_shell_builtin, parse_opts};
use crate::virtual_shell::escape::backslash_escapes;
use crate::virtual_shell::expand::first_field;
use crate::virtual_shell::glob;
use crate::virtual_shell::interp::{Exec, Flow};
use lilypad_repo::EntryKind;

fn valid_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(super) fn cd(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let args: Vec<&String> = args
        .iter()
        .filter(|a| !matches!(a.as_str(), "-L" | "-P" | "--"))
        .collect();
    if args.len() > 1 {
        ctx.err("bash: cd: too many arguments");
        return Ok(1);
    }
    let root = ctx.root();
    let home = ctx
        .sh
        .vars
        .get("HOME")
        .cloned()
        .unwrap_or_else(|| root.clone());
    let (target, print) = match args.first().map(|s| s.as_str()) {
        None | Some("~") => (home, false),
        Some("-") => match ctx.sh.vars.get("OLDPWD").cloned() {
            Some(old) => (old, true),
            None => {
                ctx.err("bash: cd: OLDPWD not set");
                return Ok(1);
            }
        },
        Some(t) => (t.to_string(), false),
    };
    let path = match ctx.resolve(&target) {
        Ok(p) => p,
        Err(e) => {
            ctx.err(format_args!("bash: cd: {target}: {}", errno(&e)));
            return Ok(1);
        }
    };
    match ctx.sh.repo.kind(&path) {
        Some(EntryKind::Dir) => {}
        Some(EntryKind::File) => {
            ctx.err(format_args!("bash: cd: {target}: Not a directory"));
            return Ok(1);
        }
        None => {
            ctx.err(format_args!(
                "bash: cd: {target}: No such file or directory"
            ));
            return Ok(1);
        }
    }
    let old = ctx.sh.cwd.display_under(&root);
    ctx.sh.vars.insert("OLDPWD".into(), old);
    ctx.sh.cwd = path;
    if print {
        let shown = ctx.sh.cwd.display_under(&root);
        ctx.outs(&format!("{shown}\n"));
    }
    Ok(0)
}

pub(super) fn pwd(ctx: &mut Ctx<'_, '_>, _args: &[String]) -> Exec {
    let shown = ctx.sh.cwd.display_under(&ctx.root());
    ctx.outs(&format!("{shown}\n"));
    Ok(0)
}

pub(super) fn export(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let mut status = 0;
    let names: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if names.is_empty() {
        let listing: String = ctx
            .sh
            .vars
            .iter()
            .map(|(k, v)| format!("declare -x {k}=\"{v}\"\n"))
            .collect();
        ctx.outs(&listing);
        return Ok(0);
    }
    for a in names {
        let (name, value) = match a.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (a.as_str(), None),
        };
        if !valid_name(name) {
            ctx.err(format_args!("bash: export: `{a}': not a valid identifier"));
            status = 1;
            continue;
        }
        match value {
            Some(v) => {
                ctx.sh.vars.insert(name.into(), v.into());
            }
            None => {
                ctx.sh.vars.entry(name.into()).or_default();
            }
        }
    }
    Ok(status)
}

pub(super) fn unset(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    for a in args.iter().filter(|a| !a.starts_with('-')) {
        ctx.sh.vars.remove(a.as_str());
    }
    Ok(0)
}

pub(super) fn set(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    if args.is_empty() {
        let listing: String = ctx
            .sh
            .vars
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        ctx.outs(&listing);
        return Ok(0);
    }
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            break;
        }
        let on = a.starts_with('-');
        if !on && !a.starts_with('+') {
            continue;
        }
        for c in a[1..].chars() {
            match c {
                'e' => ctx.sh.opts.errexit = on,
                'u' => ctx.sh.opts.nounset = on,
                'o' => {
                    let name = args.get(i).cloned().unwrap_or_default();
                    i += 1;
                    match name.as_str() {
                        "pipefail" => ctx.sh.opts.pipefail = on,
                        "errexit" => ctx.sh.opts.errexit = on,
                        "nounset" => ctx.sh.opts.nounset = on,
                        _ => {}
                    }
                }
                // Tracing and the rest change nothing a model can observe here.
                _ => {}
            }
        }
    }
    Ok(0)
}

fn count_arg(ctx: &mut Ctx<'_, '_>, name: &str, args: &[String], default: i32) -> Result<i32, i32> {
    match args.first() {
        None => Ok(default),
        Some(a) => a.trim().parse::<i64>().map(|n| n as i32).map_err(|_| {
            ctx.err(format_args!("bash: {name}: {a}: numeric argument required"));
            2
        }),
    }
}

pub(super) fn exit(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let status = ctx.sh.status;
    match count_arg(ctx, "exit", args, status) {
        Ok(n) => Err(Flow::Exit(n & 0xff)),
        Err(code) => Err(Flow::Exit(code)),
    }
}

fn loop_control(ctx: &mut Ctx<'_, '_>, name: &str, args: &[String]) -> Result<u32, i32> {
    if ctx.sh.loops == 0 {
        ctx.err(format_args!(
            "bash: {name}: only meaningful in a `for', `while', or `until' loop"
        ));
        return Err(0);
    }
    let n = count_arg(ctx, name, args, 1)?;
    if n < 1 {
        ctx.err(format_args!("bash: {name}: {n}: loop count out of range"));
        return Err(1);
    }
    Ok(n as u32)
}

pub(super) fn break_(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    match loop_control(ctx, "break", args) {
        Ok(n) => Err(Flow::Break(n)),
        Err(s) => Ok(s),
    }
}

pub(super) fn continue_(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    match loop_control(ctx, "continue", args) {
        Ok(n) => Err(Flow::Continue(n)),
        Err(s) => Ok(s),
    }
}

pub(super) fn read(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = match parse_opts(args, "r p= a= d= n= s t= u=") {
        Ok(o) => o,
        Err(e) => {
            ctx.err(format_args!("bash: read: {e}"));
            return Ok(2);
        }
    };
    let raw = opts.has("r");
    let names = &opts.operands;
    let line = ctx.sh.read_line(ctx.fds.stdin);
    let status = i32::from(line.is_none());
    let mut text = String::from_utf8_lossy(&line.unwrap_or_default()).into_owned();
    if !raw {
        text = glob::unescape(&text);
    }
    // With no names the whole line goes to REPLY; otherwise each name takes a field and the
    // last one takes the rest of the line.
    if opts.operands.is_empty() {
        ctx.sh.vars.insert("REPLY".into(), text);
        return Ok(status);
    }
    let ifs = ctx.sh.ifs();
    let is_blank = |c: char| c.is_whitespace() && ifs.contains(c);
    let mut rest = text.trim_start_matches(is_blank);
    for (i, name) in names.iter().enumerate() {
        let value = if i + 1 == names.len() || ifs.is_empty() {
            // The last name takes the rest; a lone separator ending it is dropped, as bash does.
            let last = std::mem::take(&mut rest).trim_end_matches(is_blank);
            match last
                .strip_suffix(|c: char| ifs.contains(c))
                .map(|l| l.trim_end_matches(is_blank))
            {
                Some(shorter) if !shorter.contains(|c: char| ifs.contains(c)) => shorter,
                _ => last,
            }
        } else {
            let (field, after) = first_field(rest, &ifs);
            rest = after;
            field
        };
        ctx.sh.vars.insert(name.clone(), value.to_string());
    }
    Ok(status)
}

pub(super) async fn source(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let Some(file) = args.first() else {
        ctx.err("bash: source: filename argument required");
        return Ok(2);
    };
    match ctx.read_operand(file) {
        Ok(data) => {
            let text = String::from_utf8_lossy(&data).into_owned();
            ctx.sh.run_script(&text, ctx.fds).await
        }
        Err(e) => {
            ctx.err(format_args!("bash: {file}: {}", errno(&e)));
            Ok(1)
        }
    }
}

pub(super) async fn eval(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let src = args.join(" ");
    ctx.sh.run_script(&src, ctx.fds).await
}

/// `bash -c 'cmd'`, `bash script.sh`, or a script on stdin; always in a subshell.
pub(super) async fn bash(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let mut i = 0;
    let mut command = None;
    let mut errexit = false;
    let mut pipefail = false;
    while let Some(a) = args.get(i) {
        if a == "-c" {
            command = args.get(i + 1).cloned();
            if command.is_none() {
                ctx.err("bash: -c: option requires an argument");
                return Ok(2);
            }
            break;
        }
        if a == "-o" {
            pipefail |= args.get(i + 1).is_some_and(|o| o == "pipefail");
            i += 2;
            continue;
        }
        if a.starts_with('-') && a.len() > 1 {
            errexit |= a.contains('e') && !a.starts_with("--");
            if a.contains('c') && !a.starts_with("--") {
                command = args.get(i + 1).cloned();
                break;
            }
            i += 1;
            continue;
        }
        break;
    }
    let src = match command {
        Some(c) => c,
        None => match args.get(i) {
            Some(file) => match ctx.read_operand(file) {
                Ok(d) => String::from_utf8_lossy(&d).into_owned(),
                Err(e) => {
                    ctx.err(format_args!("bash: {file}: {}", errno(&e)));
                    return Ok(127);
                }
            },
            None => String::from_utf8_lossy(&ctx.stdin()).into_owned(),
        },
    };
    let saved = ctx.sh.save_scope();
    let loops = std::mem::take(&mut ctx.sh.loops);
    ctx.sh.opts.errexit |= errexit;
    ctx.sh.opts.pipefail |= pipefail;
    let r = ctx.sh.run_script(&src, ctx.fds).await;
    ctx.sh.loops = loops;
    ctx.sh.restore_scope(saved);
    match r {
        Ok(s) | Err(Flow::Exit(s)) => Ok(s),
        Err(Flow::Break(_) | Flow::Continue(_)) => Ok(0),
        Err(Flow::Timeout) => Err(Flow::Timeout),
    }
}

pub(super) fn type_(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let mut status = 0;
    for name in args.iter().filter(|a| !a.starts_with('-')) {
        if is_shell_builtin(name)
            || matches!(
                name.as_str(),
                "echo" | "printf" | "pwd" | "test" | "[" | "true" | "false"
            )
        {
            ctx.outs(&format!("{name} is a shell builtin\n"));
        } else if available(ctx.sh, name) {
            ctx.outs(&format!("{name} is /usr/bin/{name}\n"));
        } else {
            ctx.err(format_args!("bash: type: {name}: not found"));
            status = 1;
        }
    }
    Ok(status)
}

pub(super) async fn command(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    match args.first().map(String::as_str) {
        Some("-v" | "-V") => {
            let mut status = 0;
            for name in &args[1..] {
                if is_shell_builtin(name) {
                    ctx.outs(&format!("{name}\n"));
                } else if available(ctx.sh, name) {
                    ctx.outs(&format!("/usr/bin/{name}\n"));
                } else {
                    status = 1;
                }
            }
            Ok(status)
        }
        Some(_) => ctx.run(args).await,
        None => Ok(0),
    }
}

pub(super) fn which(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let mut status = 0;
    for name in args.iter().filter(|a| !a.starts_with('-')) {
        if available(ctx.sh, name) && !is_shell_builtin(name) {
            ctx.outs(&format!("/usr/bin/{name}\n"));
        } else {
            status = 1;
        }
    }
    Ok(status)
}

// ---- test / [ ----

struct Test<'t, 'c, 'a> {
    ctx: &'t mut Ctx<'c, 'a>,
    args: &'t [String],
    pos: usize,
    /// `[[ ]]`: `&&`/`||` join, `==` matches a pattern, `=~` a regex.
    double: bool,
    depth: usize,
}

const UNARY: &[&str] = &[
    "-e", "-f", "-d", "-s", "-r", "-w", "-x", "-L", "-h", "-n", "-z", "-a", "-b", "-c", "-p", "-S",
];
const BINARY: &[&str] = &[
    "=", "==", "!=", "=~", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-nt", "-ot", "-ef",
];

impl Test<'_, '_, '_> {
    fn peek(&self) -> Option<&str> {
        self.args.get(self.pos).map(String::as_str)
    }

    fn or(&mut self) -> Result<bool, String> {
        let mut v = self.and()?;
        let op = if self.double { "||" } else { "-o" };
        while self.peek() == Some(op) {
            self.pos += 1;
            let r = self.and()?;
            v = v || r;
        }
        Ok(v)
    }

    fn and(&mut self) -> Result<bool, String> {
        let mut v = self.not()?;
        let op = if self.double { "&&" } else { "-a" };
        while self.peek() == Some(op) {
            self.pos += 1;
            let r = self.not()?;
            v = v && r;
        }
        Ok(v)
    }

    fn not(&mut self) -> Result<bool, String> {
        let mut negate = false;
        while self.peek() == Some("!") && self.pos + 1 < self.args.len() {
            self.pos += 1;
            negate = !negate;
        }
        self.depth += 1;
        if self.depth > 200 {
            return Err("expression nested too deeply".into());
        }
        let v = self.primary();
        self.depth -= 1;
        Ok(v? != negate)
    }

    fn primary(&mut self) -> Result<bool, String> {
        let Some(a) = self.peek().map(str::to_string) else {
            return Err("argument expected".into());
        };
        if a == "(" && self.pos + 2 < self.args.len() {
            self.pos += 1;
            let v = self.or()?;
            if self.peek() != Some(")") {
                return Err("`)' expected".into());
            }
            self.pos += 1;
            return Ok(v);
        }
        if let Some(op) = self
            .args
            .get(self.pos + 1)
            .filter(|o| BINARY.contains(&o.as_str()))
            .cloned()
            && let Some(rhs) = self.args.get(self.pos + 2).cloned()
        {
            self.pos += 3;
            return self.binary(&a, &op, &rhs);
        }
        if UNARY.contains(&a.as_str())
            && let Some(operand) = self.args.get(self.pos + 1).cloned()
        {
            self.pos += 2;
            return Ok(self.unary(&a, &operand));
        }
        self.pos += 1;
        Ok(!a.is_empty())
    }

    fn unary(&mut self, op: &str, arg: &str) -> bool {
        let kind = self.ctx.kind(arg);
        match op {
            "-n" => !arg.is_empty(),
            "-z" => arg.is_empty(),
            "-e" | "-a" | "-r" | "-w" => kind.is_some(),
            "-f" => kind == Some(EntryKind::File),
            "-d" | "-x" => kind == Some(EntryKind::Dir),
            "-s" => {
                kind == Some(EntryKind::Dir)
                    || self.ctx.read_operand(arg).is_ok_and(|d| !d.is_empty()) && kind.is_some()
            }
            _ => false,
        }
    }

    fn binary(&mut self, a: &str, op: &str, b: &str) -> Result<bool, String> {
        let int = |s: &str| -> Result<i64, String> {
            s.trim()
                .parse::<i64>()
                .map_err(|_| format!("{s}: integer expression expected"))
        };
        Ok(match op {
            "=" | "==" if self.double => glob::matches(b, a),
            "!=" if self.double => !glob::matches(b, a),
            "=~" => regex::Regex::new(b)
                .map_err(|_| format!("{b}: invalid regular expression"))?
                .is_match(a),
            "=" | "==" => a == b,
            "!=" => a != b,
            "<" => a < b,
            ">" => a > b,
            "-eq" => int(a)? == int(b)?,
            "-ne" => int(a)? != int(b)?,
            "-lt" => int(a)? < int(b)?,
            "-le" => int(a)? <= int(b)?,
            "-gt" => int(a)? > int(b)?,
            "-ge" => int(a)? >= int(b)?,
            "-ef" => self
                .ctx
                .resolve(a)
                .ok()
                .zip(self.ctx.resolve(b).ok())
                .is_some_and(|(x, y)| x == y),
            _ => false,
        })
    }
}

pub(super) fn test(ctx: &mut Ctx<'_, '_>, args: &[String], bracket: bool) -> Exec {
    if !bracket {
        return eval_test(ctx, "test", args, false);
    }
    match args.split_last() {
        Some((last, rest)) if last == "]" => eval_test(ctx, "[", rest, false),
        _ => {
            ctx.err("bash: [: missing `]'");
            Ok(2)
        }
    }
}

pub(super) fn double_bracket(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let args = args.strip_suffix(&["]]".to_string()]).unwrap_or(args);
    eval_test(ctx, "[[", args, true)
}

fn eval_test(ctx: &mut Ctx<'_, '_>, name: &str, args: &[String], double: bool) -> Exec {
    if args.is_empty() {
        return Ok(1);
    }
    let mut t = Test {
        ctx,
        args,
        pos: 0,
        double,
        depth: 0,
    };
    let r = t.or();
    let done = t.pos >= args.len();
    match r {
        Ok(v) if done => Ok(i32::from(!v)),
        Ok(_) => {
            let extra = args.get(t.pos).cloned().unwrap_or_default();
            ctx.err(format_args!(
                "bash: {name}: {extra}: unary operator expected"
            ));
            Ok(2)
        }
        Err(e) => {
            ctx.err(format_args!("bash: {name}: {e}"));
            Ok(2)
        }
    }
}

/// `timeout DURATION COMMAND...`: the run's own time limit already bounds the command.
pub(super) async fn timeout(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        match a.as_str() {
            "-s" | "-k" | "--signal" | "--kill-after" => i += 2,
            _ if a.starts_with('-') => i += 1,
            _ => break,
        }
    }
    match args.get(i + 1..) {
        Some(cmd) if !cmd.is_empty() => ctx.run(cmd).await,
        _ => Ok(ctx.usage("timeout", "missing operand", 125)),
    }
}

/// `time COMMAND...`: runs it and reports (zero) times on stderr, as bash's keyword does.
pub(super) async fn time(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let status = if args.is_empty() {
        0
    } else {
        ctx.run(args).await?
    };
    ctx.err("\nreal\t0m0.000s\nuser\t0m0.000s\nsys\t0m0.000s");
    Ok(status)
}

// ---- echo / printf ----

pub(super) fn echo(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let mut newline = true;
    let mut escapes = false;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if a.len() < 2 || !a.starts_with('-') || !a[1..].chars().all(|c| "neE".contains(c)) {
            break;
        }
        for c in a[1..].chars() {
            match c {
                'n' => newline = false,
                'e' => escapes = true,
                _ => escapes = false,
            }
        }
        i += 1;
    }
    let mut text = args[i..].join(" ");
    if escapes {
        let (t, go_on) = backslash_escapes(&text, false);
        text = t;
        newline &= go_on;
    }
    if newline {
        text.push('\n');
    }
    ctx.outs(&text);
    Ok(0)
}

pub(super) fn printf(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let mut args = args;
    let mut target = None;
    if args.first().is_some_and(|a| a == "-v") {
        target = args.get(1).cloned();
        args = args.get(2..).unwrap_or_default();
    }
    if args.first().is_some_and(|a| a == "--") {
        args = &args[1..];
    }
    let Some(format) = args.first() else {
        ctx.err("bash: printf: usage: printf [-v var] format [arguments]");
        return Ok(2);
    };
    let mut p = super::tools::Printf::new(&args[1..]);
    let out = p.run(format);
    for bad in &p.errors {
        ctx.err(format_args!("bash: printf: {bad}"));
    }
    match target {
        Some(var) => {
            ctx.sh.vars.insert(var, out);
        }
        None => ctx.outs(&out),
    }
    Ok(i32::from(!p.errors.is_empty()))
}

pub(super) async fn env(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let mut i = 0;
    let mut saved = Vec::new();
    while let Some((name, value)) = args
        .get(i)
        .and_then(|a| a.split_once('='))
        .filter(|(n, _)| valid_name(n))
    {
        saved.push((
            name.to_string(),
            ctx.sh.vars.insert(name.into(), value.into()),
        ));
        i += 1;
    }
    let r = if i < args.len() {
        ctx.run(&args[i..]).await
    } else {
        let mut listing: String = ctx
            .sh
            .vars
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect();
        listing.push_str(&format!("PWD={}\n", ctx.sh.cwd.display_under(&ctx.root())));
        ctx.outs(&listing);
        Ok(0)
    };
    for (name, old) in saved.into_iter().rev() {
        match old {
            Some(v) => ctx.sh.vars.insert(name, v),
            None => ctx.sh.vars.remove(&name),
        };
    }
    r
}

/// Splits xargs input: blanks separate items, quotes and backslashes group them.
fn xargs_items(input: &str) -> Result<Vec<String>, String> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut have = false;
    let mut chars = input.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if have {
                    items.push(std::mem::take(&mut cur));
                    have = false;
                }
            }
            '\'' | '"' => {
                have = true;
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some('\n') | None => {
                            let kind = if c == '\'' { "single" } else { "double" };
                            return Err(format!(
                                "unmatched {kind} quote; by default quotes are special to xargs unless you use the -0 option"
                            ));
                        }
                        Some(o) => cur.push(o),
                    }
                }
            }
            '\\' => {
                have = true;
                cur.extend(chars.next());
            }
            _ => {
                have = true;
                cur.push(c);
            }
        }
    }
    if have {
        items.push(cur);
    }
    Ok(items)
}

pub(super) async fn xargs(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    // Options end at the command: `xargs grep -l x` must not read `-l` as xargs's.
    let split = args
        .iter()
        .enumerate()
        .scan(false, |takes_value, (i, a)| {
            let is_opt = *takes_value || (a.starts_with('-') && a.len() > 1);
            let r = if is_opt { None } else { Some(i) };
            *takes_value = !*takes_value
                && matches!(a.as_str(), "-n" | "-I" | "-d" | "-L" | "-P" | "-s" | "-E");
            Some(r)
        })
        .flatten()
        .next()
        .unwrap_or(args.len());
    let opts = opts!(
        ctx,
        "xargs",
        &args[..split],
        "n|max-args= I= i? 0|null d|delimiter= r|no-run-if-empty L= P= t|verbose s= E= x",
        1
    );
    let mut command: Vec<String> = args[split..].to_vec();
    if command.is_empty() {
        command.push("echo".into());
    }
    let input = String::from_utf8_lossy(&ctx.stdin()).into_owned();
    let replace = opts.value("I").map(str::to_string).or_else(|| {
        opts.has("i")
            .then(|| opts.value("i").unwrap_or("{}").to_string())
    });
    let items: Vec<String> = if opts.has("0") {
        input
            .split('\0')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    } else if let Some(d) = opts.value("d") {
        let (d, _) = backslash_escapes(d, true);
        let d = d.chars().next().unwrap_or('\n');
        input
            .split(d)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    } else if replace.is_some() {
        input
            .lines()
            .map(|l| l.trim_start().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    } else {
        match xargs_items(&input) {
            Ok(items) => items,
            Err(e) => {
                ctx.err(format_args!("xargs: {e}"));
                return Ok(1);
            }
        }
    };
    let batches: Vec<Vec<String>> = if let Some(r) = &replace {
        items
            .iter()
            .map(|item| {
                command
                    .iter()
                    .map(|a| a.replace(r.as_str(), item))
                    .collect()
            })
            .collect()
    } else {
        let per = opts
            .value("n")
            .or(opts.value("L"))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n > 0);
        let chunks: Vec<Vec<String>> = match per {
            Some(n) => items.chunks(n).map(<[String]>::to_vec).collect(),
            None if items.is_empty() && !opts.has("r") => vec![Vec::new()],
            None if items.is_empty() => Vec::new(),
            None => vec![items],
        };
        chunks
            .into_iter()
            .map(|c| {
                let mut argv = command.clone();
                argv.extend(c);
                argv
            })
            .collect()
    };
    let mut status = 0;
    for argv in batches {
        if opts.has("t") {
            ctx.err(argv.join(" "));
        }
        match ctx.run(&argv).await? {
            0 => {}
            127 => return Ok(127),
            255 => return Ok(124),
            _ => status = 123,
        }
    }
    Ok(status)
}
