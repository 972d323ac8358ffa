//! `find`: start paths, then an expression of tests (`-name`, `-type`, `-path`, ...),
//! operators (`!`, `-a`, `-o`, parentheses) and actions (`-print`, `-exec`, `-delete`).
//! Folders are visited in name order.

use super::{Ctx, errno, spelled_under};
use crate::LocalFuture;
use crate::virtual_shell::glob;
use crate::virtual_shell::interp::{Exec, Flow};
use lilypad_repo::{EntryKind, RepoPath};

enum Node {
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Name {
        pattern: String,
        nocase: bool,
    },
    Path {
        pattern: String,
        nocase: bool,
    },
    Regex(regex::Regex),
    Type(EntryKind),
    Empty,
    /// `-size`: comparison (-1 less, 0 equal, 1 greater), amount, unit in bytes.
    Size {
        cmp: i8,
        amount: u64,
        unit: u64,
    },
    Const(bool),
    Print {
        terminator: u8,
    },
    Printf(String),
    Delete,
    Prune,
    Quit,
    Exec {
        argv: Vec<String>,
        batch: usize,
    },
}

struct Parsed {
    expr: Node,
    max_depth: Option<usize>,
    min_depth: usize,
    depth_first: bool,
    batches: usize,
    references: Vec<String>,
}

struct ExprParser<'a> {
    args: &'a [String],
    pos: usize,
    max_depth: Option<usize>,
    min_depth: usize,
    depth_first: bool,
    has_action: bool,
    batches: usize,
    depth: usize,
    /// Files named by `-newer`, which must exist.
    references: Vec<String>,
}

/// `!` and parentheses nest at most this deep.
const MAX_NESTING: usize = 200;

