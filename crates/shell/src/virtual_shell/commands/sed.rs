//! `sed`: addresses (`N`, `$`, `/re/`, ranges, `!`), the editing commands scripts use
//! (`s`, `p`, `d`, `q`, `a`/`i`/`c`, `y`, `n`/`N`, hold space, labels and branches, blocks),
//! `-n`, `-E`, `-e`, `-f`, `-s` and in-place editing with `-i`.

use regex::bytes::Regex;

use super::posix_regex::compile;
use super::{Ctx, errno, parse_opts, split_lines};
use crate::virtual_shell::interp::{Exec, Flow};
use lilypad_repo::EntryKind;

#[derive(Clone)]
enum Addr {
    Line(usize),
    Last,
    /// `None`: the last regex used.
    Re(Option<Regex>),
    Step(usize, usize),
}

#[derive(Clone)]
enum Addr2 {
    At(Addr),
    Plus(usize),
    Multiple(usize),
}

#[derive(Clone)]
enum Repl {
    Lit(Vec<u8>),
    Group(usize),
    Case(CaseConv),
}

#[derive(Clone, Copy, PartialEq)]
enum CaseConv {
    Upper,
    Lower,
    UpperOne,
    LowerOne,
    End,
}

#[derive(Clone)]
enum Kind {
    BlockStart(usize),
    BlockEnd,
    Print,
    PrintFirst,
    Delete,
    DeleteFirst,
    Quit(i32),
    QuitSilent(i32),
    Subst {
        re: Option<Regex>,
        repl: Vec<Repl>,
        global: bool,
        nth: usize,
        print: bool,
    },
    Translit(Vec<(char, char)>),
    LineNo,
    Append(String),
    Insert(String),
    Change(String),
    Next,
    NextAppend,
    Hold,
    HoldAppend,
    Get,
    GetAppend,
    Exchange,
    Zap,
    List,
    FileName,
    Label,
    Branch(String),
    BranchIfSub(String),
    BranchUnlessSub(String),
}

#[derive(Clone)]
struct Cmd {
    a1: Option<Addr>,
    a2: Option<Addr2>,
    negate: bool,
    kind: Kind,
    label: String,
}

struct ScriptParser {
    s: Vec<char>,
    pos: usize,
    extended: bool,
}

type PResult<T> = Result<T, String>;

