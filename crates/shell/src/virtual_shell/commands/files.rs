//! File and folder commands: ls, mkdir, rmdir, rm, mv, cp, touch, basename, dirname, realpath.

use super::{Ctx, errno, quote, spelled_under};
use crate::virtual_shell::glob;
use crate::virtual_shell::interp::Exec;
use lilypad_repo::{DirEntry, EntryKind, RepoError, RepoPath};

/// What `ls -l` shows for one entry; the repository has no owners or times, so those are fixed.
struct LsEntry {
    name: String,
    kind: EntryKind,
    len: u64,
    links: u64,
}

fn human(n: u64) -> String {
    if n < 1024 {
        return n.to_string();
    }
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < 6 {
        v /= 1024.0;
        unit += 1;
    }
    let suffix = ["", "K", "M", "G", "T", "P", "E"][unit];
    // GNU rounds up: one decimal below 10, whole numbers above.
    if v < 10.0 {
        let r = (v * 10.0).ceil() / 10.0;
        if r >= 10.0 {
            format!("{}{suffix}", r.ceil() as u64)
        } else {
            format!("{r:.1}{suffix}")
        }
    } else {
        format!("{}{suffix}", v.ceil() as u64)
    }
}

fn blocks_kib(e: &LsEntry) -> u64 {
    match e.kind {
        EntryKind::Dir => 4,
        EntryKind::File => e.len.div_ceil(4096) * 4,
    }
}

struct LsOpts {
    long: bool,
    all: bool,
    almost_all: bool,
    recursive: bool,
    directory: bool,
    human: bool,
    classify: bool,
    reverse: bool,
    by_size: bool,
    unsorted: bool,
    commas: bool,
}

impl Ctx<'_, '_> {
    fn ls_entry(&self, path: &RepoPath, name: String) -> Option<LsEntry> {
        let kind = self.sh.repo.kind(path)?;
        let (len, links) = match kind {
            EntryKind::File => (
                self.sh.repo.read(path).map(|d| d.len() as u64).unwrap_or(0),
                1,
            ),
            EntryKind::Dir => {
                let subdirs = self
                    .sh
                    .repo
                    .list_dir(path)
                    .map(|es| es.iter().filter(|e| e.kind == EntryKind::Dir).count() as u64)
                    .unwrap_or(0);
                (4096, 2 + subdirs)
            }
        };
        Some(LsEntry {
            name,
            kind,
            len,
            links,
        })
    }

    /// Entries of one folder as `ls` would list them (hidden ones, `.`/`..`, order).
    fn ls_dir_entries(&mut self, path: &RepoPath, o: &LsOpts) -> Result<Vec<LsEntry>, RepoError> {
        let listing: Vec<DirEntry> = self.sh.repo.list_dir(path)?;
        let mut out = Vec::new();
        if o.all {
            out.extend(self.ls_entry(path, ".".into()));
            let parent = path.parent().unwrap_or_default();
            out.extend(self.ls_entry(&parent, "..".into()));
        }
        for e in listing {
            if e.name.starts_with('.') && !(o.all || o.almost_all) {
                continue;
            }
            let child = path.join(&e.name)?;
            let links = if e.kind == EntryKind::Dir {
                self.ls_entry(&child, String::new()).map_or(2, |x| x.links)
            } else {
                1
            };
            out.push(LsEntry {
                name: e.name,
                kind: e.kind,
                len: if e.kind == EntryKind::Dir {
                    4096
                } else {
                    e.len
                },
                links,
            });
        }
        sort_entries(&mut out, o);
        Ok(out)
    }

