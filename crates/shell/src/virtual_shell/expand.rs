//! Word expansion: braces, parameters, command substitution, arithmetic, field splitting of
//! unquoted results, and globbing of unquoted pattern characters against the repository.

use super::glob;
use super::interp::{Fail, Fds, Interp, PIPE_CAP};
use super::syntax::{ParamOp, Part, Word, parse_quoted_text};
use crate::LocalFuture;

/// One field being built: its text, and the same text as a glob pattern (quoted characters
/// escaped) for when it has live pattern characters.
#[derive(Default)]
struct Field {
    text: String,
    pattern: String,
}

impl Field {
    fn push_live(&mut self, s: &str) {
        self.text.push_str(s);
        self.pattern.push_str(s);
    }

    fn push_quoted(&mut self, s: &str) {
        self.text.push_str(s);
        self.pattern.push_str(&glob::escape(s));
    }
}

fn too_large() -> Fail {
    Fail::Msg("expansion too large".into())
}

impl Interp<'_> {
    /// Expands words into arguments: fields split, globs matched (an unmatched glob stays as
    /// written, as in bash).
    pub async fn expand_words(&mut self, words: &[Word], fds: Fds) -> Result<Vec<String>, Fail> {
        let mut out = Vec::new();
        let mut total = 0usize;
        for w in words.iter().flat_map(brace_expand) {
            for f in self.expand_fields(&w, fds).await? {
                let matched = if glob::has_magic(&f.pattern) {
                    self.budget.tick(100)?;
                    glob::expand(&*self.repo, &self.cwd, &f.pattern)
                } else {
                    Vec::new()
                };
                if matched.is_empty() {
                    total += f.text.len();
                    out.push(f.text);
                } else {
                    total += matched.iter().map(String::len).sum::<usize>();
                    out.extend(matched);
                }
                if total > PIPE_CAP {
                    return Err(too_large());
                }
            }
        }
        Ok(out)
    }

    /// Expands a word to one string: no splitting, no globbing (assignments, heredocs,
    /// `case`-like operands).
    pub async fn expand_single(&mut self, word: &Word, fds: Fds) -> Result<String, Fail> {
        let mut out = String::new();
        for part in word {
            match part {
                Part::Lit(s) | Part::Quoted(s) => out.push_str(s),
                Part::Tilde => out.push_str(&self.home()),
                _ => out.push_str(&self.part_value(part, fds).await?),
            }
            // Copying is work too: large values use up the budget in proportion.
            self.budget.tick(out.len() as u64 / 256)?;
            if out.len() > PIPE_CAP {
                return Err(too_large());
            }
        }
        Ok(out)
    }

    /// Expands a word used as a pattern (`${x%pat}`): quoted parts match literally.
    async fn expand_pattern(&mut self, word: &Word, fds: Fds) -> Result<String, Fail> {
        let mut out = String::new();
        for part in word {
            match part {
                Part::Lit(s) => out.push_str(s),
                Part::Quoted(s) => out.push_str(&glob::escape(s)),
                Part::Tilde => out.push_str(&glob::escape(&self.home())),
                _ => {
                    let v = self.part_value(part, fds).await?;
                    if is_quoted(part) {
                        out.push_str(&glob::escape(&v));
                    } else {
                        out.push_str(&v);
                    }
                }
            }
        }
        Ok(out)
    }

    async fn expand_fields(&mut self, word: &Word, fds: Fds) -> Result<Vec<Field>, Fail> {
        let mut fields = Vec::new();
        let mut cur = Field::default();
        let mut have = false;
        for part in word {
            match part {
                Part::Lit(s) => {
                    cur.push_live(s);
                    have = true;
                }
                Part::Quoted(s) => {
                    cur.push_quoted(s);
                    have = true;
                }
                Part::Tilde => {
                    cur.push_quoted(&self.home());
                    have = true;
                }
                _ => {
                    let value = self.part_value(part, fds).await?;
                    if is_quoted(part) {
                        cur.push_quoted(&value);
                        have = true;
                        continue;
                    }
                    // Unquoted results split on $IFS; the pieces stay live for globbing.
                    let split = split_fields(&value, &self.ifs());
                    if split.leading && have {
                        fields.push(std::mem::take(&mut cur));
                        have = false;
                    }
                    for (i, piece) in split.fields.iter().enumerate() {
                        if i > 0 {
                            fields.push(std::mem::take(&mut cur));
                        }
                        cur.push_live(piece);
                        have = true;
                    }
                    if split.trailing && !split.fields.is_empty() {
                        fields.push(std::mem::take(&mut cur));
                        have = false;
                    }
                }
            }
            self.budget.tick(cur.text.len() as u64 / 256)?;
            if cur.text.len() > PIPE_CAP {
                return Err(too_large());
            }
        }
        if have {
            fields.push(cur);
        }
        Ok(fields)
    }

    /// The field separators: `$IFS`, or blanks and newlines when it is unset.
    pub fn ifs(&self) -> String {
        self.vars
            .get("IFS")
            .cloned()
            .unwrap_or_else(|| " \t\n".into())
    }

    fn home(&self) -> String {
        self.vars
            .get("HOME")
            .cloned()
            .unwrap_or_else(|| self.repo.root().to_string())
    }

    /// The value of a parameter, substitution or arithmetic part.
    fn part_value<'s>(
        &'s mut self,
        part: &'s Part,
        fds: Fds,
    ) -> LocalFuture<'s, Result<String, Fail>> {
        Box::pin(async move {
            match part {
                Part::Param { name, op, .. } => self.param(name, op, fds).await,
                Part::Subst { list, .. } => self.command_subst(list, fds).await,
                Part::Arith { expr, .. } => {
                    let word =
                        parse_quoted_text(expr, true).map_err(|e| Fail::Msg(e.to_string()))?;
                    let text = self.expand_single(&word, fds).await?;
                    super::arith::eval(&text, &mut self.vars)
                        .map(|n| n.to_string())
                        .map_err(|e| Fail::Msg(format!("{}: {e}", text.trim())))
                }
                Part::Lit(s) | Part::Quoted(s) => Ok(s.clone()),
                Part::Tilde => Ok(self.home()),
            }
        })
    }

    fn lookup(&self, name: &str) -> Option<String> {
        match name {
            "?" => Some(self.status.to_string()),
            "$" => Some("4242".into()),
            "#" => Some("0".into()),
            "0" => Some("bash".into()),
            "@" | "*" | "-" | "!" => Some(String::new()),
            "PWD" => Some(self.cwd.display_under(self.repo.root())),
            _ => self.vars.get(name).cloned(),
        }
    }

    async fn param(&mut self, name: &str, op: &ParamOp, fds: Fds) -> Result<String, Fail> {
        let value = self.lookup(name);
        let unset_or_empty = |colon: bool| value.as_deref().is_none_or(|v| colon && v.is_empty());
        Ok(match op {
            ParamOp::Plain => match value {
                Some(v) => v,
                None if self.opts.nounset && !name.chars().all(|c| c.is_ascii_digit()) => {
                    return Err(Fail::Msg(format!("{name}: unbound variable")));
                }
                None => String::new(),
            },
            ParamOp::Length => value.unwrap_or_default().chars().count().to_string(),
            ParamOp::Default { word, colon } => {
                if unset_or_empty(*colon) {
                    self.expand_single(word, fds).await?
                } else {
                    value.unwrap_or_default()
                }
            }
            ParamOp::Assign { word, colon } => {
                if unset_or_empty(*colon) {
                    let v = self.expand_single(word, fds).await?;
                    self.vars.insert(name.to_string(), v.clone());
                    v
                } else {
                    value.unwrap_or_default()
                }
            }
            ParamOp::Alternate { word, colon } => {
                if unset_or_empty(*colon) {
                    String::new()
                } else {
                    self.expand_single(word, fds).await?
                }
            }
            ParamOp::TrimPrefix { pattern, longest } => {
                let v = value.unwrap_or_default();
                let pat = self.expand_pattern(pattern, fds).await?;
                let cuts: Vec<usize> = char_boundaries(&v);
                let found = if *longest {
                    cuts.iter().rev().find(|&&i| glob::matches(&pat, &v[..i]))
                } else {
                    cuts.iter().find(|&&i| glob::matches(&pat, &v[..i]))
                };
                found.map_or(v.clone(), |&i| v[i..].to_string())
            }
            ParamOp::TrimSuffix { pattern, longest } => {
                let v = value.unwrap_or_default();
                let pat = self.expand_pattern(pattern, fds).await?;
                let cuts: Vec<usize> = char_boundaries(&v);
                let found = if *longest {
                    cuts.iter().find(|&&i| glob::matches(&pat, &v[i..]))
                } else {
                    cuts.iter().rev().find(|&&i| glob::matches(&pat, &v[i..]))
                };
                found.map_or(v.clone(), |&i| v[..i].to_string())
            }
        })
    }
}