impl ScriptParser {
    fn peek(&self) -> Option<char> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
    }

    fn err<T>(&self, msg: &str) -> PResult<T> {
        Err(format!(
            "-e expression #1, char {}: {msg}",
            self.pos.min(self.s.len())
        ))
    }

    fn number(&mut self) -> Option<usize> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return None;
        }
        self.s[start..self.pos]
            .iter()
            .collect::<String>()
            .parse()
            .ok()
    }

    /// Text up to an unescaped `delim`; `\delim` stands for the delimiter, `\n` for newline.
    fn delimited(&mut self, delim: char, regex: bool) -> Option<String> {
        let mut out = String::new();
        loop {
            let c = self.peek()?;
            self.pos += 1;
            if c == delim {
                return Some(out);
            }
            if c == '\\' {
                let e = self.peek()?;
                self.pos += 1;
                if e == delim {
                    if regex && "$*.[]^".contains(e) {
                        out.push('\\');
                    }
                    out.push(e);
                } else if e == 'n' && !regex {
                    out.push('\n');
                } else {
                    out.push('\\');
                    out.push(e);
                }
            } else if c == '\n' && !regex {
                out.push('\n');
            } else {
                out.push(c);
            }
        }
    }

    fn regex(&mut self, text: &str, nocase: bool) -> PResult<Option<Regex>> {
        if text.is_empty() {
            return Ok(None);
        }
        compile(
            &[text.to_string()],
            self.extended,
            false,
            false,
            nocase,
            false,
        )
        .map(Some)
        .or_else(|e| self.err(&e))
    }

    fn address(&mut self) -> PResult<Option<Addr>> {
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                let n = self.number().unwrap_or(0);
                if self.peek() == Some('~') {
                    self.pos += 1;
                    let step = self.number().unwrap_or(0);
                    return Ok(Some(Addr::Step(n, step)));
                }
                Ok(Some(Addr::Line(n)))
            }
            Some('$') => {
                self.pos += 1;
                Ok(Some(Addr::Last))
            }
            Some(c @ ('/' | '\\')) => {
                self.pos += 1;
                let delim = if c == '\\' {
                    let d = self.peek().ok_or("-e expression #1: unexpected end")?;
                    self.pos += 1;
                    d
                } else {
                    '/'
                };
                let Some(text) = self.delimited(delim, true) else {
                    return self.err("unterminated address regex");
                };
                let mut nocase = false;
                while let Some(f @ ('I' | 'M')) = self.peek() {
                    nocase |= f == 'I';
                    self.pos += 1;
                }
                Ok(Some(Addr::Re(self.regex(&text, nocase)?)))
            }
            _ => Ok(None),
        }
    }

    /// Text for `a`, `i`, `c`: one-liner (`a text`) or classic (`a\` newline text).
    fn text_arg(&mut self) -> PResult<String> {
        self.skip_ws();
        if self.peek() == Some('\\') {
            self.pos += 1;
            if self.peek() == Some('\n') {
                self.pos += 1;
            }
        }
        let mut out = String::new();
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                '\n' => break,
                '\\' => match self.peek() {
                    Some('\n') => {
                        out.push('\n');
                        self.pos += 1;
                    }
                    Some(e) => {
                        out.push(if e == 't' { '\t' } else { e });
                        self.pos += 1;
                    }
                    None => {}
                },
                _ => out.push(c),
            }
        }
        Ok(out)
    }

    fn label(&mut self) -> String {
        self.skip_ws();
        let start = self.pos;
        while !matches!(self.peek(), None | Some('\n' | ';' | '}')) {
            self.pos += 1;
        }
        self.s[start..self.pos]
            .iter()
            .collect::<String>()
            .trim_end()
            .to_string()
    }

    fn replacement(text: &str) -> Vec<Repl> {
        let mut parts = Vec::new();
        let mut lit = Vec::new();
        let mut chars = text.chars();
        let flush = |lit: &mut Vec<u8>, parts: &mut Vec<Repl>| {
            if !lit.is_empty() {
                parts.push(Repl::Lit(std::mem::take(lit)));
            }
        };
        while let Some(c) = chars.next() {
            match c {
                '&' => {
                    flush(&mut lit, &mut parts);
                    parts.push(Repl::Group(0));
                }
                '\\' => match chars.next() {
                    Some(d @ '0'..='9') => {
                        flush(&mut lit, &mut parts);
                        parts.push(Repl::Group(d as usize - '0' as usize));
                    }
                    Some('n') => lit.push(b'\n'),
                    Some('t') => lit.push(b'\t'),
                    Some(k @ ('U' | 'L' | 'u' | 'l' | 'E')) => {
                        flush(&mut lit, &mut parts);
                        parts.push(Repl::Case(match k {
                            'U' => CaseConv::Upper,
                            'L' => CaseConv::Lower,
                            'u' => CaseConv::UpperOne,
                            'l' => CaseConv::LowerOne,
                            _ => CaseConv::End,
                        }));
                    }
                    Some(o) => {
                        let mut b = [0u8; 4];
                        lit.extend_from_slice(o.encode_utf8(&mut b).as_bytes());
                    }
                    None => lit.push(b'\\'),
                },
                _ => {
                    let mut b = [0u8; 4];
                    lit.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                }
            }
        }
        flush(&mut lit, &mut parts);
        parts
    }

    fn parse(&mut self) -> PResult<Vec<Cmd>> {
        let mut cmds: Vec<Cmd> = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        loop {
            while matches!(self.peek(), Some(' ' | '\t' | '\n' | ';')) {
                self.pos += 1;
            }
            let Some(_) = self.peek() else { break };
            if self.peek() == Some('#') {
                while !matches!(self.peek(), None | Some('\n')) {
                    self.pos += 1;
                }
                continue;
            }
            let a1 = self.address()?;
            let mut a2 = None;
            if a1.is_some() && self.peek() == Some(',') {
                self.pos += 1;
                self.skip_ws();
                a2 = Some(match self.peek() {
                    Some('+') => {
                        self.pos += 1;
                        Addr2::Plus(self.number().unwrap_or(0))
                    }
                    Some('~') => {
                        self.pos += 1;
                        Addr2::Multiple(self.number().unwrap_or(0))
                    }
                    _ => match self.address()? {
                        Some(a) => Addr2::At(a),
                        None => return self.err("unexpected `,'"),
                    },
                });
            }
            if matches!(a1, Some(Addr::Line(0))) && !matches!(a2, Some(Addr2::At(Addr::Re(_)))) {
                return self.err("invalid usage of line address 0");
            }
            self.skip_ws();
            let mut negate = false;
            while self.peek() == Some('!') {
                negate = true;
                self.pos += 1;
                self.skip_ws();
            }
            let Some(c) = self.peek() else {
                return self.err("missing command");
            };
            self.pos += 1;
            let mut label = String::new();
            let kind = match c {
                '{' => {
                    open.push(cmds.len());
                    Kind::BlockStart(0)
                }
                '}' => {
                    if a1.is_some() {
                        return self.err("unexpected `}'");
                    }
                    let Some(start) = open.pop() else {
                        return self.err("unexpected `}'");
                    };
                    let end = cmds.len();
                    cmds[start].kind = Kind::BlockStart(end);
                    Kind::BlockEnd
                }
                'p' => Kind::Print,
                'P' => Kind::PrintFirst,
                'd' => Kind::Delete,
                'D' => Kind::DeleteFirst,
                'q' | 'Q' => {
                    self.skip_ws();
                    let code = self.number().unwrap_or(0) as i32;
                    if c == 'q' {
                        Kind::Quit(code)
                    } else {
                        Kind::QuitSilent(code)
                    }
                }
                '=' => Kind::LineNo,
                'n' => Kind::Next,
                'N' => Kind::NextAppend,
                'h' => Kind::Hold,
                'H' => Kind::HoldAppend,
                'g' => Kind::Get,
                'G' => Kind::GetAppend,
                'x' => Kind::Exchange,
                'z' => Kind::Zap,
                'l' => Kind::List,
                'F' => Kind::FileName,
                'a' => Kind::Append(self.text_arg()?),
                'i' => Kind::Insert(self.text_arg()?),
                'c' => Kind::Change(self.text_arg()?),
                ':' => {
                    if a1.is_some() {
                        return self.err(": doesn't want any addresses");
                    }
                    label = self.label();
                    if label.is_empty() {
                        return self.err("\":\" lacks a label");
                    }
                    Kind::Label
                }
                'b' => Kind::Branch(self.label()),
                't' => Kind::BranchIfSub(self.label()),
                'T' => Kind::BranchUnlessSub(self.label()),
                's' => {
                    let Some(delim) = self.peek().filter(|d| *d != '\n' && *d != '\\') else {
                        return self.err("unterminated `s' command");
                    };
                    self.pos += 1;
                    let Some(re_text) = self.delimited(delim, true) else {
                        return self.err("unterminated `s' command");
                    };
                    let Some(repl_text) = self.delimited(delim, false) else {
                        return self.err("unterminated `s' command");
                    };
                    let (mut global, mut nth, mut print, mut nocase) = (false, 1, false, false);
                    loop {
                        match self.peek() {
                            Some('g') => global = true,
                            Some('p') => print = true,
                            Some('i' | 'I') => nocase = true,
                            Some('m' | 'M' | 'e') => {}
                            Some(d) if d.is_ascii_digit() => {
                                nth = self.number().unwrap_or(1).max(1);
                                continue;
                            }
                            _ => break,
                        }
                        self.pos += 1;
                    }
                    let re = self.regex(&re_text, nocase)?;
                    Kind::Subst {
                        re,
                        repl: Self::replacement(&repl_text),
                        global,
                        nth,
                        print,
                    }
                }
                'y' => {
                    let Some(delim) = self.peek() else {
                        return self.err("unterminated `y' command");
                    };
                    self.pos += 1;
                    let (Some(from), Some(to)) =
                        (self.delimited(delim, false), self.delimited(delim, false))
                    else {
                        return self.err("unterminated `y' command");
                    };
                    let unescape = |s: &str| s.replace("\\\\", "\\");
                    let (from, to): (Vec<char>, Vec<char>) = (
                        unescape(&from).chars().collect(),
                        unescape(&to).chars().collect(),
                    );
                    if from.len() != to.len() {
                        return self.err("strings for `y' command are different lengths");
                    }
                    Kind::Translit(from.into_iter().zip(to).collect())
                }
                other => return self.err(&format!("unknown command: `{other}'")),
            };
            let takes_rest = matches!(kind, Kind::Append(_) | Kind::Insert(_) | Kind::Change(_));
            cmds.push(Cmd {
                a1,
                a2,
                negate,
                kind,
                label,
            });
            if !takes_rest && c != '{' {
                self.skip_ws();
                match self.peek() {
                    None | Some(';' | '\n' | '}' | '#') => {}
                    Some(_) => return self.err("extra characters after command"),
                }
            }
        }
        if !open.is_empty() {
            return self.err("unmatched `{'");
        }
        for c in &cmds {
            if let Kind::Branch(l) | Kind::BranchIfSub(l) | Kind::BranchUnlessSub(l) = &c.kind
                && !l.is_empty()
                && !cmds
                    .iter()
                    .any(|d| matches!(d.kind, Kind::Label) && d.label == *l)
            {
                return Err(format!(
                    "-e expression #1, char 0: can't find label for jump to `{l}'"
                ));
            }
        }
        Ok(cmds)
    }
}