    fn ls_print(&mut self, entries: &[LsEntry], o: &LsOpts, total: bool) {
        let mut text = String::new();
        let decorate = |e: &LsEntry| {
            if o.classify && e.kind == EntryKind::Dir {
                format!("{}/", e.name)
            } else {
                e.name.clone()
            }
        };
        if o.long {
            if total {
                let sum: u64 = entries.iter().map(blocks_kib).sum();
                let shown = if o.human {
                    human(sum * 1024)
                } else {
                    sum.to_string()
                };
                text.push_str(&format!("total {shown}\n"));
            }
            let size = |e: &LsEntry| {
                if o.human {
                    human(e.len)
                } else {
                    e.len.to_string()
                }
            };
            let lw = entries
                .iter()
                .map(|e| e.links.to_string().len())
                .max()
                .unwrap_or(1);
            let sw = entries.iter().map(|e| size(e).len()).max().unwrap_or(1);
            for e in entries {
                let mode = if e.kind == EntryKind::Dir {
                    "drwxr-xr-x"
                } else {
                    "-rw-r--r--"
                };
                text.push_str(&format!(
                    "{mode} {:>lw$} user user {:>sw$} Jan  1 00:00 {}\n",
                    e.links,
                    size(e),
                    decorate(e)
                ));
            }
        } else if o.commas {
            let names: Vec<String> = entries.iter().map(decorate).collect();
            if !names.is_empty() {
                text.push_str(&names.join(", "));
                text.push('\n');
            }
        } else {
            for e in entries {
                text.push_str(&decorate(e));
                text.push('\n');
            }
        }
        self.outs(&text);
    }
}

fn sort_entries(entries: &mut [LsEntry], o: &LsOpts) {
    if o.unsorted {
        return;
    }
    if o.by_size {
        entries.sort_by(|a, b| b.len.cmp(&a.len).then_with(|| a.name.cmp(&b.name)));
    } else {
        entries.sort_by(|a, b| a.name.cmp(&b.name));
    }
    if o.reverse {
        entries.reverse();
    }
}

pub(super) fn ls(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "ls",
        args,
        "l a|all A|almost-all R|recursive 1 d|directory h|human-readable F|classify p r|reverse t S U C x m \
         g o G|no-group n|numeric-uid-gid i|inode s|size c u color? group-directories-first full-time",
        2
    );
    let o = LsOpts {
        long: opts.has("l")
            || opts.has("g")
            || opts.has("o")
            || opts.has("n")
            || opts.has("full-time"),
        all: opts.has("a"),
        almost_all: opts.has("A"),
        recursive: opts.has("R"),
        directory: opts.has("d"),
        human: opts.has("h"),
        classify: opts.has("F") || opts.has("p"),
        reverse: opts.has("r"),
        by_size: opts.has("S"),
        unsorted: opts.has("U"),
        commas: opts.has("m"),
    };
    let operands: Vec<String> = if opts.operands.is_empty() {
        vec![".".into()]
    } else {
        opts.operands.clone()
    };
    let mut status = 0;
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    for arg in &operands {
        let found = ctx.resolve(arg).and_then(|p| match ctx.sh.repo.kind(&p) {
            Some(k) => Ok((p, k)),
            None => Err(RepoError::NotFound(arg.clone())),
        });
        match found {
            Ok((p, EntryKind::Dir)) if !o.directory => dirs.push((arg.clone(), p)),
            Ok((p, _)) => {
                if let Some(e) = ctx.ls_entry(&p, arg.clone()) {
                    files.push(e);
                }
            }
            Err(e) => {
                ctx.err(format_args!(
                    "ls: cannot access {}: {}",
                    quote(arg),
                    errno(&e)
                ));
                status = 2;
            }
        }
    }
    sort_entries(&mut files, &o);
    dirs.sort_by(|a, b| a.0.cmp(&b.0));
    if o.reverse {
        dirs.reverse();
    }
    let mut printed = !files.is_empty();
    if printed {
        ctx.ls_print(&files, &o, false);
    }
    let headers = operands.len() > 1 || o.recursive;
    // Recursive listings queue subfolders right after their parent.
    let mut queue: Vec<(String, RepoPath)> = dirs.into_iter().rev().collect();
    while let Some((shown, path)) = queue.pop() {
        ctx.tick(1)?;
        let entries = match ctx.ls_dir_entries(&path, &o) {
            Ok(e) => e,
            Err(e) => {
                ctx.err(format_args!(
                    "ls: cannot open directory {}: {}",
                    quote(&shown),
                    errno(&e)
                ));
                status = 2;
                continue;
            }
        };
        if printed {
            ctx.outs("\n");
        }
        if headers {
            ctx.outs(&format!("{shown}:\n"));
        }
        ctx.ls_print(&entries, &o, true);
        printed = true;
        if o.recursive {
            let subdirs: Vec<(String, RepoPath)> = entries
                .iter()
                .filter(|e| e.kind == EntryKind::Dir && e.name != "." && e.name != "..")
                .filter(|e| !lilypad_repo::SKIPPED_DIRS.contains(&e.name.as_str()))
                .filter_map(|e| {
                    path.join(&e.name)
                        .ok()
                        .map(|p| (spelled_under(&shown, &path, &p), p))
                })
                .collect();
            queue.extend(subdirs.into_iter().rev());
        }
    }
    Ok(status)
}

