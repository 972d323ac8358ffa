//! The commands the virtual shell knows, with GNU coreutils' output formats and messages.
//! Each takes its arguments (without the name) and returns an exit status.

/// Parses a command's options; on a usage error prints GNU's message and returns `status`
/// from the command.
macro_rules! opts {
    ($ctx:expr, $cmd:expr, $args:expr, $spec:expr, $status:expr) => {
        match super::parse_opts($args, $spec) {
            Ok(o) => o,
            Err(e) => return Ok($ctx.usage($cmd, &e, $status)),
        }
    };
}

mod diff;
mod files;
mod find;
mod grep;
mod posix_regex;
mod sed;
mod shell;
mod text;
mod tools;

use std::fmt::Display;

use super::interp::{Exec, Fds, Flow, Interp};
use crate::LocalFuture;
use lilypad_repo::SKIPPED_DIRS;
use lilypad_repo::{EntryKind, RepoError, RepoPath};

/// What a running command can reach: the interpreter (repository, cwd, variables) and its
/// three descriptors.
pub(super) struct Ctx<'c, 'a> {
    pub sh: &'c mut Interp<'a>,
    pub fds: Fds,
    /// The command name as invoked.
    pub name: &'c str,
}

pub(super) type CmdFn = fn(&mut Ctx<'_, '_>, &[String]) -> Exec;

/// A command that runs other programs (which may answer later: Python in the browser).
pub(super) type LaterFn = for<'x> fn(&'x mut Ctx<'_, '_>, &'x [String]) -> LocalFuture<'x, Exec>;

pub(super) enum Cmd {
    /// Done when it returns.
    Now(CmdFn),
    /// Runs other commands, so it is awaited.
    Later(LaterFn),
}

/// Boxes an `async fn(&mut Ctx, &[String]) -> Exec` as a [`LaterFn`].
macro_rules! later {
    ($f:path) => {{
        fn boxed<'x>(ctx: &'x mut Ctx<'_, '_>, args: &'x [String]) -> LocalFuture<'x, Exec> {
            Box::pin($f(ctx, args))
        }
        Cmd::Later(boxed)
    }};
}

/// Every command name this shell runs, builtins and utilities alike.
pub(super) fn lookup(name: &str) -> Option<Cmd> {
    let later = match name {
        "source" | "." => later!(shell::source),
        "eval" => later!(shell::eval),
        "bash" | "sh" => later!(shell::bash),
        "command" => later!(shell::command),
        "timeout" => later!(shell::timeout),
        "time" => later!(shell::time),
        "env" => later!(shell::env),
        "xargs" => later!(shell::xargs),
        "find" => later!(find::find),
        "python" | "python3" | "pytest" | "pip" | "pip3" => later!(tools::python),
        _ => return now(name).map(Cmd::Now),
    };
    Some(later)
}

/// The commands that finish when they return.
fn now(name: &str) -> Option<CmdFn> {
    let f: CmdFn = match name {
        "cd" => shell::cd,
        "pwd" => shell::pwd,
        "export" | "local" | "declare" | "readonly" => shell::export,
        "unset" => shell::unset,
        "set" => shell::set,
        "exit" | "return" => shell::exit,
        "break" => shell::break_,
        "continue" => shell::continue_,
        "read" => shell::read,
        "true" | ":" => |_, _| Ok(0),
        "false" => |_, _| Ok(1),
        "type" => shell::type_,
        "which" => shell::which,
        "test" => |ctx, args| shell::test(ctx, args, false),
        "[" => |ctx, args| shell::test(ctx, args, true),
        "[[" => shell::double_bracket,
        "echo" => shell::echo,
        "printf" => shell::printf,
        "sleep" => |_, _| Ok(0),
        "cat" | "less" | "more" => text::cat,
        "head" => |ctx, args| text::head_tail(ctx, args, true),
        "tail" => |ctx, args| text::head_tail(ctx, args, false),
        "wc" => text::wc,
        "sort" => text::sort,
        "uniq" => text::uniq,
        "tr" => text::tr,
        "cut" => text::cut,
        "tee" => text::tee,
        "rev" => text::rev,
        "seq" => text::seq,
        "ls" => files::ls,
        "mkdir" => files::mkdir,
        "rmdir" => files::rmdir,
        "rm" => files::rm,
        "mv" => files::mv,
        "cp" => files::cp,
        "touch" => files::touch,
        "basename" => files::basename,
        "dirname" => files::dirname,
        "realpath" => files::realpath,
        "grep" => |ctx, args| grep::grep(ctx, args, None),
        "egrep" => |ctx, args| grep::grep(ctx, args, Some('E')),
        "fgrep" => |ctx, args| grep::grep(ctx, args, Some('F')),
        "sed" => sed::sed,
        "diff" => diff::diff,
        "git" => tools::git,
        _ => return None,
    };
    Some(f)
}