struct Line {
    text: Vec<u8>,
    newline: bool,
}

/// Execution state across one input stream.
struct Machine<'p> {
    prog: &'p [Cmd],
    quiet: bool,
    active: Vec<bool>,
    range_end: Vec<usize>,
    hold: Vec<u8>,
    last_re: Option<Regex>,
    line_no: usize,
    file_name: String,
    out: Vec<u8>,
    exit: Option<i32>,
}

enum Cycle {
    /// End of cycle: autoprint (unless `-n`) and go on.
    End,
    /// `d`: no autoprint.
    Deleted,
    /// `D` with a newline left: restart without reading.
    Restart,
}

impl Machine<'_> {
    fn re_for<'a>(&'a self, re: &'a Option<Regex>) -> Option<&'a Regex> {
        re.as_ref().or(self.last_re.as_ref())
    }

    fn addr_matches(&mut self, a: &Addr, ps: &[u8], last: bool) -> bool {
        match a {
            Addr::Line(n) => self.line_no == *n,
            Addr::Last => last,
            Addr::Step(first, step) => {
                if *step == 0 {
                    self.line_no == *first
                } else {
                    self.line_no >= *first && (self.line_no - first).is_multiple_of(*step)
                }
            }
            Addr::Re(re) => {
                if let Some(r) = re {
                    self.last_re = Some(r.clone());
                }
                self.re_for(re).is_some_and(|r| r.is_match(ps))
            }
        }
    }

    fn selected(&mut self, pc: usize, ps: &[u8], last: bool) -> bool {
        let cmd = &self.prog[pc];
        let hit = match (&cmd.a1, &cmd.a2) {
            (None, _) => true,
            (Some(a1), None) => self.addr_matches(a1, ps, last),
            (Some(a1), Some(a2)) => {
                // `0,/re/` is active from the first line, so the regex may end it there.
                let starts_at_zero =
                    matches!(a1, Addr::Line(0)) && matches!(a2, Addr2::At(Addr::Re(_)));
                if self.active[pc] {
                    let end = match a2 {
                        Addr2::At(Addr::Line(n)) => self.line_no >= *n,
                        Addr2::Plus(_) => self.line_no >= self.range_end[pc],
                        Addr2::Multiple(m) => *m == 0 || self.line_no.is_multiple_of(*m),
                        Addr2::At(a) => self.addr_matches(a, ps, last),
                    };
                    if end {
                        self.active[pc] = false;
                    }
                    true
                } else if self.addr_matches(a1, ps, last) || (starts_at_zero && self.line_no == 1) {
                    let ends_now = match a2 {
                        Addr2::At(Addr::Line(n)) => *n <= self.line_no,
                        Addr2::Plus(n) => {
                            self.range_end[pc] = self.line_no + n;
                            *n == 0
                        }
                        Addr2::Multiple(m) => *m == 0 || self.line_no.is_multiple_of(*m),
                        Addr2::At(Addr::Last) => last,
                        Addr2::At(a @ Addr::Re(_)) if starts_at_zero => {
                            self.addr_matches(a, ps, last)
                        }
                        Addr2::At(_) => false,
                    };
                    self.active[pc] = !ends_now;
                    true
                } else {
                    false
                }
            }
        };
        hit != cmd.negate
    }

    fn substitute(
        &mut self,
        re: &Option<Regex>,
        repl: &[Repl],
        global: bool,
        nth: usize,
        ps: &mut Vec<u8>,
    ) -> bool {
        if let Some(r) = re {
            self.last_re = Some(r.clone());
        }
        let Some(r) = self.re_for(re).cloned() else {
            return false;
        };
        let mut out = Vec::with_capacity(ps.len());
        let mut last = 0;
        let mut count = 0;
        let mut changed = false;
        for caps in r.captures_iter(ps) {
            let Some(m) = caps.get(0) else { continue };
            count += 1;
            if count < nth || (!global && count > nth) {
                continue;
            }
            out.extend_from_slice(&ps[last..m.start()]);
            expand_replacement(repl, &caps, &mut out);
            last = m.end();
            changed = true;
        }
        if changed {
            out.extend_from_slice(&ps[last..]);
            *ps = out;
        }
        changed
    }

    fn emit(&mut self, text: &[u8], newline: bool) {
        self.out.extend_from_slice(text);
        if newline {
            self.out.push(b'\n');
        }
    }

    /// Runs the script over `lines`, appending output to `self.out`.
    fn run(
        &mut self,
        ctx: &mut Ctx<'_, '_>,
        lines: &[Line],
        is_last_stream: bool,
    ) -> Result<(), Flow> {
        let mut idx = 0;
        let mut ps: Vec<u8> = Vec::new();
        let mut restart = false;
        let mut ps_newline = true;
        while self.exit.is_none() && (idx < lines.len() || restart) {
            if !restart {
                ps = lines[idx].text.clone();
                ps_newline = lines[idx].newline;
                idx += 1;
                self.line_no += 1;
            }
            restart = false;
            let mut appends: Vec<Vec<u8>> = Vec::new();
            let mut sub_flag = false;
            let mut pc = 0;
            let mut outcome = Cycle::End;
            while pc < self.prog.len() {
                // Commands cost in proportion to the pattern space they work on.
                ctx.tick(1 + ps.len() as u64 / 256)?;
                let last = idx >= lines.len() && is_last_stream;
                if !self.selected(pc, &ps, last) {
                    pc = match self.prog[pc].kind {
                        Kind::BlockStart(end) => end + 1,
                        _ => pc + 1,
                    };
                    continue;
                }
                let kind = self.prog[pc].kind.clone();
                pc += 1;
                match kind {
                    Kind::BlockStart(_) | Kind::BlockEnd | Kind::Label => {}
                    Kind::Print => self.emit(&ps.clone(), true),
                    Kind::PrintFirst => {
                        let first = ps
                            .split(|&b| b == b'\n')
                            .next()
                            .unwrap_or_default()
                            .to_vec();
                        self.emit(&first, true);
                    }
                    Kind::Delete => {
                        outcome = Cycle::Deleted;
                        break;
                    }
                    Kind::DeleteFirst => match ps.iter().position(|&b| b == b'\n') {
                        Some(i) => {
                            ps.drain(..=i);
                            outcome = Cycle::Restart;
                            break;
                        }
                        None => {
                            outcome = Cycle::Deleted;
                            break;
                        }
                    },
                    Kind::Quit(code) => {
                        self.exit = Some(code);
                        break;
                    }
                    Kind::QuitSilent(code) => {
                        self.exit = Some(code);
                        outcome = Cycle::Deleted;
                        break;
                    }
                    Kind::Subst {
                        re,
                        repl,
                        global,
                        nth,
                        print,
                    } => {
                        if self.substitute(&re, &repl, global, nth, &mut ps) {
                            sub_flag = true;
                            if print {
                                self.emit(&ps.clone(), true);
                            }
                        }
                    }
                    Kind::Translit(map) => {
                        let text: String = String::from_utf8_lossy(&ps)
                            .chars()
                            .map(|c| map.iter().find(|(f, _)| *f == c).map_or(c, |(_, t)| *t))
                            .collect();
                        ps = text.into_bytes();
                    }
                    Kind::LineNo => {
                        let n = format!("{}\n", self.line_no);
                        self.out.extend_from_slice(n.as_bytes());
                    }
                    Kind::Append(t) => appends.push(format!("{t}\n").into_bytes()),
                    Kind::Insert(t) => self.emit(t.as_bytes(), true),
                    Kind::Change(t) => {
                        let mid_range = self.prog[pc - 1].a2.is_some()
                            && self.active[pc - 1]
                            && !self.prog[pc - 1].negate;
                        if !mid_range {
                            self.emit(t.as_bytes(), true);
                        }
                        outcome = Cycle::Deleted;
                        break;
                    }
                    Kind::Next => {
                        if idx >= lines.len() {
                            if !self.quiet {
                                self.emit(&ps.clone(), ps_newline);
                            }
                            self.flush_appends(&mut appends);
                            self.exit = Some(0);
                            return Ok(());
                        }
                        if !self.quiet {
                            self.emit(&ps.clone(), ps_newline);
                        }
                        self.flush_appends(&mut appends);
                        ps = lines[idx].text.clone();
                        ps_newline = lines[idx].newline;
                        idx += 1;
                        self.line_no += 1;
                    }
                    Kind::NextAppend => {
                        if idx >= lines.len() {
                            // GNU prints the pattern space when `N` runs out of input.
                            break;
                        }
                        ps.push(b'\n');
                        ps.extend_from_slice(&lines[idx].text);
                        ps_newline = lines[idx].newline;
                        idx += 1;
                        self.line_no += 1;
                    }
                    Kind::Hold => self.hold = ps.clone(),
                    Kind::HoldAppend => {
                        self.hold.push(b'\n');
                        self.hold.extend_from_slice(&ps);
                    }
                    Kind::Get => ps = self.hold.clone(),
                    Kind::GetAppend => {
                        ps.push(b'\n');
                        ps.extend_from_slice(&self.hold.clone());
                    }
                    Kind::Exchange => std::mem::swap(&mut ps, &mut self.hold),
                    Kind::Zap => ps.clear(),
                    Kind::List => {
                        let l = list_form(&ps);
                        self.out.extend_from_slice(l.as_bytes());
                    }
                    Kind::FileName => {
                        let n = format!("{}\n", self.file_name);
                        self.out.extend_from_slice(n.as_bytes());
                    }
                    Kind::Branch(l) => pc = self.jump(&l),
                    Kind::BranchIfSub(l) => {
                        if sub_flag {
                            sub_flag = false;
                            pc = self.jump(&l);
                        }
                    }
                    Kind::BranchUnlessSub(l) => {
                        if sub_flag {
                            sub_flag = false;
                        } else {
                            pc = self.jump(&l);
                        }
                    }
                }
            }
            match outcome {
                Cycle::End => {
                    if !self.quiet {
                        self.emit(&ps.clone(), ps_newline);
                    }
                }
                Cycle::Deleted => {}
                Cycle::Restart => restart = true,
            }
            self.flush_appends(&mut appends);
        }
        Ok(())
    }

    fn flush_appends(&mut self, appends: &mut Vec<Vec<u8>>) {
        for a in appends.drain(..) {
            self.out.extend_from_slice(&a);
        }
    }

    fn jump(&self, label: &str) -> usize {
        if label.is_empty() {
            return self.prog.len();
        }
        self.prog
            .iter()
            .position(|c| matches!(c.kind, Kind::Label) && c.label == label)
            .map_or(self.prog.len(), |i| i + 1)
    }
}