pub(super) fn mkdir(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(ctx, "mkdir", args, "p|parents v|verbose m|mode=", 1);
    if opts.operands.is_empty() {
        return Ok(ctx.usage("mkdir", "missing operand", 1));
    }
    let mut status = 0;
    for arg in &opts.operands {
        let r = ctx.resolve(arg).and_then(|p| {
            match ctx.sh.repo.kind(&p) {
                Some(EntryKind::Dir) if opts.has("p") => return Ok(()),
                Some(_) => return Err(RepoError::AlreadyExists(arg.clone())),
                None => {}
            }
            if !opts.has("p") {
                match p.parent().and_then(|parent| ctx.sh.repo.kind(&parent)) {
                    Some(EntryKind::Dir) => {}
                    Some(EntryKind::File) => return Err(RepoError::NotADirectory(arg.clone())),
                    None => return Err(RepoError::NotFound(arg.clone())),
                }
            }
            ctx.sh.repo.create_dir_all(&p)?;
            if opts.has("v") {
                ctx.outs(&format!("mkdir: created directory {}\n", quote(arg)));
            }
            Ok(())
        });
        if let Err(e) = r {
            ctx.err(format_args!(
                "mkdir: cannot create directory {}: {}",
                quote(arg),
                errno(&e)
            ));
            status = 1;
        }
    }
    Ok(status)
}

pub(super) fn rmdir(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "rmdir",
        args,
        "p|parents v|verbose ignore-fail-on-non-empty",
        1
    );
    if opts.operands.is_empty() {
        return Ok(ctx.usage("rmdir", "missing operand", 1));
    }
    let mut status = 0;
    for arg in &opts.operands {
        let r = ctx.resolve(arg).and_then(|p| match ctx.sh.repo.kind(&p) {
            None => Err(RepoError::NotFound(arg.clone())),
            Some(EntryKind::File) => Err(RepoError::NotADirectory(arg.clone())),
            Some(EntryKind::Dir) if p.is_root() => Err(RepoError::OutsideRoot {
                path: arg.clone(),
                root: String::new(),
            }),
            Some(EntryKind::Dir) => {
                if ctx.sh.repo.list_dir(&p)?.is_empty() {
                    ctx.sh.repo.remove(&p).map(|_| None)
                } else {
                    Ok(Some("Directory not empty"))
                }
            }
        });
        let msg = match r {
            Ok(None) => continue,
            Ok(Some(m)) if opts.has("ignore-fail-on-non-empty") => {
                let _ = m;
                continue;
            }
            Ok(Some(m)) => m.to_string(),
            Err(e) => errno(&e),
        };
        ctx.err(format_args!(
            "rmdir: failed to remove {}: {msg}",
            quote(arg)
        ));
        status = 1;
    }
    Ok(status)
}