impl ExprParser<'_> {
    fn peek(&self) -> Option<&str> {
        self.args.get(self.pos).map(String::as_str)
    }

    fn or(&mut self) -> Result<Node, String> {
        let mut lhs = self.and()?;
        while matches!(self.peek(), Some("-o" | "-or")) {
            self.pos += 1;
            let rhs = self.and()?;
            lhs = Node::Or(Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn and(&mut self) -> Result<Node, String> {
        let mut lhs = self.unary()?;
        loop {
            match self.peek() {
                None | Some("-o" | "-or" | ")") => break,
                Some("-a" | "-and") => self.pos += 1,
                _ => {}
            }
            let rhs = self.unary()?;
            lhs = Node::And(Box::new(lhs), Box::new(rhs));
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Node, String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err("expression nested too deeply".into());
        }
        let r = self.unary_inner();
        self.depth -= 1;
        r
    }

    fn unary_inner(&mut self) -> Result<Node, String> {
        match self.peek() {
            Some("!" | "-not") => {
                self.pos += 1;
                Ok(Node::Not(Box::new(self.unary()?)))
            }
            Some("(") => {
                self.pos += 1;
                let e = self.or()?;
                if self.peek() != Some(")") {
                    return Err(
                        "invalid expression; I was expecting to find a ')' somewhere but did not see one.".into()
                    );
                }
                self.pos += 1;
                Ok(e)
            }
            Some(")") => Err("invalid expression; you have too many ')'".into()),
            None => Err("invalid expression".into()),
            Some(_) => self.primary(),
        }
    }

    fn value(&mut self, name: &str) -> Result<String, String> {
        let v = self
            .args
            .get(self.pos)
            .cloned()
            .ok_or_else(|| format!("missing argument to `{name}'"))?;
        self.pos += 1;
        Ok(v)
    }

    fn primary(&mut self) -> Result<Node, String> {
        let name = self.args[self.pos].clone();
        self.pos += 1;
        Ok(match name.as_str() {
            "-name" | "-iname" => Node::Name {
                pattern: self.value(&name)?,
                nocase: name == "-iname",
            },
            "-path" | "-wholename" | "-ipath" | "-iwholename" => Node::Path {
                pattern: self.value(&name)?,
                nocase: name.starts_with("-i"),
            },
            "-regex" | "-iregex" => {
                let v = self.value(&name)?;
                let re = regex::RegexBuilder::new(&format!("^(?:{v})$"))
                    .case_insensitive(name == "-iregex")
                    .build()
                    .map_err(|_| format!("invalid regular expression `{v}'"))?;
                Node::Regex(re)
            }
            "-type" | "-xtype" => {
                let v = self.value(&name)?;
                match v.as_str() {
                    "f" => Node::Type(EntryKind::File),
                    "d" => Node::Type(EntryKind::Dir),
                    "l" | "b" | "c" | "p" | "s" | "D" => Node::Const(false),
                    _ => return Err(format!("Unknown argument to {name}: {v}")),
                }
            }
            "-maxdepth" | "-mindepth" => {
                let v = self.value(&name)?;
                let n: usize = v.parse().map_err(|_| {
                    format!("Expected a positive decimal integer argument to {name}, but got `{v}'")
                })?;
                if name == "-maxdepth" {
                    self.max_depth = Some(n);
                } else {
                    self.min_depth = n;
                }
                Node::Const(true)
            }
            "-depth" | "-d" => {
                self.depth_first = true;
                Node::Const(true)
            }
            "-empty" => Node::Empty,
            "-size" => {
                let v = self.value(&name)?;
                parse_size(&v).ok_or_else(|| format!("invalid -size type `{v}'"))?
            }
            "-true" => Node::Const(true),
            "-false" => Node::Const(false),
            "-print" => {
                self.has_action = true;
                Node::Print { terminator: b'\n' }
            }
            "-print0" => {
                self.has_action = true;
                Node::Print { terminator: 0 }
            }
            "-printf" => {
                self.has_action = true;
                Node::Printf(self.value(&name)?)
            }
            "-delete" => {
                self.has_action = true;
                self.depth_first = true;
                Node::Delete
            }
            "-prune" => Node::Prune,
            "-quit" => Node::Quit,
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                self.has_action = true;
                let mut argv = Vec::new();
                loop {
                    let Some(a) = self.args.get(self.pos).cloned() else {
                        return Err(format!("missing argument to `{name}'"));
                    };
                    self.pos += 1;
                    if a == ";" {
                        break Node::Exec { argv, batch: 0 };
                    }
                    if a == "+" && argv.last().is_some_and(|l: &String| l == "{}") {
                        argv.pop();
                        self.batches += 1;
                        break Node::Exec {
                            argv,
                            batch: self.batches,
                        };
                    }
                    argv.push(a);
                }
            }
            // No times are kept: everything counts as just modified.
            "-mtime" | "-mmin" | "-atime" | "-amin" | "-ctime" | "-cmin" => {
                let v = self.value(&name)?;
                Node::Const(!v.starts_with('+'))
            }
            "-newer" | "-anewer" | "-cnewer" => {
                let reference = self.value(&name)?;
                self.references.push(reference);
                Node::Const(false)
            }
            "-user" | "-group" | "-perm" | "-links" | "-uid" | "-gid" | "-fstype" | "-inum" => {
                self.value(&name)?;
                Node::Const(true)
            }
            "-readable"
            | "-writable"
            | "-nouser"
            | "-nogroup"
            | "-follow"
            | "-xdev"
            | "-mount"
            | "-noleaf"
            | "-ignore_readdir_race" => Node::Const(name != "-nouser" && name != "-nogroup"),
            "-executable" => Node::Type(EntryKind::Dir),
            "-ls" | "-fls" | "-fprint" | "-fprint0" | "-fprintf" => {
                return Err(format!("{name} is not supported by this shell"));
            }
            other if other.starts_with('-') => return Err(format!("unknown predicate `{other}'")),
            other => return Err(format!("paths must precede expression: `{other}'")),
        })
    }
}

fn parse_size(v: &str) -> Option<Node> {
    let (cmp, rest) = match v.as_bytes().first()? {
        b'+' => (1, &v[1..]),
        b'-' => (-1, &v[1..]),
        _ => (0, v),
    };
    let split = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let amount = rest[..split].parse().ok()?;
    let unit = match &rest[split..] {
        "" | "b" => 512,
        "c" => 1,
        "w" => 2,
        "k" => 1024,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    Some(Node::Size { cmp, amount, unit })
}

fn parse(args: &[String]) -> Result<Parsed, String> {
    let mut p = ExprParser {
        args,
        pos: 0,
        max_depth: None,
        min_depth: 0,
        depth_first: false,
        has_action: false,
        batches: 0,
        depth: 0,
        references: Vec::new(),
    };
    let expr = if args.is_empty() {
        Node::Const(true)
    } else {
        p.or()?
    };
    if let Some(extra) = p.peek() {
        return Err(if extra == ")" {
            "invalid expression; you have too many ')'".into()
        } else {
            format!("paths must precede expression: `{extra}'")
        });
    }
    let expr = if p.has_action {
        expr
    } else {
        Node::And(Box::new(expr), Box::new(Node::Print { terminator: b'\n' }))
    };
    Ok(Parsed {
        expr,
        max_depth: p.max_depth,
        min_depth: p.min_depth,
        depth_first: p.depth_first,
        batches: p.batches,
        references: p.references,
    })
}

/// One visited entry.
struct Visit<'v> {
    shown: &'v str,
    name: &'v str,
    path: &'v RepoPath,
    kind: EntryKind,
    depth: usize,
    start: &'v str,
}

struct Run {
    pruned: bool,
    quit: bool,
    status: i32,
    /// Paths collected for each `-exec ... {} +`.
    batches: Vec<Vec<String>>,
}

impl Ctx<'_, '_> {
    /// Whether `node` holds for `v`. Boxed: it recurses, and `-exec` awaits its command.
    fn find_eval<'s>(
        &'s mut self,
        node: &'s Node,
        v: &'s Visit<'s>,
        run: &'s mut Run,
    ) -> LocalFuture<'s, Result<bool, Flow>> {
        Box::pin(async move {
            Ok(match node {
                Node::And(a, b) => {
                    self.find_eval(a, v, run).await?
                        && !run.quit
                        && self.find_eval(b, v, run).await?
                }
                Node::Or(a, b) => {
                    self.find_eval(a, v, run).await?
                        || (!run.quit && self.find_eval(b, v, run).await?)
                }
                Node::Not(a) => !self.find_eval(a, v, run).await?,
                Node::Name { pattern, nocase } => {
                    if *nocase {
                        glob::matches_nocase(pattern, v.name)
                    } else {
                        glob::matches(pattern, v.name)
                    }
                }
                Node::Path { pattern, nocase } => {
                    if *nocase {
                        glob::matches_nocase(pattern, v.shown)
                    } else {
                        glob::matches(pattern, v.shown)
                    }
                }
                Node::Regex(re) => re.is_match(v.shown),
                Node::Type(k) => v.kind == *k,
                Node::Empty => match v.kind {
                    EntryKind::Dir => self.sh.repo.list_dir(v.path).is_ok_and(|e| e.is_empty()),
                    EntryKind::File => self.sh.repo.read(v.path).is_ok_and(|d| d.is_empty()),
                },
                Node::Size { cmp, amount, unit } => {
                    let len = match v.kind {
                        EntryKind::File => self
                            .sh
                            .repo
                            .read(v.path)
                            .map(|d| d.len() as u64)
                            .unwrap_or(0),
                        EntryKind::Dir => 4096,
                    };
                    let units = len.div_ceil(*unit);
                    match cmp {
                        1 => units > *amount,
                        -1 => units < *amount,
                        _ => units == *amount,
                    }
                }
                Node::Const(b) => *b,
                Node::Print { terminator } => {
                    self.out(v.shown.as_bytes());
                    self.out(&[*terminator]);
                    true
                }
                Node::Printf(fmt) => {
                    let text = self.find_printf(fmt, v);
                    self.outs(&text);
                    true
                }
                Node::Delete => {
                    if v.path.is_root() || v.shown == "." {
                        return Ok(true);
                    }
                    let nonempty = v.kind == EntryKind::Dir
                        && self.sh.repo.list_dir(v.path).is_ok_and(|e| !e.is_empty());
                    let r = if nonempty {
                        Err("Directory not empty".to_string())
                    } else {
                        self.sh.repo.remove(v.path).map_err(|e| errno(&e))
                    };
                    match r {
                        Ok(()) => true,
                        Err(m) => {
                            self.err(format_args!("find: cannot delete '{}': {m}", v.shown));
                            run.status = 1;
                            false
                        }
                    }
                }
                Node::Prune => {
                    run.pruned = true;
                    true
                }
                Node::Quit => {
                    run.quit = true;
                    true
                }
                Node::Exec { argv, batch } => {
                    if *batch > 0 {
                        run.batches[*batch - 1].push(v.shown.to_string());
                        true
                    } else {
                        let argv: Vec<String> =
                            argv.iter().map(|a| a.replace("{}", v.shown)).collect();
                        self.run(&argv).await? == 0
                    }
                }
            })
        })
    }

    fn find_printf(&self, fmt: &str, v: &Visit<'_>) -> String {
        let mut out = String::new();
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('0') => out.push('\0'),
                    Some('\\') => out.push('\\'),
                    Some(o) => {
                        out.push('\\');
                        out.push(o);
                    }
                    None => out.push('\\'),
                },
                '%' => match chars.next() {
                    Some('p') => out.push_str(v.shown),
                    Some('f') => out.push_str(v.name),
                    Some('P') => {
                        let rest = v.shown.strip_prefix(v.start).unwrap_or(v.shown);
                        out.push_str(rest.trim_start_matches('/'));
                    }
                    Some('h') => match v.shown.rfind('/') {
                        Some(i) => out.push_str(&v.shown[..i]),
                        None => out.push('.'),
                    },
                    Some('d') => out.push_str(&v.depth.to_string()),
                    Some('s') => {
                        let len = match v.kind {
                            EntryKind::File => {
                                self.sh.repo.read(v.path).map(|d| d.len()).unwrap_or(0)
                            }
                            EntryKind::Dir => 4096,
                        };
                        out.push_str(&len.to_string());
                    }
                    Some('y') => out.push(if v.kind == EntryKind::Dir { 'd' } else { 'f' }),
                    Some('%') => out.push('%'),
                    Some(o) => {
                        out.push('%');
                        out.push(o);
                    }
                    None => out.push('%'),
                },
                _ => out.push(c),
            }
        }
        out
    }

    /// Visits `path` and what is below it. Boxed: it recurses.
    #[allow(clippy::too_many_arguments)]
    fn find_visit<'s>(
        &'s mut self,
        parsed: &'s Parsed,
        start: &'s str,
        start_path: &'s RepoPath,
        path: &'s RepoPath,
        kind: EntryKind,
        depth: usize,
        run: &'s mut Run,
    ) -> LocalFuture<'s, Result<(), Flow>> {
        Box::pin(async move {
            self.tick(1)?;
            if run.quit {
                return Ok(());
            }
            let shown = spelled_under(start, start_path, path);
            let name = if depth == 0 {
                let t = start.trim_end_matches('/');
                if t.is_empty() {
                    "/".to_string()
                } else {
                    t.rsplit('/').next().unwrap_or(t).to_string()
                }
            } else {
                path.file_name().to_string()
            };
            let visit = Visit {
                shown: &shown,
                name: &name,
                path,
                kind,
                depth,
                start,
            };
            run.pruned = false;
            let evaluate = depth >= parsed.min_depth;
            if evaluate && !parsed.depth_first {
                self.find_eval(&parsed.expr, &visit, run).await?;
            }
            let descend =
                kind == EntryKind::Dir && !run.pruned && parsed.max_depth.is_none_or(|m| depth < m);
            if descend {
                let entries = self.sh.repo.list_dir(path).unwrap_or_default();
                for e in entries {
                    if e.kind == EntryKind::Dir
                        && lilypad_repo::SKIPPED_DIRS.contains(&e.name.as_str())
                    {
                        continue;
                    }
                    if let Ok(child) = path.join(&e.name) {
                        self.find_visit(parsed, start, start_path, &child, e.kind, depth + 1, run)
                            .await?;
                    }
                    if run.quit {
                        break;
                    }
                }
            }
            if evaluate && parsed.depth_first && !run.quit {
                // The entry may be gone (a `-delete` below removed it); only visit what remains.
                if self.sh.repo.kind(path).is_some() {
                    self.find_eval(&parsed.expr, &visit, run).await?;
                }
            }
            Ok(())
        })
    }
}

