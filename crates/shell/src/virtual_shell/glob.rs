//! Shell patterns (`*`, `?`, `[...]`): matching one name, and expanding a pattern against the
//! repository the way bash expands an unquoted argument.

use lilypad_repo::{EntryKind, RepoPath, Repository};

/// True when `pattern` has an unescaped `*`, `?` or a complete `[...]`.
pub fn has_magic(pattern: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '\\' => i += 1,
            '*' | '?' => return true,
            '[' if bracket(&p, i, '\0').is_some() => return true,
            _ => {}
        }
        i += 1;
    }
    false
}

/// Removes the backslashes that quote pattern characters.
pub fn unescape(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

/// Escapes pattern characters so the text matches only itself.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whole-string match of `text` against `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = text.chars().collect();
    matches_chars(&p, &s, false)
}

/// Like [`matches`] but ignoring ASCII case (`find -iname`).
pub fn matches_nocase(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = text.chars().collect();
    matches_chars(&p, &s, true)
}

fn eq(a: char, b: char, nocase: bool) -> bool {
    a == b || (nocase && a.eq_ignore_ascii_case(&b))
}

fn matches_chars(p: &[char], s: &[char], nocase: bool) -> bool {
    let (mut pi, mut si) = (0, 0);
    // Where to resume after the last `*`: (pattern index after it, text index it now covers).
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        let step = match p.get(pi) {
            Some('*') => {
                star = Some((pi + 1, si));
                pi += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => match bracket(p, pi, s[si]) {
                Some((true, next)) => Some(next - pi),
                Some((false, _)) => None,
                None => eq('[', s[si], nocase).then_some(1),
            },
            Some('\\') if pi + 1 < p.len() => eq(p[pi + 1], s[si], nocase).then_some(2),
            Some(&c) => eq(c, s[si], nocase).then_some(1),
            None => None,
        };
        match step {
            Some(n) => {
                pi += n;
                si += 1;
            }
            None => match star {
                Some((sp, ss)) => {
                    pi = sp;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A `[...]` expression at `p[start]`: whether `c` is in it and the index after it, or `None`
/// when the bracket is never closed (then `[` is an ordinary character).
fn bracket(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = matches!(p.get(i), Some('!' | '^'));
    if negate {
        i += 1;
    }
    let mut found = false;
    let mut first = true;
    loop {
        let &pc = p.get(i)?;
        if pc == ']' && !first {
            return Some((found != negate, i + 1));
        }
        first = false;
        if pc == '[' && p.get(i + 1) == Some(&':') {
            let rest: String = p[i + 2..].iter().collect();
            if let Some(end) = rest.find(":]") {
                let class = &rest[..end];
                found |= class_has(class, c);
                i += 2 + class.chars().count() + 2;
                continue;
            }
        }
        let lo = if pc == '\\' {
            i += 1;
            *p.get(i)?
        } else {
            pc
        };
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|&n| n != ']') {
            let mut hi_i = i + 2;
            if p[hi_i] == '\\' {
                hi_i += 1;
            }
            let hi = *p.get(hi_i)?;
            found |= lo <= c && c <= hi;
            i = hi_i + 1;
        } else {
            found |= lo == c;
            i += 1;
        }
    }
}

/// Membership in a POSIX character class (`alpha`, `digit`, ...), ASCII rules.
pub fn class_has(class: &str, c: char) -> bool {
    match class {
        "alpha" => c.is_ascii_alphabetic(),
        "digit" => c.is_ascii_digit(),
        "alnum" => c.is_ascii_alphanumeric(),
        "upper" => c.is_ascii_uppercase(),
        "lower" => c.is_ascii_lowercase(),
        "space" => c.is_ascii_whitespace() || c == '\x0b',
        "blank" => c == ' ' || c == '\t',
        "punct" => c.is_ascii_punctuation(),
        "xdigit" => c.is_ascii_hexdigit(),
        "cntrl" => c.is_ascii_control(),
        "print" => c.is_ascii_graphic() || c == ' ',
        "graph" => c.is_ascii_graphic(),
        _ => false,
    }
}

/// Expands `pattern` against the repository, relative to `cwd`; the matches spelled as the
/// pattern spells its directories, sorted. Empty when nothing matches.
pub fn expand(repo: &dyn Repository, cwd: &RepoPath, pattern: &str) -> Vec<String> {
    let absolute = pattern.starts_with('/');
    let want_dir = pattern.ends_with('/');
    let mut cands = vec![if absolute {
        "/".to_string()
    } else {
        String::new()
    }];
    let comps: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    for comp in comps {
        let mut next = Vec::new();
        if has_magic(comp) {
            for cand in &cands {
                let dir = if cand.is_empty() { "." } else { cand.as_str() };
                let Ok(path) = RepoPath::resolve(repo.root(), cwd, dir) else {
                    continue;
                };
                let Ok(entries) = repo.list_dir(&path) else {
                    continue;
                };
                for e in entries {
                    // A leading dot is matched only by a pattern that spells it.
                    if e.name.starts_with('.') && !comp.starts_with('.') {
                        continue;
                    }
                    if matches(comp, &e.name) {
                        next.push(join(cand, &e.name));
                    }
                }
            }
        } else {
            let lit = unescape(comp);
            next = cands.iter().map(|c| join(c, &lit)).collect();
        }
        cands = next;
        if cands.is_empty() {
            return cands;
        }
    }
    let mut out: Vec<String> = cands
        .into_iter()
        .filter(|c| {
            let kind = RepoPath::resolve(repo.root(), cwd, c)
                .ok()
                .and_then(|p| repo.kind(&p));
            if want_dir {
                kind == Some(EntryKind::Dir)
            } else {
                kind.is_some()
            }
        })
        .map(|c| if want_dir { format!("{c}/") } else { c })
        .collect();
    out.sort();
    out
}

/// `dir/name` without doubling a slash (an empty `dir` is the current folder).
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_matching() {
        assert!(matches("*.py", "a.py"));
        assert!(!matches("*.py", "a.pyc"));
        assert!(matches("t?st_[a-c]*", "test_b1"));
        assert!(matches("[!a]x", "bx"));
        assert!(!matches("[!a]x", "ax"));
        assert!(matches("[[:digit:]]*", "1abc"));
        assert!(matches("a\\*", "a*"));
        assert!(!matches("a\\*", "ab"));
        assert!(matches("[x", "[x"));
        assert!(matches("*a*b*", "xxaxxbxx"));
        assert!(matches("[]]", "]"));
        assert!(matches_nocase("*.PY", "x.py"));
        assert!(has_magic("src/*.rs"));
        assert!(!has_magic("a\\*b"));
        assert!(!has_magic("[abc"));
    }
}