/// A value split on `$IFS`, and whether separators stood at its start and end (which end the
/// field before it and start a new one after it).
pub(super) struct Split<'v> {
    pub fields: Vec<&'v str>,
    pub leading: bool,
    pub trailing: bool,
}

/// POSIX field splitting: runs of IFS blanks separate, each other IFS character separates
/// (so `a,,b` has an empty middle field), and blanks at either end are dropped.
pub(super) fn split_fields<'v>(value: &'v str, ifs: &str) -> Split<'v> {
    if ifs.is_empty() {
        let fields = if value.is_empty() {
            Vec::new()
        } else {
            vec![value]
        };
        return Split {
            fields,
            leading: false,
            trailing: false,
        };
    }
    let is_blank = |c: char| c.is_whitespace() && ifs.contains(c);
    let mut rest = value.trim_start_matches(is_blank);
    let leading = rest.len() < value.len();
    let mut fields = Vec::new();
    while !rest.is_empty() {
        let (field, after) = first_field(rest, ifs);
        fields.push(field);
        rest = after;
    }
    Split {
        fields,
        leading,
        trailing: value.ends_with(|c: char| ifs.contains(c)),
    }
}

/// The text before the first IFS character, and what follows its separator (blanks, at most
/// one other IFS character, blanks).
pub(super) fn first_field<'v>(text: &'v str, ifs: &str) -> (&'v str, &'v str) {
    let is_blank = |c: char| c.is_whitespace() && ifs.contains(c);
    let end = text.find(|c: char| ifs.contains(c)).unwrap_or(text.len());
    let mut rest = text[end..].trim_start_matches(is_blank);
    if let Some(c) = rest
        .chars()
        .next()
        .filter(|&c| ifs.contains(c) && !is_blank(c))
    {
        rest = rest[c.len_utf8()..].trim_start_matches(is_blank);
    }
    (&text[..end], rest)
}