pub(super) async fn find(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let split = args
        .iter()
        .position(|a| (a.starts_with('-') && a.len() > 1) || a == "(" || a == "!" || a == ")")
        .unwrap_or(args.len());
    let starts: Vec<String> = if split == 0 {
        vec![".".into()]
    } else {
        args[..split].to_vec()
    };
    let parsed = match parse(&args[split..]) {
        Ok(p) => p,
        Err(e) => {
            ctx.err(format_args!("find: {e}"));
            return Ok(1);
        }
    };
    for r in &parsed.references {
        if ctx.kind(r).is_none() {
            ctx.err(format_args!("find: '{r}': No such file or directory"));
            return Ok(1);
        }
    }
    let mut run = Run {
        pruned: false,
        quit: false,
        status: 0,
        batches: vec![Vec::new(); parsed.batches],
    };
    for start in &starts {
        let found =
            ctx.resolve(start)
                .map_err(|e| errno(&e))
                .and_then(|p| match ctx.sh.repo.kind(&p) {
                    Some(k) => Ok((p, k)),
                    None => Err("No such file or directory".to_string()),
                });
        match found {
            Ok((p, k)) => {
                ctx.find_visit(&parsed, start, &p, &p, k, 0, &mut run)
                    .await?
            }
            Err(m) => {
                ctx.err(format_args!("find: '{start}': {m}"));
                run.status = 1;
            }
        }
        if run.quit {
            break;
        }
    }
    // Batched `-exec ... {} +` commands run once each, after the walk.
    let mut execs = Vec::new();
    collect_batches(&parsed.expr, &mut execs);
    for (argv, batch) in execs {
        let paths = std::mem::take(&mut run.batches[batch - 1]);
        if paths.is_empty() {
            continue;
        }
        let mut full = argv.clone();
        full.extend(paths);
        if ctx.run(&full).await? != 0 {
            run.status = 1;
        }
    }
    Ok(run.status)
}

fn collect_batches<'n>(node: &'n Node, out: &mut Vec<(&'n Vec<String>, usize)>) {
    match node {
        Node::And(a, b) | Node::Or(a, b) => {
            collect_batches(a, out);
            collect_batches(b, out);
        }
        Node::Not(a) => collect_batches(a, out),
        Node::Exec { argv, batch } if *batch > 0 => out.push((argv, *batch)),
        _ => {}
    }
}
