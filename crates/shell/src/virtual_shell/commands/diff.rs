//! `diff FILE1 FILE2`: GNU's normal format, or unified with `-u`/`-U N` (headers carry no
//! timestamps: the repository keeps none).

use similar::DiffOp;

use super::{Ctx, errno, parse_opts, split_lines};
use crate::virtual_shell::interp::{Exec, Flow};
use lilypad_repo::EntryKind;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Equal,
    Delete,
    Insert,
}

/// The edit script turning `a` into `b`, one op per line.
fn edit_script<T: Eq + std::hash::Hash + Ord>(
    ctx: &mut Ctx<'_, '_>,
    a: &[T],
    b: &[T],
) -> Result<Vec<Op>, Flow> {
    ctx.tick((a.len() + b.len()) as u64)?;
    // Past the deadline `similar` settles for a coarser (still correct) diff. Its clock is
    // std's, which panics on wasm32-unknown-unknown, so there only the step budget applies.
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    let deadline = ctx.sh.budget.deadline();
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    let deadline = None;
    let mut ops = Vec::with_capacity(a.len().max(b.len()));
    for op in similar::capture_diff_slices_deadline(similar::Algorithm::Myers, a, b, deadline) {
        match op {
            DiffOp::Equal { len, .. } => ops.extend(std::iter::repeat_n(Op::Equal, len)),
            DiffOp::Delete { old_len, .. } => ops.extend(std::iter::repeat_n(Op::Delete, old_len)),
            DiffOp::Insert { new_len, .. } => ops.extend(std::iter::repeat_n(Op::Insert, new_len)),
            DiffOp::Replace {
                old_len, new_len, ..
            } => {
                ops.extend(std::iter::repeat_n(Op::Delete, old_len));
                ops.extend(std::iter::repeat_n(Op::Insert, new_len));
            }
        }
    }
    Ok(ops)
}

struct Side<'d> {
    lines: Vec<&'d [u8]>,
    /// False when the last line has no newline (`\ No newline at end of file`).
    ends_nl: bool,
}

impl Side<'_> {
    fn push_line(&self, out: &mut Vec<u8>, prefix: &[u8], i: usize) {
        out.extend_from_slice(prefix);
        out.extend_from_slice(self.lines[i]);
        out.push(b'\n');
        if i + 1 == self.lines.len() && !self.ends_nl {
            out.extend_from_slice(b"\\ No newline at end of file\n");
        }
    }
}

/// Each op with the line indices it stands at in `a` and `b`.
fn positions(ops: &[Op]) -> Vec<(Op, usize, usize)> {
    let (mut i, mut j) = (0, 0);
    ops.iter()
        .map(|&op| {
            let at = (op, i, j);
            match op {
                Op::Equal => {
                    i += 1;
                    j += 1;
                }
                Op::Delete => i += 1,
                Op::Insert => j += 1,
            }
            at
        })
        .collect()
}

fn range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start}"),
        1 => format!("{}", start + 1),
        _ => format!("{},{}", start + 1, start + len),
    }
}

fn normal(a: &Side<'_>, b: &Side<'_>, ops: &[Op]) -> Vec<u8> {
    let pos = positions(ops);
    let mut out = Vec::new();
    let mut k = 0;
    while k < pos.len() {
        if pos[k].0 == Op::Equal {
            k += 1;
            continue;
        }
        let (_, a0, b0) = pos[k];
        let mut dels = Vec::new();
        let mut ins = Vec::new();
        while k < pos.len() && pos[k].0 != Op::Equal {
            match pos[k].0 {
                Op::Delete => dels.push(pos[k].1),
                _ => ins.push(pos[k].2),
            }
            k += 1;
        }
        let header = match (dels.is_empty(), ins.is_empty()) {
            (false, true) => format!("{}d{}\n", range(a0, dels.len()), b0),
            (true, false) => format!("{}a{}\n", a0, range(b0, ins.len())),
            _ => format!("{}c{}\n", range(a0, dels.len()), range(b0, ins.len())),
        };
        out.extend_from_slice(header.as_bytes());
        for &i in &dels {
            a.push_line(&mut out, b"< ", i);
        }
        if !dels.is_empty() && !ins.is_empty() {
            out.extend_from_slice(b"---\n");
        }
        for &j in &ins {
            b.push_line(&mut out, b"> ", j);
        }
    }
    out
}

fn unified_range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{len}", start + 1),
    }
}

fn unified(a: &Side<'_>, b: &Side<'_>, ops: &[Op], context: usize) -> Vec<u8> {
    let pos = positions(ops);
    let changes: Vec<usize> = (0..pos.len()).filter(|&k| pos[k].0 != Op::Equal).collect();
    let mut out = Vec::new();
    let mut c = 0;
    while c < changes.len() {
        // Extend the hunk while the next change is within two contexts of this one.
        let first = changes[c];
        let mut last = first;
        while c + 1 < changes.len() && changes[c + 1] - last <= 2 * context + 1 {
            c += 1;
            last = changes[c];
        }
        c += 1;
        let start = first.saturating_sub(context);
        let end = (last + context + 1).min(pos.len());
        let (a_start, b_start) = (pos[start].1, pos[start].2);
        let a_len = pos[start..end].iter().filter(|p| p.0 != Op::Insert).count();
        let b_len = pos[start..end].iter().filter(|p| p.0 != Op::Delete).count();
        let header = format!(
            "@@ -{} +{} @@\n",
            unified_range(a_start, a_len),
            unified_range(b_start, b_len)
        );
        out.extend_from_slice(header.as_bytes());
        for &(op, i, j) in &pos[start..end] {
            match op {
                Op::Equal => a.push_line(&mut out, b" ", i),
                Op::Delete => a.push_line(&mut out, b"-", i),
                Op::Insert => b.push_line(&mut out, b"+", j),
            }
        }
    }
    out
}