fn is_quoted(part: &Part) -> bool {
    match part {
        Part::Param { quoted, .. } | Part::Subst { quoted, .. } | Part::Arith { quoted, .. } => {
            *quoted
        }
        Part::Quoted(_) => true,
        Part::Lit(_) | Part::Tilde => false,
    }
}

/// Every byte offset that starts a character, plus the end.
fn char_boundaries(s: &str) -> Vec<usize> {
    s.char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(s.len()))
        .collect()
}

/// Brace expansions one word may produce at most.
const MAX_BRACE_WORDS: usize = 4096;

/// `{a,b}` and `{1..5}` in unquoted text, first to last: `file{,.bak}` is `file file.bak`.
fn brace_expand(word: &Word) -> Vec<Word> {
    let mut out = Vec::new();
    brace_into(word.clone(), &mut out, 0);
    out
}

fn brace_into(word: Word, out: &mut Vec<Word>, depth: usize) {
    // Deeper nesting than this is left as written rather than recursed into.
    if depth > 32 {
        out.push(word);
        return;
    }
    for (i, part) in word.iter().enumerate() {
        let Part::Lit(text) = part else { continue };
        let Some((pre, alts, post)) = find_brace(text) else {
            continue;
        };
        for alt in alts {
            if out.len() >= MAX_BRACE_WORDS {
                return;
            }
            let mut w: Word = word[..i].to_vec();
            w.push(Part::Lit(format!("{pre}{alt}{post}")));
            w.extend(word[i + 1..].iter().cloned());
            brace_into(w, out, depth + 1);
        }
        return;
    }
    out.push(word);
}

/// The first brace group in `text` that expands: (text before, alternatives, text after).
fn find_brace(text: &str) -> Option<(&str, Vec<String>, &str)> {
    let bytes = text.as_bytes();
    for (open, _) in text.match_indices('{') {
        let mut depth = 0;
        let mut commas = Vec::new();
        let mut close = None;
        for (i, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                b',' if depth == 1 => commas.push(i),
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        let inner = &text[open + 1..close];
        let alts: Vec<String> = if commas.is_empty() {
            match sequence(inner) {
                Some(seq) => seq,
                None => continue,
            }
        } else {
            let mut bounds = vec![open];
            bounds.extend(&commas);
            bounds.push(close);
            bounds
                .windows(2)
                .map(|w| text[w[0] + 1..w[1]].to_string())
                .collect()
        };
        return Some((&text[..open], alts, &text[close + 1..]));
    }
    None
}

/// `1..5`, `a..e`, `01..10` (padded), `1..10..3`.
fn sequence(inner: &str) -> Option<Vec<String>> {
    let parts: Vec<&str> = inner.split("..").collect();
    let (from, to, step) = match parts[..] {
        [a, b] => (a, b, 1i64),
        [a, b, s] => (a, b, s.parse::<i64>().ok()?.abs().max(1)),
        _ => return None,
    };
    if let (Ok(a), Ok(b)) = (from.parse::<i64>(), to.parse::<i64>()) {
        let width = if [from, to].iter().any(|s| {
            s.trim_start_matches('-').len() > 1 && s.trim_start_matches('-').starts_with('0')
        }) {
            from.len().max(to.len())
        } else {
            0
        };
        let count = (a - b).unsigned_abs() / step as u64 + 1;
        if count > MAX_BRACE_WORDS as u64 {
            return None;
        }
        let dir = if b >= a { step } else { -step };
        return Some(
            (0..count as i64)
                .map(|k| format!("{:0width$}", a + k * dir))
                .collect(),
        );
    }
    let (mut fc, mut tc) = (from.chars(), to.chars());
    let (Some(a), None, Some(b), None) = (fc.next(), fc.next(), tc.next(), tc.next()) else {
        return None;
    };
    if !a.is_ascii_alphabetic() || !b.is_ascii_alphabetic() {
        return None;
    }
    let (a, b) = (a as i64, b as i64);
    let dir = if b >= a { step } else { -step };
    let count = (a - b).abs() / step + 1;
    Some(
        (0..count)
            .filter_map(|k| char::from_u32((a + k * dir) as u32))
            .map(String::from)
            .collect(),
    )
}
