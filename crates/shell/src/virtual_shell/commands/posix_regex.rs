//! POSIX basic and extended regular expressions (as GNU grep and sed read them), rewritten
//! for the `regex` crate: BRE's `\(`, `\{`, `\|`, `\+`, literal `*` at the start, bracket
//! expressions with literal backslashes, `\<`/`\>` word edges.

use regex::bytes::{Regex, RegexBuilder};

/// Rewrites `pattern` into `regex` syntax; errors are GNU's messages.
pub(super) fn translate(pattern: &str, extended: bool) -> Result<String, String> {
    let p: Vec<char> = pattern.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    // Where `*` is literal and `^` is an anchor: the start, after a group opens, after `|`.
    let mut at_start = true;
    let mut depth = 0usize;
    while i < p.len() {
        let c = p[i];
        i += 1;
        let was_start = at_start;
        at_start = false;
        match c {
            '\\' => {
                let Some(&e) = p.get(i) else {
                    return Err("Trailing backslash".into());
                };
                i += 1;
                match e {
                    '(' if !extended => {
                        out.push('(');
                        depth += 1;
                        at_start = true;
                    }
                    ')' if !extended => {
                        if depth == 0 {
                            return Err("Unmatched ) or \\)".into());
                        }
                        depth -= 1;
                        out.push(')');
                    }
                    '|' if !extended => {
                        out.push('|');
                        at_start = true;
                    }
                    '{' if !extended => {
                        if was_start {
                            out.push_str("\\{");
                            continue;
                        }
                        let close = find_seq(&p, i, &['\\', '}']).ok_or("Unmatched \\{")?;
                        let body: String = p[i..close].iter().collect();
                        out.push_str(&interval(&body).ok_or("Invalid content of \\{\\}")?);
                        i = close + 2;
                    }
                    '+' | '?' if !extended => {
                        if was_start {
                            out.push('\\');
                        }
                        out.push(e);
                    }
                    '<' => out.push_str(r"\b{start}"),
                    '>' => out.push_str(r"\b{end}"),
                    '`' => out.push_str(r"\A"),
                    '\'' => out.push_str(r"\z"),
                    'b' | 'B' | 'w' | 'W' | 's' | 'S' => {
                        out.push('\\');
                        out.push(e);
                    }
                    '1'..='9' => return Err("back-references are not supported".into()),
                    'n' => out.push_str(r"\n"),
                    't' => out.push_str(r"\t"),
                    other => push_literal(&mut out, other),
                }
            }
            '[' => i = bracket(&p, i, &mut out)?,
            '*' if was_start => out.push_str(r"\*"),
            '*' => out.push('*'),
            '^' if was_start || extended => {
                out.push('^');
                at_start = true;
            }
            '^' => out.push_str(r"\^"),
            '$' => {
                let end = i == p.len()
                    || (!extended
                        && (p[i..].starts_with(&['\\', ')']) || p[i..].starts_with(&['\\', '|'])))
                    || (extended && matches!(p.get(i), Some(')' | '|')));
                out.push_str(if end || extended { "$" } else { r"\$" });
            }
            '.' => out.push('.'),
            '(' if extended => {
                out.push('(');
                depth += 1;
                at_start = true;
            }
            ')' if extended => {
                if depth == 0 {
                    return Err("Unmatched ) or \\)".into());
                }
                depth -= 1;
                out.push(')');
            }
            '|' if extended => {
                out.push('|');
                at_start = true;
            }
            '+' | '?' if extended => {
                if was_start {
                    out.push('\\');
                }
                out.push(c);
            }
            '{' if extended => {
                let close = p[i..].iter().position(|&x| x == '}').map(|o| i + o);
                let body: Option<String> = close.map(|cl| p[i..cl].iter().collect());
                match body.as_deref().and_then(interval) {
                    Some(iv) if !was_start => {
                        out.push_str(&iv);
                        i = close.unwrap_or(i) + 1;
                    }
                    _ => out.push_str(r"\{"),
                }
            }
            other => push_literal(&mut out, other),
        }
    }
    if depth > 0 {
        return Err("Unmatched ( or \\(".into());
    }
    Ok(out)
}

fn find_seq(p: &[char], from: usize, seq: &[char]) -> Option<usize> {
    (from..p.len()).find(|&k| p[k..].starts_with(seq))
}