/// Whether `name` would run (for `which`/`type`/`command -v`): Python only with a runner.
pub(super) fn available(sh: &Interp<'_>, name: &str) -> bool {
    match name {
        "python" | "python3" | "pytest" | "pip" | "pip3" => sh.python.is_some(),
        _ => lookup(name).is_some(),
    }
}

/// Names bash runs itself, which `which` (a separate program) cannot find.
pub(super) fn is_shell_builtin(name: &str) -> bool {
    matches!(
        name,
        "cd" | "export"
            | "local"
            | "declare"
            | "readonly"
            | "unset"
            | "set"
            | "exit"
            | "return"
            | "break"
            | "continue"
            | "read"
            | "source"
            | "."
            | "eval"
            | ":"
            | "type"
            | "command"
    )
}

/// The error text a C library would print for a repository error.
pub(super) fn errno(e: &RepoError) -> String {
    match e {
        RepoError::NotFound(_) | RepoError::InvalidPath { .. } => {
            "No such file or directory".into()
        }
        RepoError::IsADirectory(_) => "Is a directory".into(),
        RepoError::NotADirectory(_) => "Not a directory".into(),
        RepoError::OutsideRoot { .. } | RepoError::SymlinkEscape { .. } => {
            "Permission denied".into()
        }
        RepoError::AlreadyExists(_) => "File exists".into(),
        RepoError::Io { source, .. } => match source.kind() {
            std::io::ErrorKind::NotFound => "No such file or directory".into(),
            std::io::ErrorKind::PermissionDenied => "Permission denied".into(),
            _ => {
                let s = source.to_string();
                match s.find(" (os error") {
                    Some(i) => s[..i].to_string(),
                    None => s,
                }
            }
        },
        other => other.to_string(),
    }
}

/// GNU's `quote`: always single-quoted (`cannot access 'x'`).
pub(super) fn quote(name: &str) -> String {
    if name.contains('\'') {
        format!("\"{name}\"")
    } else {
        format!("'{name}'")
    }
}

/// GNU's `quotef`: quoted only when the name has characters a shell would treat specially.
pub(super) fn quotef(name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/+,:@%^=~".contains(c) || !c.is_ascii());
    if plain { name.to_string() } else { quote(name) }
}

impl Ctx<'_, '_> {
    pub fn out(&mut self, bytes: &[u8]) {
        self.sh.write(self.fds.out, bytes);
    }

    pub fn outs(&mut self, s: &str) {
        self.sh.write(self.fds.out, s.as_bytes());
    }

    /// One line of stderr.
    pub fn err(&mut self, msg: impl Display) {
        let text = format!("{msg}\n");
        self.sh.write(self.fds.err, text.as_bytes());
    }

    /// Prints `cmd: msg` and GNU's help hint; returns `status`.
    pub fn usage(&mut self, cmd: &str, msg: &str, status: i32) -> i32 {
        self.err(format_args!("{cmd}: {msg}"));
        self.err(format_args!("Try '{cmd} --help' for more information."));
        status
    }

    pub fn stdin(&mut self) -> Vec<u8> {
        self.sh.read_all(self.fds.stdin)
    }