pub(super) fn rm(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "rm",
        args,
        "r|R|recursive f|force i I d|dir v|verbose interactive? one-file-system no-preserve-root preserve-root?",
        1
    );
    let force = opts.has("f");
    if opts.operands.is_empty() {
        return Ok(if force {
            0
        } else {
            ctx.usage("rm", "missing operand", 1)
        });
    }
    let mut status = 0;
    for arg in &opts.operands {
        let last = arg.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        if last == "." || last == ".." {
            ctx.err(format_args!(
                "rm: refusing to remove '.' or '..' directory: skipping {}",
                quote(arg)
            ));
            status = 1;
            continue;
        }
        let path = match ctx.resolve(arg) {
            Ok(p) if p.is_root() => {
                ctx.err(format_args!(
                    "rm: it is dangerous to operate recursively on {}",
                    quote(arg)
                ));
                ctx.err("rm: use --no-preserve-root to override this failsafe");
                status = 1;
                continue;
            }
            Ok(p) => p,
            Err(e) => {
                ctx.err(format_args!(
                    "rm: cannot remove {}: {}",
                    quote(arg),
                    errno(&e)
                ));
                status = 1;
                continue;
            }
        };
        let fail = match ctx.sh.repo.kind(&path) {
            None if force => continue,
            None => Some("No such file or directory".to_string()),
            Some(EntryKind::Dir) if !opts.has("r") && !opts.has("d") => {
                Some("Is a directory".into())
            }
            Some(EntryKind::Dir)
                if !opts.has("r")
                    && !ctx.sh.repo.list_dir(&path).unwrap_or_default().is_empty() =>
            {
                Some("Directory not empty".into())
            }
            Some(kind) => match ctx.sh.repo.remove(&path) {
                Ok(()) => {
                    if opts.has("v") {
                        let what = if kind == EntryKind::Dir {
                            "removed directory"
                        } else {
                            "removed"
                        };
                        ctx.outs(&format!("{what} {}\n", quote(arg)));
                    }
                    None
                }
                Err(e) => Some(errno(&e)),
            },
        };
        if let Some(msg) = fail {
            ctx.err(format_args!("rm: cannot remove {}: {msg}", quote(arg)));
            status = 1;
        }
    }
    Ok(status)
}

/// Sources and the destination of `mv`/`cp`, and whether the destination is a folder to put
/// them in.
fn targets(
    ctx: &mut Ctx<'_, '_>,
    cmd: &str,
    operands: &[String],
    target_dir: Option<&str>,
) -> Result<(Vec<String>, String, bool), i32> {
    let (sources, dest) = match target_dir {
        Some(t) => (operands.to_vec(), t.to_string()),
        None => match operands.split_last() {
            Some((d, s)) if !s.is_empty() => (s.to_vec(), d.clone()),
            Some((d, _)) => {
                return Err(ctx.usage(
                    cmd,
                    &format!("missing destination file operand after {}", quote(d)),
                    1,
                ));
            }
            None => return Err(ctx.usage(cmd, "missing file operand", 1)),
        },
    };
    let into = ctx.kind(&dest) == Some(EntryKind::Dir);
    if sources.len() > 1 && !into {
        ctx.err(format_args!(
            "{cmd}: target {} is not a directory",
            quote(&dest)
        ));
        return Err(1);
    }
    Ok((sources, dest, into))
}

fn basename_of(arg: &str) -> &str {
    let t = arg.trim_end_matches('/');
    t.rsplit('/').next().unwrap_or(t)
}

/// A source of `mv`/`cp`: its path and kind, and the destination it goes to (inside `dest`
/// when that is a folder). Reports a missing source and returns `None`.
fn locate(
    ctx: &mut Ctx<'_, '_>,
    cmd: &str,
    src: &str,
    dest: &str,
    into: bool,
) -> Option<(RepoPath, EntryKind, String)> {
    let target = if into {
        glob::join(dest, basename_of(src))
    } else {
        dest.to_string()
    };
    let found = ctx.resolve(src).and_then(|p| match ctx.sh.repo.kind(&p) {
        Some(k) => Ok((p, k)),
        None => Err(RepoError::NotFound(src.into())),
    });
    match found {
        Ok((p, k)) => Some((p, k, target)),
        Err(e) => {
            ctx.err(format_args!(
                "{cmd}: cannot stat {}: {}",
                quote(src),
                errno(&e)
            ));
            None
        }
    }
}