fn expand_replacement(repl: &[Repl], caps: &regex::bytes::Captures<'_>, out: &mut Vec<u8>) {
    let mut mode: Option<CaseConv> = None;
    let mut one: Option<CaseConv> = None;
    let push =
        |bytes: &[u8], out: &mut Vec<u8>, mode: Option<CaseConv>, one: &mut Option<CaseConv>| {
            for &b in bytes {
                let mut c = match mode {
                    Some(CaseConv::Upper) => b.to_ascii_uppercase(),
                    Some(CaseConv::Lower) => b.to_ascii_lowercase(),
                    _ => b,
                };
                match one.take() {
                    Some(CaseConv::UpperOne) => c = c.to_ascii_uppercase(),
                    Some(CaseConv::LowerOne) => c = c.to_ascii_lowercase(),
                    _ => {}
                }
                out.push(c);
            }
        };
    for part in repl {
        match part {
            Repl::Lit(b) => push(b, out, mode, &mut one),
            Repl::Group(n) => {
                let bytes = caps.get(*n).map_or(&[][..], |m| m.as_bytes());
                push(bytes, out, mode, &mut one);
            }
            Repl::Case(c @ (CaseConv::UpperOne | CaseConv::LowerOne)) => one = Some(*c),
            Repl::Case(CaseConv::End) => mode = None,
            Repl::Case(c) => mode = Some(*c),
        }
    }
}