    pub fn tick(&mut self, steps: u64) -> Result<(), Flow> {
        self.sh.budget.tick(steps)
    }

    pub fn root(&self) -> String {
        self.sh.root()
    }

    pub fn resolve(&self, arg: &str) -> Result<RepoPath, RepoError> {
        self.sh.resolve(arg)
    }

    pub fn kind(&self, arg: &str) -> Option<EntryKind> {
        self.resolve(arg).ok().and_then(|p| self.sh.repo.kind(&p))
    }

    /// The bytes of a file operand: `-` is stdin, `/dev/null` is empty.
    pub fn read_operand(&mut self, arg: &str) -> Result<Vec<u8>, RepoError> {
        match arg {
            "-" | "/dev/stdin" => Ok(self.stdin()),
            "/dev/null" => Ok(Vec::new()),
            _ => {
                let path = self.resolve(arg)?;
                self.sh.repo.read(&path)
            }
        }
    }

    /// Runs another command (for `xargs`, `find -exec`) with this command's descriptors.
    pub fn run<'x>(&'x mut self, argv: &'x [String]) -> LocalFuture<'x, Exec> {
        self.sh.run_argv(argv, self.fds)
    }

    /// Every entry below `start` (itself first), depth-first in name order; version-control
    /// folders below the start are not entered.
    pub fn walk(&mut self, start: &RepoPath) -> Result<Vec<(RepoPath, EntryKind)>, Flow> {
        let mut out = Vec::new();
        let Some(kind) = self.sh.repo.kind(start) else {
            return Ok(out);
        };
        let mut stack = vec![(start.clone(), kind)];
        while let Some((path, kind)) = stack.pop() {
            self.tick(1)?;
            out.push((path.clone(), kind));
            if kind == EntryKind::Dir {
                let entries = self.sh.repo.list_dir(&path).unwrap_or_default();
                for e in entries.into_iter().rev() {
                    if e.kind == EntryKind::Dir && SKIPPED_DIRS.contains(&e.name.as_str()) {
                        continue;
                    }
                    if let Ok(child) = path.join(&e.name) {
                        stack.push((child, e.kind));
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Spells `path` (found below `start`) the way the user spelled `start`: `find src` prints
/// `src/a.py`, `find .` prints `./a.py`, `find src/` prints `src/a.py`.
pub(super) fn spelled_under(start_arg: &str, start: &RepoPath, path: &RepoPath) -> String {
    let rest = path.as_str()[start.as_str().len()..].trim_start_matches('/');
    if rest.is_empty() {
        start_arg.to_string()
    } else {
        super::glob::join(start_arg, rest)
    }
}

/// Parsed command-line options (GNU getopt rules: bundled short options, `--long[=value]`,
/// options anywhere before `--`).
#[derive(Debug)]
pub(super) struct Opts {
    pub list: Vec<(&'static str, Option<String>)>,
    pub operands: Vec<String>,
}

impl Opts {
    pub fn has(&self, key: &str) -> bool {
        self.list.iter().any(|(k, _)| *k == key)
    }

    pub fn value(&self, key: &str) -> Option<&str> {
        self.list
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.as_deref())
    }

    pub fn values<'s>(&'s self, key: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.list
            .iter()
            .filter(move |(k, _)| *k == key)
            .filter_map(|(_, v)| v.as_deref())
    }
}

struct OptSpec {
    key: &'static str,
    aliases: Vec<&'static str>,
    /// 0: flag, 1: required value, 2: optional value (attached only).
    arg: u8,
}

fn specs(spec: &'static str) -> Vec<OptSpec> {
    spec.split_whitespace()
        .map(|entry| {
            let (body, arg) = match entry.strip_suffix('=') {
                Some(b) => (b, 1),
                None => match entry.strip_suffix('?') {
                    Some(b) => (b, 2),
                    None => (entry, 0),
                },
            };
            let aliases: Vec<&'static str> = body.split('|').collect();
            OptSpec {
                key: aliases[0],
                aliases,
                arg,
            }
        })
        .collect()
}

/// Parses `args` against `spec`: space-separated entries of `|`-separated names (one letter
/// for a short option, more for a long one), ending in `=` for a required value or `?` for an
/// optional attached one; the first name is the key. Errors are GNU's messages.
pub(super) fn parse_opts(args: &[String], spec: &'static str) -> Result<Opts, String> {
    let specs = specs(spec);
    let mut opts = Opts {
        list: Vec::new(),
        operands: Vec::new(),
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            opts.operands.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let exact = specs
                .iter()
                .find(|s| s.aliases.iter().any(|al| al.len() > 1 && *al == name));
            let found = exact.or_else(|| {
                let cands: Vec<&OptSpec> = specs
                    .iter()
                    .filter(|s| {
                        s.aliases
                            .iter()
                            .any(|al| al.len() > 1 && al.starts_with(name))
                    })
                    .collect();
                if cands.len() == 1 {
                    Some(cands[0])
                } else {
                    None
                }
            });
            let Some(s) = found else {
                return Err(format!("unrecognized option '{a}'"));
            };
            let value = match (s.arg, attached) {
                (0, Some(_)) => return Err(format!("option '--{name}' doesn't allow an argument")),
                (1, None) => {
                    let v = args
                        .get(i)
                        .cloned()
                        .ok_or_else(|| format!("option '--{name}' requires an argument"))?;
                    i += 1;
                    Some(v)
                }
                (_, v) => v,
            };
            opts.list.push((s.key, value));
            continue;
        }
        if a.len() < 2 || !a.starts_with('-') {
            opts.operands.push(a.clone());
            continue;
        }
        let chars: Vec<char> = a[1..].chars().collect();
        let mut j = 0;
        while j < chars.len() {
            let c = chars[j];
            j += 1;
            let mut buf = [0u8; 4];
            let cs: &str = c.encode_utf8(&mut buf);
            let Some(s) = specs.iter().find(|s| s.aliases.contains(&cs)) else {
                return Err(format!("invalid option -- '{c}'"));
            };
            if s.arg == 0 {
                opts.list.push((s.key, None));
                continue;
            }
            let rest: String = chars[j..].iter().collect();
            let value = if !rest.is_empty() {
                Some(rest)
            } else if s.arg == 1 {
                let v = args
                    .get(i)
                    .cloned()
                    .ok_or_else(|| format!("option requires an argument -- '{c}'"))?;
                i += 1;
                Some(v)
            } else {
                None
            };
            opts.list.push((s.key, value));
            break;
        }
    }
    Ok(opts)
}

/// Lines of `data` split on `\n`; a final line without newline is kept, and the flag says
/// whether the data ended with a newline.
pub(super) fn split_lines(data: &[u8]) -> (Vec<&[u8]>, bool) {
    if data.is_empty() {
        return (Vec::new(), true);
    }
    let ends = data.ends_with(b"\n");
    let body = if ends { &data[..data.len() - 1] } else { data };
    (body.split(|&b| b == b'\n').collect(), ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn getopt_rules() {
        let o = parse_opts(
            &args(&["-rn", "x", "--include=*.py", "-e", "p", "dir", "--", "-v"]),
            "r n e= include= v",
        )
        .unwrap();
        assert!(o.has("r") && o.has("n") && !o.has("v"));
        assert_eq!(o.value("include"), Some("*.py"));
        assert_eq!(o.value("e"), Some("p"));
        assert_eq!(o.operands, ["x", "dir", "-v"]);
        assert_eq!(
            parse_opts(&args(&["-z"]), "r").unwrap_err(),
            "invalid option -- 'z'"
        );
        assert_eq!(
            parse_opts(&args(&["-n5"]), "n|lines=").unwrap().value("n"),
            Some("5")
        );
        assert_eq!(
            parse_opts(&args(&["--lin", "7"]), "n|lines=")
                .unwrap()
                .value("n"),
            Some("7")
        );
        assert!(parse_opts(&args(&["-n"]), "n=").is_err());
    }
}