/// Checks that `dest`'s folder exists, as writing a new entry there needs.
fn parent_exists(ctx: &Ctx<'_, '_>, dest: &RepoPath) -> bool {
    dest.parent()
        .is_some_and(|p| ctx.sh.repo.kind(&p) == Some(EntryKind::Dir))
}

pub(super) fn mv(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "mv",
        args,
        "f|force i|interactive n|no-clobber v|verbose t|target-directory= T|no-target-directory u|update b|backup?",
        1
    );
    let (sources, dest, into) = match targets(ctx, "mv", &opts.operands, opts.value("t")) {
        Ok(t) => t,
        Err(s) => return Ok(s),
    };
    let mut status = 0;
    for src in &sources {
        let Some((from, kind, target_arg)) = locate(ctx, "mv", src, &dest, into) else {
            status = 1;
            continue;
        };
        let to = match ctx.resolve(&target_arg) {
            Ok(p) => p,
            Err(e) => {
                ctx.err(format_args!(
                    "mv: cannot move {} to {}: {}",
                    quote(src),
                    quote(&target_arg),
                    errno(&e)
                ));
                status = 1;
                continue;
            }
        };
        let msg = if from == to {
            Some(format!(
                "mv: {} and {} are the same file",
                quote(src),
                quote(&target_arg)
            ))
        } else if from.is_root() || to.starts_with(&from) {
            Some(format!(
                "mv: cannot move {} to a subdirectory of itself, {}",
                quote(src),
                quote(&target_arg)
            ))
        } else if !parent_exists(ctx, &to) {
            Some(format!(
                "mv: cannot move {} to {}: No such file or directory",
                quote(src),
                quote(&target_arg)
            ))
        } else {
            match (kind, ctx.sh.repo.kind(&to)) {
                (_, Some(_)) if opts.has("n") => continue,
                (EntryKind::File, Some(EntryKind::Dir)) => Some(format!(
                    "mv: cannot overwrite directory {} with non-directory",
                    quote(&target_arg)
                )),
                (EntryKind::Dir, Some(EntryKind::File)) => Some(format!(
                    "mv: cannot overwrite non-directory {} with directory {}",
                    quote(&target_arg),
                    quote(src)
                )),
                (EntryKind::Dir, Some(EntryKind::Dir))
                    if !ctx.sh.repo.list_dir(&to).unwrap_or_default().is_empty() =>
                {
                    Some(format!(
                        "mv: cannot move {} to {}: Directory not empty",
                        quote(src),
                        quote(&target_arg)
                    ))
                }
                (_, existing) => {
                    let r = match existing {
                        Some(_) => ctx.sh.repo.remove(&to),
                        None => Ok(()),
                    }
                    .and_then(|_| ctx.sh.repo.rename(&from, &to));
                    match r {
                        Ok(()) => {
                            if opts.has("v") {
                                ctx.outs(&format!(
                                    "renamed {} -> {}\n",
                                    quote(src),
                                    quote(&target_arg)
                                ));
                            }
                            None
                        }
                        Err(e) => Some(format!(
                            "mv: cannot move {} to {}: {}",
                            quote(src),
                            quote(&target_arg),
                            errno(&e)
                        )),
                    }
                }
            }
        };
        if let Some(m) = msg {
            ctx.err(m);
            status = 1;
        }
    }
    Ok(status)
}