/// `l`: escapes and octal for unprintable bytes, lines folded at 69 columns, `$` at the end.
fn list_form(ps: &[u8]) -> String {
    let mut pieces = Vec::new();
    for &b in ps {
        pieces.push(match b {
            b'\\' => "\\\\".to_string(),
            0x07 => "\\a".into(),
            0x08 => "\\b".into(),
            0x0c => "\\f".into(),
            b'\n' => "\\n".into(),
            b'\r' => "\\r".into(),
            b'\t' => "\\t".into(),
            0x0b => "\\v".into(),
            b if (0x20..0x7f).contains(&b) => (b as char).to_string(),
            b => format!("\\{b:03o}"),
        });
    }
    let mut out = String::new();
    let mut col = 0;
    for p in pieces {
        if col + p.len() > 69 {
            out.push_str("\\\n");
            col = 0;
        }
        col += p.len();
        out.push_str(&p);
    }
    out.push_str("$\n");
    out
}

fn to_lines(data: &[u8]) -> Vec<Line> {
    let (lines, ends) = split_lines(data);
    let n = lines.len();
    lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| Line {
            text: l.to_vec(),
            newline: i + 1 < n || ends,
        })
        .collect()
}

pub(super) fn sed(ctx: &mut Ctx<'_, '_>, args: &[String]) -> Exec {
    let opts = match parse_opts(
        args,
        "n|quiet|silent e|expression= f|file= i|in-place? E|r|regexp-extended s|separate z|null-data u|unbuffered \
         posix l|line-length= debug follow-symlinks b|binary sandbox",
    ) {
        Ok(o) => o,
        Err(e) => {
            ctx.err(format_args!("sed: {e}"));
            ctx.err("Usage: sed [OPTION]... {script-only-if-no-other-script} [input-file]...");
            return Ok(1);
        }
    };
    let mut operands = opts.operands.clone();
    let mut scripts: Vec<String> = opts.values("e").map(str::to_string).collect();
    for f in opts.values("f").map(str::to_string).collect::<Vec<_>>() {
        match ctx.read_operand(&f) {
            Ok(d) => scripts.push(
                String::from_utf8_lossy(&d)
                    .trim_end_matches('\n')
                    .to_string(),
            ),
            Err(e) => {
                ctx.err(format_args!("sed: couldn't open file {f}: {}", errno(&e)));
                return Ok(1);
            }
        }
    }
    if scripts.is_empty() {
        if operands.is_empty() {
            ctx.err("Usage: sed [OPTION]... {script-only-if-no-other-script} [input-file]...");
            return Ok(1);
        }
        scripts.push(operands.remove(0));
    }
    let script = scripts.join("\n");
    let mut parser = ScriptParser {
        s: script.chars().collect(),
        pos: 0,
        extended: opts.has("E"),
    };
    let prog = match parser.parse() {
        Ok(p) => p,
        Err(e) => {
            ctx.err(format_args!("sed: {e}"));
            return Ok(1);
        }
    };
    let in_place = opts.has("i");
    if in_place && operands.is_empty() {
        ctx.err("sed: no input files");
        return Ok(1);
    }
    let mut m = Machine {
        prog: &prog,
        quiet: opts.has("n"),
        active: vec![false; prog.len()],
        range_end: vec![0; prog.len()],
        hold: Vec::new(),
        last_re: None,
        line_no: 0,
        file_name: "-".into(),
        out: Vec::new(),
        exit: None,
    };
    let names: Vec<String> = if operands.is_empty() {
        vec!["-".into()]
    } else {
        operands
    };
    let separate = in_place || opts.has("s");
    let mut status = 0;
    // Without -i/-s all inputs are one stream: `$` is the last line of the last file.
    let mut readable: Vec<(String, Vec<u8>)> = Vec::new();
    for name in &names {
        if name != "-" && ctx.kind(name) == Some(EntryKind::Dir) {
            if in_place {
                ctx.err(format_args!(
                    "sed: couldn't edit {name}: not a regular file"
                ));
            } else {
                ctx.err(format_args!("sed: read error on {name}: Is a directory"));
            }
            status = if in_place { 4 } else { 2 };
            continue;
        }
        match ctx.read_operand(name) {
            Ok(d) => readable.push((name.clone(), d)),
            Err(e) => {
                ctx.err(format_args!("sed: can't read {name}: {}", errno(&e)));
                status = 2;
            }
        }
    }
    let count = readable.len();
    for (i, (name, data)) in readable.into_iter().enumerate() {
        if m.exit.is_some() {
            break;
        }
        m.file_name = name.clone();
        if separate {
            m.line_no = 0;
            m.active.iter_mut().for_each(|a| *a = false);
        }
        let is_last = separate || i + 1 == count;
        m.run(ctx, &to_lines(&data), is_last)?;
        if in_place {
            let out = std::mem::take(&mut m.out);
            let r = ctx.resolve(&name).and_then(|p| {
                if let Some(suffix) = opts.value("i").filter(|s| !s.is_empty()) {
                    let backup = if suffix.contains('*') {
                        suffix.replace('*', p.file_name())
                    } else {
                        format!("{}{suffix}", p.file_name())
                    };
                    let bp = p.parent().unwrap_or_default().join(&backup)?;
                    ctx.sh.repo.write(&bp, &data)?;
                }
                ctx.sh.repo.write(&p, &out)
            });
            if let Err(e) = r {
                ctx.err(format_args!("sed: couldn't edit {name}: {}", errno(&e)));
                status = 4;
            }
        } else {
            let out = std::mem::take(&mut m.out);
            ctx.out(&out);
        }
    }
    Ok(m.exit.filter(|&c| c != 0).unwrap_or(status))
}