/// The body of `{m,n}` in `regex` syntax, or `None` when it is not an interval.
fn interval(body: &str) -> Option<String> {
    let (lo, hi) = match body.split_once(',') {
        Some((l, h)) => (l, Some(h)),
        None => (body, None),
    };
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if !digits(lo) || !hi.is_none_or(digits) || (lo.is_empty() && hi.is_none_or(str::is_empty)) {
        return None;
    }
    let lo = if lo.is_empty() { "0" } else { lo };
    Some(match hi {
        None => format!("{{{lo}}}"),
        Some(h) => format!("{{{lo},{h}}}"),
    })
}

fn push_literal(out: &mut String, c: char) {
    let mut buf = [0u8; 4];
    out.push_str(&regex::escape(c.encode_utf8(&mut buf)));
}

/// A bracket expression starting after `[`; returns the index after its `]`.
fn bracket(p: &[char], mut i: usize, out: &mut String) -> Result<usize, String> {
    let unmatched = || "Unmatched [, [^, [:, [., or [=".to_string();
    out.push('[');
    if p.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    loop {
        let &c = p.get(i).ok_or_else(unmatched)?;
        if c == ']' && !first {
            out.push(']');
            return Ok(i + 1);
        }
        first = false;
        if c == '[' && matches!(p.get(i + 1), Some(':' | '=' | '.')) {
            let kind = p[i + 1];
            let close = find_seq(p, i + 2, &[kind, ']']).ok_or_else(unmatched)?;
            let name: String = p[i + 2..close].iter().collect();
            if kind == ':' {
                const CLASSES: &[&str] = &[
                    "alpha", "digit", "alnum", "upper", "lower", "space", "blank", "punct",
                    "xdigit", "cntrl", "print", "graph",
                ];
                if !CLASSES.contains(&name.as_str()) {
                    return Err("Invalid character class name".into());
                }
                out.push_str(&format!("[:{name}:]"));
            } else {
                for ch in name.chars() {
                    push_class_char(out, ch);
                }
            }
            i = close + 2;
            continue;
        }
        if c == '-'
            && i > 0
            && p.get(i + 1) != Some(&']')
            && !out.ends_with('[')
            && !out.ends_with('^')
        {
            out.push('-');
        } else {
            push_class_char(out, c);
        }
        i += 1;
    }
}

fn push_class_char(out: &mut String, c: char) {
    if matches!(c, '\\' | '[' | ']' | '&' | '~' | '-' | '^') {
        out.push('\\');
    }
    out.push(c);
}

/// Compiles POSIX patterns (one alternative each) into one matcher.
pub(super) fn compile(
    patterns: &[String],
    extended: bool,
    fixed: bool,
    perl: bool,
    nocase: bool,
    whole_line: bool,
) -> Result<Regex, String> {
    let mut alts = Vec::new();
    for p in patterns {
        let t = if fixed {
            regex::escape(p)
        } else if perl {
            p.clone()
        } else {
            translate(p, extended)?
        };
        alts.push(if whole_line {
            format!("^(?:{t})$")
        } else {
            format!("(?:{t})")
        });
    }
    let joined = alts.join("|");
    RegexBuilder::new(&joined)
        .case_insensitive(nocase)
        .size_limit(1 << 24)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => "regular expression too big".into(),
            _ => "Invalid regular expression".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, ext: bool, text: &str) -> bool {
        compile(&[p.to_string()], ext, false, false, false, false)
            .unwrap()
            .is_match(text.as_bytes())
    }

    #[test]
    fn basic_and_extended() {
        assert!(m(r"a\(b\)*c", false, "abbc"));
        assert!(m("a(b)", false, "xa(b)"));
        assert!(m(r"x\|y", false, "y"));
        assert!(m("a+", false, "a+"));
        assert!(!m("a+", false, "aa"));
        assert!(m("a+", true, "aa"));
        assert!(m("*a", false, "*a"));
        assert!(m(r"[\n]", false, "\\"));
        assert!(m("[[:digit:]]x", false, "5x"));
        assert!(m(r"\<foo\>", false, "a foo b"));
        assert!(!m(r"\<foo\>", false, "afoo"));
        assert!(m("a{2}", true, "aa"));
        assert!(m("a{", true, "a{"));
        assert!(m(r"a\{2\}", false, "aa"));
        assert!(m("a^b", false, "a^b"));
        assert!(m("a$b", false, "a$b"));
        assert!(m("fn [a-z_]+\\(", true, "fn main("));
        assert!(translate("[abc", false).is_err());
        assert!(translate(r"\(a", false).is_err());
    }
}