pub(super) fn cp(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "cp",
        args,
        "r|R|recursive a|archive p f|force i|interactive n|no-clobber v|verbose t|target-directory= T|no-target-directory u|update \
         preserve? d L|dereference P|no-dereference l|link s|symbolic-link",
        1
    );
    let recursive = opts.has("r") || opts.has("a");
    let (sources, dest, into) = match targets(ctx, "cp", &opts.operands, opts.value("t")) {
        Ok(t) => t,
        Err(s) => return Ok(s),
    };
    let mut status = 0;
    for src in &sources {
        let Some((from, kind, target_arg)) = locate(ctx, "cp", src, &dest, into) else {
            status = 1;
            continue;
        };
        let to = match ctx.resolve(&target_arg) {
            Ok(p) => p,
            Err(e) => {
                ctx.err(format_args!(
                    "cp: cannot create regular file {}: {}",
                    quote(&target_arg),
                    errno(&e)
                ));
                status = 1;
                continue;
            }
        };
        if kind == EntryKind::Dir && !recursive {
            ctx.err(format_args!(
                "cp: -r not specified; omitting directory {}",
                quote(src)
            ));
            status = 1;
            continue;
        }
        if from == to {
            ctx.err(format_args!(
                "cp: {} and {} are the same file",
                quote(src),
                quote(&target_arg)
            ));
            status = 1;
            continue;
        }
        if kind == EntryKind::Dir && to.starts_with(&from) {
            ctx.err(format_args!(
                "cp: cannot copy a directory, {}, into itself, {}",
                quote(src),
                quote(&target_arg)
            ));
            status = 1;
            continue;
        }
        if !parent_exists(ctx, &to) {
            let what = if kind == EntryKind::Dir {
                "cannot create directory"
            } else {
                "cannot create regular file"
            };
            ctx.err(format_args!(
                "cp: {what} {}: No such file or directory",
                quote(&target_arg)
            ));
            status = 1;
            continue;
        }
        if opts.has("n") && ctx.sh.repo.kind(&to).is_some() {
            continue;
        }
        let r = match kind {
            EntryKind::File => match ctx.sh.repo.kind(&to) {
                Some(EntryKind::Dir) => Err(format!(
                    "cp: cannot overwrite directory {} with non-directory",
                    quote(&target_arg)
                )),
                _ => ctx
                    .sh
                    .repo
                    .read(&from)
                    .and_then(|d| ctx.sh.repo.write(&to, &d))
                    .map_err(|e| {
                        format!(
                            "cp: cannot create regular file {}: {}",
                            quote(&target_arg),
                            errno(&e)
                        )
                    }),
            },
            EntryKind::Dir => copy_tree(ctx, &from, &to)?
                .map_err(|e| format!("cp: cannot copy {}: {}", quote(src), errno(&e))),
        };
        match r {
            Ok(()) if opts.has("v") => {
                ctx.outs(&format!("{} -> {}\n", quote(src), quote(&target_arg)))
            }
            Ok(()) => {}
            Err(m) => {
                ctx.err(m);
                status = 1;
            }
        }
    }
    Ok(status)
}

fn copy_tree(
    ctx: &mut Ctx<'_, '_>,
    from: &RepoPath,
    to: &RepoPath,
) -> Result<Result<(), RepoError>, crate::virtual_shell::interp::Flow> {
    let entries = ctx.walk(from)?;
    for (path, kind) in entries {
        let rest = path.as_str()[from.as_str().len()..].trim_start_matches('/');
        let dest = if rest.is_empty() {
            Ok(to.clone())
        } else {
            to.join(rest)
        };
        let r = dest.and_then(|d| match kind {
            EntryKind::Dir => ctx.sh.repo.create_dir_all(&d),
            EntryKind::File => ctx
                .sh
                .repo
                .read(&path)
                .and_then(|data| ctx.sh.repo.write(&d, &data)),
        });
        if let Err(e) = r {
            return Ok(Err(e));
        }
    }
    Ok(Ok(()))
}