pub(super) fn diff(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = match parse_opts(
        args,
        "u U|unified= q|brief s|report-identical-files i|ignore-case w|ignore-all-space b|ignore-space-change \
         B|ignore-blank-lines a|text N|new-file r|recursive color? label= p|show-c-function",
    ) {
        Ok(o) => o,
        Err(e) => {
            ctx.err(format_args!("diff: {e}"));
            ctx.err("diff: Try 'diff --help' for more information.");
            return Ok(2);
        }
    };
    let [left, right] = opts.operands.as_slice() else {
        let msg = match opts.operands.len() {
            0 => "missing operand after 'diff'".to_string(),
            1 => format!("missing operand after '{}'", opts.operands[0]),
            _ => format!("extra operand '{}'", opts.operands[2]),
        };
        ctx.err(format_args!("diff: {msg}"));
        ctx.err("diff: Try 'diff --help' for more information.");
        return Ok(2);
    };
    // A folder against a file compares the file of the same name inside it.
    let (mut left, mut right) = (left.clone(), right.clone());
    match (ctx.kind(&left), ctx.kind(&right)) {
        (Some(EntryKind::Dir), Some(EntryKind::Dir)) => {
            ctx.err("diff: comparing folders is not supported by this shell; compare files, or use `git diff`");
            return Ok(2);
        }
        (Some(EntryKind::Dir), Some(EntryKind::File)) => {
            left = format!("{}/{}", left.trim_end_matches('/'), base(&right))
        }
        (Some(EntryKind::File), Some(EntryKind::Dir)) => {
            right = format!("{}/{}", right.trim_end_matches('/'), base(&left))
        }
        _ => {}
    }
    let mut data = Vec::new();
    for name in [&left, &right] {
        match ctx.read_operand(name) {
            Ok(d) => data.push(d),
            Err(e)
                if opts.has("N")
                    && ctx.kind(name).is_none()
                    && !matches!(e, lilypad_repo::RepoError::OutsideRoot { .. }) =>
            {
                data.push(Vec::new())
            }
            Err(e) => {
                ctx.err(format_args!("diff: {name}: {}", errno(&e)));
                return Ok(2);
            }
        }
    }
    let (la, ea) = split_lines(&data[0]);
    let (lb, eb) = split_lines(&data[1]);
    let a = Side {
        lines: la,
        ends_nl: ea,
    };
    let b = Side {
        lines: lb,
        ends_nl: eb,
    };
    let norm = |l: &[u8]| -> Vec<u8> {
        let mut s: Vec<u8> = if opts.has("i") {
            l.to_ascii_lowercase()
        } else {
            l.to_vec()
        };
        if opts.has("w") {
            s.retain(|c| !c.is_ascii_whitespace());
        } else if opts.has("b") {
            let mut out = Vec::with_capacity(s.len());
            for &c in s.iter() {
                if c.is_ascii_whitespace() {
                    if out.last().is_none_or(|p: &u8| *p != b' ') {
                        out.push(b' ');
                    }
                } else {
                    out.push(c);
                }
            }
            while out.last() == Some(&b' ') {
                out.pop();
            }
            s = out;
        }
        s
    };
    // The missing final newline counts as a difference on the last line.
    let key = |side: &Side<'_>, i: usize| {
        let mut k = norm(side.lines[i]);
        if i + 1 == side.lines.len() && !side.ends_nl {
            k.push(0xff);
        }
        k
    };
    let ka: Vec<Vec<u8>> = (0..a.lines.len()).map(|i| key(&a, i)).collect();
    let kb: Vec<Vec<u8>> = (0..b.lines.len()).map(|i| key(&b, i)).collect();
    let ops = edit_script(ctx, &ka, &kb)?;
    let differ = ops.iter().any(|&o| o != Op::Equal);
    if !differ {
        if opts.has("s") {
            ctx.outs(&format!("Files {left} and {right} are identical\n"));
        }
        return Ok(0);
    }
    if opts.has("q") {
        ctx.outs(&format!("Files {left} and {right} differ\n"));
        return Ok(1);
    }
    let context = match opts.value("U") {
        Some(v) => match v.parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => {
                ctx.err(format_args!("diff: invalid context length '{v}'"));
                return Ok(2);
            }
        },
        None if opts.has("u") => Some(3),
        None => None,
    };
    let body = match context {
        Some(n) => {
            let mut out = format!("--- {left}\n+++ {right}\n").into_bytes();
            out.extend(unified(&a, &b, &ops, n));
            out
        }
        None => normal(&a, &b, &ops),
    };
    ctx.out(&body);
    Ok(1)
}

fn base(name: &str) -> &str {
    let t = name.trim_end_matches('/');
    t.rsplit('/').next().unwrap_or(t)
}