pub(super) fn touch(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "touch",
        args,
        "c|no-create a m d|date= t= r|reference= h|no-dereference",
        1
    );
    if opts.operands.is_empty() {
        return Ok(ctx.usage("touch", "missing file operand", 1));
    }
    let mut status = 0;
    for arg in &opts.operands {
        let r = ctx.resolve(arg).and_then(|p| {
            if ctx.sh.repo.kind(&p).is_some() || opts.has("c") {
                return Ok(());
            }
            match p.parent().and_then(|parent| ctx.sh.repo.kind(&parent)) {
                Some(EntryKind::Dir) => ctx.sh.repo.write(&p, b""),
                Some(EntryKind::File) => Err(RepoError::NotADirectory(arg.clone())),
                None => Err(RepoError::NotFound(arg.clone())),
            }
        });
        if let Err(e) = r {
            ctx.err(format_args!(
                "touch: cannot touch {}: {}",
                quote(arg),
                errno(&e)
            ));
            status = 1;
        }
    }
    Ok(status)
}

fn base_name(name: &str, suffix: Option<&str>) -> String {
    if name.is_empty() {
        return String::new();
    }
    let t = name.trim_end_matches('/');
    if t.is_empty() {
        return "/".into();
    }
    let base = t.rsplit('/').next().unwrap_or(t);
    match suffix {
        Some(s) if !s.is_empty() && base.len() > s.len() && base.ends_with(s) => {
            base[..base.len() - s.len()].to_string()
        }
        _ => base.to_string(),
    }
}

pub(super) fn basename(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(ctx, "basename", args, "a|multiple s|suffix= z|zero", 1);
    let ops = &opts.operands;
    if ops.is_empty() {
        return Ok(ctx.usage("basename", "missing operand", 1));
    }
    let multiple = opts.has("a") || opts.has("s");
    let (names, suffix): (Vec<&String>, Option<&str>) = if multiple {
        (ops.iter().collect(), opts.value("s"))
    } else if ops.len() <= 2 {
        (vec![&ops[0]], ops.get(1).map(String::as_str))
    } else {
        return Ok(ctx.usage("basename", &format!("extra operand {}", quote(&ops[2])), 1));
    };
    let text: String = names
        .iter()
        .map(|n| format!("{}\n", base_name(n, suffix)))
        .collect();
    ctx.outs(&text);
    Ok(0)
}

pub(super) fn dirname(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(ctx, "dirname", args, "z|zero", 1);
    if opts.operands.is_empty() {
        return Ok(ctx.usage("dirname", "missing operand", 1));
    }
    let mut text = String::new();
    for name in &opts.operands {
        let t = name.trim_end_matches('/');
        let d = if t.is_empty() && name.starts_with('/') {
            "/".to_string()
        } else {
            match t.rfind('/') {
                None => ".".into(),
                Some(i) => {
                    let d = t[..i].trim_end_matches('/');
                    if d.is_empty() {
                        "/".into()
                    } else {
                        d.to_string()
                    }
                }
            }
        };
        text.push_str(&d);
        text.push('\n');
    }
    ctx.outs(&text);
    Ok(0)
}

pub(super) fn realpath(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = opts!(
        ctx,
        "realpath",
        args,
        "e|canonicalize-existing m|canonicalize-missing s|strip|no-symlinks q|quiet z|zero relative-to= L P",
        1
    );
    if opts.operands.is_empty() {
        return Ok(ctx.usage("realpath", "missing operand", 1));
    }
    let mut status = 0;
    let root = ctx.root();
    for arg in &opts.operands {
        let r = ctx.resolve(arg).and_then(|p| {
            let parent_ok = p
                .parent()
                .is_none_or(|parent| ctx.sh.repo.kind(&parent) == Some(EntryKind::Dir));
            let exists = ctx.sh.repo.kind(&p).is_some();
            if opts.has("m") || exists || (!opts.has("e") && parent_ok) {
                Ok(p)
            } else {
                Err(RepoError::NotFound(arg.clone()))
            }
        });
        match r {
            Ok(p) => ctx.outs(&format!("{}\n", p.display_under(&root))),
            Err(e) => {
                if !opts.has("q") {
                    ctx.err(format_args!("realpath: {arg}: {}", errno(&e)));
                }
                status = 1;
            }
        }
    }
    Ok(status)
}
