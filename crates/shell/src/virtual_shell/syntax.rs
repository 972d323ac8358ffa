//! The shell language: a lexer and a recursive-descent parser for the subset of bash an agent
//! writes — simple commands, pipelines, `&&`/`||`/`;`, redirections, heredocs, quoting,
//! parameter and command substitution, and the `for`/`if`/`while` compounds.

use std::fmt;

use super::escape::backslash_escapes;

/// Nesting of substitutions and compounds beyond this is refused, so hostile input cannot
/// exhaust the stack.
const MAX_DEPTH: usize = 48;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// A token where the grammar does not allow it.
    Unexpected(String),
    /// Input ended inside a compound command or after an operator.
    UnexpectedEof,
    /// A quote (or `` ` ``, `$(`, `${`) that is never closed.
    Unterminated(char),
    BadSubstitution(String),
    Unsupported(&'static str),
    TooDeep,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Unexpected(tok) => write!(f, "syntax error near unexpected token `{tok}'"),
            ParseError::UnexpectedEof => f.write_str("syntax error: unexpected end of file"),
            ParseError::Unterminated(c) => {
                write!(f, "unexpected EOF while looking for matching `{c}'")
            }
            ParseError::BadSubstitution(s) => write!(f, "{s}: bad substitution"),
            ParseError::Unsupported(what) => write!(f, "{what}: not supported by this shell"),
            ParseError::TooDeep => f.write_str("syntax error: nesting too deep"),
        }
    }
}

/// One piece of a word; quoting decides globbing and field splitting later.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    /// Unquoted text: glob characters in it are live.
    Lit(String),
    /// Quoted or escaped text: taken literally.
    Quoted(String),
    Param {
        name: String,
        op: ParamOp,
        quoted: bool,
    },
    Subst {
        list: List,
        quoted: bool,
    },
    Arith {
        expr: String,
        quoted: bool,
    },
    /// A leading `~` (only before `/` or at the end of the word).
    Tilde,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ParamOp {
    Plain,
    /// `${#NAME}`
    Length,
    /// `${NAME:-word}` (colon: empty counts as unset)
    Default {
        word: Word,
        colon: bool,
    },
    /// `${NAME:=word}`
    Assign {
        word: Word,
        colon: bool,
    },
    /// `${NAME:+word}`
    Alternate {
        word: Word,
        colon: bool,
    },
    /// `${NAME#pat}` / `${NAME##pat}`
    TrimPrefix {
        pattern: Word,
        longest: bool,
    },
    /// `${NAME%pat}` / `${NAME%%pat}`
    TrimSuffix {
        pattern: Word,
        longest: bool,
    },
}

pub type Word = Vec<Part>;

#[derive(Clone, Debug, PartialEq)]
pub enum RedirKind {
    /// `<`
    Read(Word),
    /// `>` (append: `>>`)
    Write { target: Word, append: bool },
    /// `&>` / `&>>`: stdout and stderr to one file.
    WriteBoth { target: Word, append: bool },
    /// `N>&M`: the descriptor becomes a copy of `M` (`-` closes it).
    Dup(Word),
    /// `<<` / `<<<`: the text is already the body.
    Here(Word),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Redirect {
    pub fd: u32,
    pub kind: RedirKind,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SimpleCommand {
    pub assigns: Vec<(String, Word)>,
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Compound {
    Group(List),
    Subshell(List),
    For {
        var: String,
        items: Option<Vec<Word>>,
        body: List,
    },
    If {
        branches: Vec<(List, List)>,
        otherwise: Option<List>,
    },
    While {
        cond: List,
        body: List,
        until: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    Simple(SimpleCommand),
    Compound(Box<Compound>, Vec<Redirect>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    pub negate: bool,
    pub commands: Vec<Command>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connector {
    And,
    Or,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AndOr {
    pub first: Pipeline,
    pub rest: Vec<(Connector, Pipeline)>,
}

pub type List = Vec<AndOr>;

/// Parses a whole command line (or script).
pub fn parse(src: &str) -> Result<List, ParseError> {
    parse_at_depth(src, 0)
}

fn parse_at_depth(src: &str, depth: usize) -> Result<List, ParseError> {
    if depth > MAX_DEPTH {
        return Err(ParseError::TooDeep);
    }
    let mut lexer = Lexer::new(src, depth);
    let toks = lexer.tokens()?;
    let mut parser = Parser {
        toks,
        pos: 0,
        heredocs: lexer.heredocs,
        depth,
    };
    let list = parser.list(&[])?;
    match parser.peek() {
        None => Ok(list),
        Some(t) => Err(ParseError::Unexpected(t.to_string())),
    }
}

/// Parses text in double-quote rules (a heredoc body, an arithmetic expression's variables).
pub fn parse_quoted_text(src: &str, heredoc: bool) -> Result<Word, ParseError> {
    let mut lexer = Lexer::new(src, 0);
    lexer.double_quoted(heredoc)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Pipe,
    And,
    Or,
    Semi,
    Amp,
    LParen,
    RParen,
    DSemi,
    /// `|&`: stdout and stderr into the pipe.
    PipeBoth,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RedirOp {
    Read,
    Write,
    Append,
    WriteBoth,
    AppendBoth,
    DupOut,
    DupIn,
    HereString,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Word(Word),
    Op(Op),
    Redir {
        fd: Option<u32>,
        op: RedirOp,
    },
    /// A heredoc: index into the lexer's bodies, read after the next newline.
    HereDoc {
        fd: Option<u32>,
        index: usize,
    },
    Newline,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Tok::Word(w) => return f.write_str(&word_text(w)),
            Tok::Op(op) => match op {
                Op::Pipe => "|",
                Op::And => "&&",
                Op::Or => "||",
                Op::Semi => ";",
                Op::Amp => "&",
                Op::LParen => "(",
                Op::RParen => ")",
                Op::DSemi => ";;",
                Op::PipeBoth => "|&",
            },
            Tok::Redir { op, .. } => match op {
                RedirOp::Read => "<",
                RedirOp::Write => ">",
                RedirOp::Append => ">>",
                RedirOp::WriteBoth => "&>",
                RedirOp::AppendBoth => "&>>",
                RedirOp::DupOut => ">&",
                RedirOp::DupIn => "<&",
                RedirOp::HereString => "<<<",
            },
            Tok::HereDoc { .. } => "<<",
            Tok::Newline => "newline",
        };
        f.write_str(s)
    }
}

/// The literal text of a word, for error messages and keyword checks.
fn word_text(w: &Word) -> String {
    w.iter()
        .map(|p| match p {
            Part::Lit(s) | Part::Quoted(s) => s.clone(),
            Part::Param { name, .. } => format!("${name}"),
            Part::Subst { .. } => "$(...)".into(),
            Part::Arith { expr, .. } => format!("$(({expr}))"),
            Part::Tilde => "~".into(),
        })
        .collect()
}

/// The word as a bare unquoted literal (keywords, assignment names), if it is one.
fn bare(w: &Word) -> Option<&str> {
    match w.as_slice() {
        [Part::Lit(s)] => Some(s),
        _ => None,
    }
}

struct PendingHereDoc {
    delim: String,
    strip_tabs: bool,
    expand: bool,
    index: usize,
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
    /// Reading the word inside `${NAME op word}`: blanks and operators are ordinary text.
    inside_braces: bool,
    pending: Vec<PendingHereDoc>,
    heredocs: Vec<Word>,
}

fn is_meta(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\n' | '|' | '&' | ';' | '(' | ')' | '<' | '>'
    )
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl Lexer {
    fn new(src: &str, depth: usize) -> Self {
        Self {
            chars: src.chars().collect(),
            pos: 0,
            depth,
            inside_braces: false,
            pending: Vec::new(),
            heredocs: Vec::new(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, off: usize) -> Option<char> {
        self.chars.get(self.pos + off).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn tokens(&mut self) -> Result<Vec<Tok>, ParseError> {
        let mut out = Vec::new();
        loop {
            while matches!(self.peek(), Some(' ' | '\t')) {
                self.pos += 1;
            }
            let Some(c) = self.peek() else { break };
            match c {
                '#' => {
                    while !matches!(self.peek(), None | Some('\n')) {
                        self.pos += 1;
                    }
                }
                '\n' => {
                    self.pos += 1;
                    self.read_heredocs()?;
                    out.push(Tok::Newline);
                }
                '\\' if self.peek_at(1) == Some('\n') => self.pos += 2,
                '|' | '&' | ';' | '(' | ')' | '<' | '>' => out.push(self.operator(None)?),
                _ => {
                    let (word, fd) = self.word()?;
                    match fd {
                        Some(fd) => out.push(self.operator(Some(fd))?),
                        None => out.push(Tok::Word(word)),
                    }
                }
            }
        }
        self.read_heredocs()?;
        Ok(out)
    }

    /// An operator at the cursor; `fd` is a descriptor number written just before it.
    fn operator(&mut self, fd: Option<u32>) -> Result<Tok, ParseError> {
        let c = self.peek().unwrap_or(' ');
        self.pos += 1;
        let tok = match c {
            '|' if self.eat('|') => Tok::Op(Op::Or),
            '|' if self.eat('&') => Tok::Op(Op::PipeBoth),
            '|' => Tok::Op(Op::Pipe),
            '&' if self.eat('&') => Tok::Op(Op::And),
            '&' if self.eat('>') => {
                let append = self.eat('>');
                Tok::Redir {
                    fd: None,
                    op: if append {
                        RedirOp::AppendBoth
                    } else {
                        RedirOp::WriteBoth
                    },
                }
            }
            '&' => Tok::Op(Op::Amp),
            ';' if self.eat(';') => Tok::Op(Op::DSemi),
            ';' => Tok::Op(Op::Semi),
            '(' => Tok::Op(Op::LParen),
            ')' => Tok::Op(Op::RParen),
            '>' => {
                let op = if self.eat('>') {
                    RedirOp::Append
                } else if self.eat('&') {
                    RedirOp::DupOut
                } else {
                    self.eat('|');
                    RedirOp::Write
                };
                Tok::Redir { fd, op }
            }
            _ => {
                // '<'
                if self.eat('<') {
                    if self.eat('<') {
                        Tok::Redir {
                            fd,
                            op: RedirOp::HereString,
                        }
                    } else {
                        let strip_tabs = self.eat('-');
                        return self.heredoc_start(fd, strip_tabs);
                    }
                } else if self.eat('&') {
                    Tok::Redir {
                        fd,
                        op: RedirOp::DupIn,
                    }
                } else {
                    Tok::Redir {
                        fd,
                        op: RedirOp::Read,
                    }
                }
            }
        };
        Ok(tok)
    }

    fn heredoc_start(&mut self, fd: Option<u32>, strip_tabs: bool) -> Result<Tok, ParseError> {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
        if self.peek().is_none_or(is_meta) {
            return Err(ParseError::Unexpected(
                self.peek().map_or("newline".to_string(), |c| c.to_string()),
            ));
        }
        // The delimiter is the word with its quotes removed; any quoting turns expansion off.
        let mut delim = String::new();
        let mut expand = true;
        while let Some(c) = self.peek() {
            if is_meta(c) {
                break;
            }
            self.pos += 1;
            match c {
                '\'' | '"' => {
                    expand = false;
                    loop {
                        match self.peek() {
                            None => return Err(ParseError::Unterminated(c)),
                            Some(q) if q == c => {
                                self.pos += 1;
                                break;
                            }
                            Some(q) => {
                                delim.push(q);
                                self.pos += 1;
                            }
                        }
                    }
                }
                '\\' => {
                    expand = false;
                    if let Some(n) = self.peek() {
                        delim.push(n);
                        self.pos += 1;
                    }
                }
                _ => delim.push(c),
            }
        }
        let index = self.heredocs.len();
        self.heredocs.push(Vec::new());
        self.pending.push(PendingHereDoc {
            delim,
            strip_tabs,
            expand,
            index,
        });
        Ok(Tok::HereDoc { fd, index })
    }

    /// Reads the bodies of the heredocs opened on the line just ended.
    fn read_heredocs(&mut self) -> Result<(), ParseError> {
        for doc in std::mem::take(&mut self.pending) {
            let mut body = String::new();
            while self.pos < self.chars.len() {
                let start = self.pos;
                while !matches!(self.peek(), None | Some('\n')) {
                    self.pos += 1;
                }
                let mut line: String = self.chars[start..self.pos].iter().collect();
                self.eat('\n');
                if doc.strip_tabs {
                    line = line.trim_start_matches('\t').to_string();
                }
                if line == doc.delim {
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            self.heredocs[doc.index] = if doc.expand {
                let mut sub = Lexer::new(&body, self.depth + 1);
                sub.double_quoted(true)?
            } else {
                vec![Part::Quoted(body)]
            };
        }
        Ok(())
    }

    /// A word; when it is all digits and touches a redirection operator, the descriptor number.
    fn word(&mut self) -> Result<(Word, Option<u32>), ParseError> {
        let start = self.pos;
        let mut parts: Word = Vec::new();
        let mut lit = String::new();
        let mut quoted_any = false;
        if self.peek() == Some('~') && self.peek_at(1).is_none_or(|c| c == '/' || is_meta(c)) {
            self.pos += 1;
            parts.push(Part::Tilde);
        }
        while let Some(c) = self.peek() {
            if is_meta(c) && !self.inside_braces {
                break;
            }
            match c {
                '\'' => {
                    quoted_any = true;
                    flush(&mut parts, &mut lit, false);
                    self.pos += 1;
                    let s = self.until_quote('\'')?;
                    parts.push(Part::Quoted(s));
                }
                '"' => {
                    quoted_any = true;
                    flush(&mut parts, &mut lit, false);
                    self.pos += 1;
                    let inner = self.double_quoted(false)?;
                    if inner.is_empty() {
                        parts.push(Part::Quoted(String::new()));
                    }
                    parts.extend(inner);
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(n) => {
                            quoted_any = true;
                            flush(&mut parts, &mut lit, false);
                            parts.push(Part::Quoted(n.to_string()));
                            self.pos += 1;
                        }
                        None => lit.push('\\'),
                    }
                }
                '$' if self.peek_at(1) == Some('\'') => {
                    // `$'...'`: C-style escapes inside single quotes.
                    quoted_any = true;
                    flush(&mut parts, &mut lit, false);
                    self.pos += 2;
                    let mut raw = String::new();
                    loop {
                        match self.peek() {
                            None => return Err(ParseError::Unterminated('\'')),
                            Some('\'') => {
                                self.pos += 1;
                                break;
                            }
                            Some('\\') => {
                                raw.push('\\');
                                self.pos += 1;
                                if let Some(n) = self.peek() {
                                    raw.push(n);
                                    self.pos += 1;
                                }
                            }
                            Some(c) => {
                                raw.push(c);
                                self.pos += 1;
                            }
                        }
                    }
                    parts.push(Part::Quoted(backslash_escapes(&raw, true).0));
                }
                '$' | '`' => self.push_dollar(&mut parts, &mut lit, false)?,
                _ => {
                    lit.push(c);
                    self.pos += 1;
                }
            }
        }
        flush(&mut parts, &mut lit, false);
        let raw: String = self.chars[start..self.pos].iter().collect();
        let fd = if !quoted_any
            && matches!(self.peek(), Some('<' | '>'))
            && !raw.is_empty()
            && raw.len() <= 4
            && raw.chars().all(|c| c.is_ascii_digit())
        {
            raw.parse().ok()
        } else {
            None
        };
        Ok((parts, fd))
    }

    fn until_quote(&mut self, q: char) -> Result<String, ParseError> {
        let mut s = String::new();
        loop {
            match self.peek() {
                None => return Err(ParseError::Unterminated(q)),
                Some(c) if c == q => {
                    self.pos += 1;
                    return Ok(s);
                }
                Some(c) => {
                    s.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// Double-quoted text after the opening quote, up to the closing one; in a heredoc body
    /// there is no closing quote and `"` is an ordinary character.
    fn double_quoted(&mut self, heredoc: bool) -> Result<Word, ParseError> {
        let mut parts: Word = Vec::new();
        let mut lit = String::new();
        loop {
            let Some(c) = self.peek() else {
                if heredoc {
                    break;
                }
                return Err(ParseError::Unterminated('"'));
            };
            match c {
                '"' if !heredoc => {
                    self.pos += 1;
                    break;
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(n @ ('$' | '`' | '\\')) => {
                            lit.push(n);
                            self.pos += 1;
                        }
                        Some('"') if !heredoc => {
                            lit.push('"');
                            self.pos += 1;
                        }
                        _ => lit.push('\\'),
                    }
                }
                '$' | '`' => self.push_dollar(&mut parts, &mut lit, true)?,
                _ => {
                    lit.push(c);
                    self.pos += 1;
                }
            }
        }
        flush(&mut parts, &mut lit, true);
        Ok(parts)
    }

    /// The expansion at the cursor, after the text gathered so far (a lone `$` stays text).
    fn push_dollar(
        &mut self,
        parts: &mut Word,
        lit: &mut String,
        quoted: bool,
    ) -> Result<(), ParseError> {
        flush(parts, lit, quoted);
        match self.dollar(quoted)? {
            Some(p) => parts.push(p),
            None => lit.push('$'),
        }
        Ok(())
    }

    /// `$NAME`, `${...}`, `$(...)`, `$((...))` or a backquoted command at the cursor; `None`
    /// for a lone `$` (kept literally).
    fn dollar(&mut self, quoted: bool) -> Result<Option<Part>, ParseError> {
        if self.eat('`') {
            let mut inner = String::new();
            loop {
                match self.peek() {
                    None => return Err(ParseError::Unterminated('`')),
                    Some('`') => {
                        self.pos += 1;
                        break;
                    }
                    Some('\\') if matches!(self.peek_at(1), Some('`' | '\\' | '$')) => {
                        inner.push(self.peek_at(1).unwrap_or('\\'));
                        self.pos += 2;
                    }
                    Some(c) => {
                        inner.push(c);
                        self.pos += 1;
                    }
                }
            }
            let list = parse_at_depth(&inner, self.depth + 1)?;
            return Ok(Some(Part::Subst { list, quoted }));
        }
        self.pos += 1; // '$'
        let Some(c) = self.peek() else {
            return Ok(None);
        };
        if c == '(' {
            if self.peek_at(1) == Some('(') {
                self.pos += 2;
                let expr = self.balanced_parens(true)?;
                return Ok(Some(Part::Arith { expr, quoted }));
            }
            self.pos += 1;
            let inner = self.balanced_parens(false)?;
            let list = parse_at_depth(&inner, self.depth + 1)?;
            return Ok(Some(Part::Subst { list, quoted }));
        }
        if c == '{' {
            self.pos += 1;
            return self.braced_param(quoted).map(Some);
        }
        if matches!(c, '?' | '$' | '#' | '@' | '*' | '!' | '-') || c.is_ascii_digit() {
            self.pos += 1;
            return Ok(Some(Part::Param {
                name: c.to_string(),
                op: ParamOp::Plain,
                quoted,
            }));
        }
        if is_name_start(c) {
            let mut name = String::new();
            while let Some(n) = self.peek().filter(|&n| is_name_char(n)) {
                name.push(n);
                self.pos += 1;
            }
            return Ok(Some(Part::Param {
                name,
                op: ParamOp::Plain,
                quoted,
            }));
        }
        Ok(None)
    }

    /// Text up to the `)` closing a `$(` (or the `))` closing a `$((`), honouring quotes.
    fn balanced_parens(&mut self, arith: bool) -> Result<String, ParseError> {
        let start = self.pos;
        let mut depth = 0usize;
        let mut quote: Option<char> = None;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match (quote, c) {
                (Some('\''), '\'') => quote = None,
                (Some('\''), _) => {}
                (_, '\\') => self.pos += 1,
                (Some('"'), '"') => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '(') => depth += 1,
                (None, ')') if depth > 0 => depth -= 1,
                (None, ')') => {
                    let end = self.pos - 1;
                    if arith && !self.eat(')') {
                        return Err(ParseError::Unterminated(')'));
                    }
                    return Ok(self.chars[start..end].iter().collect());
                }
                _ => {}
            }
        }
        Err(ParseError::Unterminated(')'))
    }

    fn braced_param(&mut self, quoted: bool) -> Result<Part, ParseError> {
        let start = self.pos;
        // Find the closing brace, skipping nested quotes and braces.
        let mut depth = 1;
        let mut end = None;
        let mut i = self.pos;
        while let Some(&c) = self.chars.get(i) {
            match c {
                '\\' => i += 1,
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        let end = end.ok_or(ParseError::Unterminated('}'))?;
        let body: String = self.chars[start..end].iter().collect();
        self.pos = end + 1;
        let bad = || ParseError::BadSubstitution(format!("${{{body}}}"));
        if let Some(name) = body.strip_prefix('#').filter(|n| !n.is_empty()) {
            if !is_param_name(name) {
                return Err(bad());
            }
            return Ok(Part::Param {
                name: name.into(),
                op: ParamOp::Length,
                quoted,
            });
        }
        let name_len = if body.starts_with(|c: char| c.is_ascii_digit() || "?$#@*!-".contains(c)) {
            1
        } else {
            body.find(|c: char| !is_name_char(c)).unwrap_or(body.len())
        };
        let name = &body[..name_len];
        if name.is_empty() || !is_param_name(name) {
            return Err(bad());
        }
        let rest = &body[name_len..];
        // The word after the operator follows unquoted-word rules (quotes make parts literal,
        // pattern characters stay live), with blanks and operators taken as text.
        let sub = |s: &str, depth: usize| -> Result<Word, ParseError> {
            let mut lx = Lexer::new(s, depth + 1);
            lx.inside_braces = true;
            Ok(lx.word()?.0)
        };
        let op = if rest.is_empty() {
            ParamOp::Plain
        } else {
            let (colon, r) = match rest.strip_prefix(':') {
                Some(r) => (true, r),
                None => (false, rest),
            };
            let mut chars = r.chars();
            let kind = chars.next().ok_or_else(bad)?;
            let arg = chars.as_str();
            match kind {
                '-' => ParamOp::Default {
                    word: sub(arg, self.depth)?,
                    colon,
                },
                '=' => ParamOp::Assign {
                    word: sub(arg, self.depth)?,
                    colon,
                },
                '+' => ParamOp::Alternate {
                    word: sub(arg, self.depth)?,
                    colon,
                },
                '#' if !colon => {
                    let (longest, p) = match arg.strip_prefix('#') {
                        Some(p) => (true, p),
                        None => (false, arg),
                    };
                    ParamOp::TrimPrefix {
                        pattern: sub(p, self.depth)?,
                        longest,
                    }
                }
                '%' if !colon => {
                    let (longest, p) = match arg.strip_prefix('%') {
                        Some(p) => (true, p),
                        None => (false, arg),
                    };
                    ParamOp::TrimSuffix {
                        pattern: sub(p, self.depth)?,
                        longest,
                    }
                }
                _ => return Err(bad()),
            }
        };
        Ok(Part::Param {
            name: name.into(),
            op,
            quoted,
        })
    }
}

fn is_param_name(name: &str) -> bool {
    (name.len() == 1 && "?$#@*!-".contains(name))
        || name.chars().all(|c| c.is_ascii_digit())
        || (name.starts_with(is_name_start) && name.chars().all(is_name_char))
}

/// Ends the text gathered so far as a part of the word.
fn flush(parts: &mut Word, lit: &mut String, quoted: bool) {
    if !lit.is_empty() {
        let text = std::mem::take(lit);
        parts.push(if quoted {
            Part::Quoted(text)
        } else {
            Part::Lit(text)
        });
    }
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    heredocs: Vec<Word>,
    depth: usize,
}

const STOP_WORDS: &[&str] = &["then", "do", "done", "fi", "else", "elif", "}"];

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn peek_word(&self) -> Option<&str> {
        match self.peek() {
            Some(Tok::Word(w)) => bare(w),
            _ => None,
        }
    }

    fn skip_newlines(&mut self) {
        while matches!(self.peek(), Some(Tok::Newline)) {
            self.pos += 1;
        }
    }

    fn unexpected(&self) -> ParseError {
        match self.peek() {
            Some(t) => ParseError::Unexpected(t.to_string()),
            None => ParseError::UnexpectedEof,
        }
    }

    fn expect_word(&mut self, kw: &str) -> Result<(), ParseError> {
        self.skip_newlines();
        if self.peek_word() == Some(kw) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(ParseError::TooDeep)
        } else {
            Ok(())
        }
    }

    /// A sequence of and-or lists, ending before one of `stops` (in command position), `)`,
    /// or the end of input.
    fn list(&mut self, stops: &[&str]) -> Result<List, ParseError> {
        self.enter()?;
        let mut out = Vec::new();
        loop {
            self.skip_newlines();
            match self.peek() {
                None | Some(Tok::Op(Op::RParen)) => break,
                Some(Tok::Word(w))
                    if bare(w).is_some_and(|s| stops.contains(&s) || STOP_WORDS.contains(&s)) =>
                {
                    break;
                }
                _ => {}
            }
            out.push(self.and_or()?);
            match self.peek() {
                Some(Tok::Op(Op::Semi | Op::Amp) | Tok::Newline) => self.pos += 1,
                _ => break,
            }
        }
        self.depth -= 1;
        Ok(out)
    }

    fn and_or(&mut self) -> Result<AndOr, ParseError> {
        let first = self.pipeline()?;
        let mut rest = Vec::new();
        loop {
            let conn = match self.peek() {
                Some(Tok::Op(Op::And)) => Connector::And,
                Some(Tok::Op(Op::Or)) => Connector::Or,
                _ => break,
            };
            self.pos += 1;
            self.skip_newlines();
            rest.push((conn, self.pipeline()?));
        }
        Ok(AndOr { first, rest })
    }

    fn pipeline(&mut self) -> Result<Pipeline, ParseError> {
        let mut negate = false;
        while self.peek_word() == Some("!") {
            self.pos += 1;
            negate = !negate;
        }
        let mut commands = vec![self.command()?];
        while let Some(Tok::Op(op @ (Op::Pipe | Op::PipeBoth))) = self.peek() {
            if *op == Op::PipeBoth {
                let dup = Redirect {
                    fd: 2,
                    kind: RedirKind::Dup(vec![Part::Lit("1".into())]),
                };
                match commands.last_mut() {
                    Some(Command::Simple(c)) => c.redirects.push(dup),
                    Some(Command::Compound(_, r)) => r.push(dup),
                    None => {}
                }
            }
            self.pos += 1;
            self.skip_newlines();
            commands.push(self.command()?);
        }
        Ok(Pipeline { negate, commands })
    }

    fn command(&mut self) -> Result<Command, ParseError> {
        let compound = match self.peek() {
            Some(Tok::Op(Op::LParen)) => {
                self.pos += 1;
                let body = self.list(&[])?;
                if !matches!(self.next(), Some(Tok::Op(Op::RParen))) {
                    self.pos -= 1;
                    return Err(self.unexpected());
                }
                if body.is_empty() {
                    return Err(ParseError::Unexpected(")".into()));
                }
                Compound::Subshell(body)
            }
            Some(Tok::Word(w)) => match bare(w) {
                Some("{") => {
                    self.pos += 1;
                    let body = self.list(&["}"])?;
                    self.expect_word("}")?;
                    if body.is_empty() {
                        return Err(ParseError::Unexpected("}".into()));
                    }
                    Compound::Group(body)
                }
                Some("[[") => return self.double_bracket(),
                Some("if") => self.if_clause()?,
                Some(kw @ ("while" | "until")) => {
                    let until = kw == "until";
                    self.pos += 1;
                    let cond = self.list(&["do"])?;
                    self.expect_word("do")?;
                    let body = self.list(&["done"])?;
                    self.expect_word("done")?;
                    Compound::While { cond, body, until }
                }
                Some("for") => self.for_clause()?,
                Some("case") => return Err(ParseError::Unsupported("case")),
                Some("function") => return Err(ParseError::Unsupported("function")),
                Some(s) if STOP_WORDS.contains(&s) => return Err(self.unexpected()),
                _ => return self.simple().map(Command::Simple),
            },
            Some(Tok::Redir { .. } | Tok::HereDoc { .. }) => {
                return self.simple().map(Command::Simple);
            }
            _ => return Err(self.unexpected()),
        };
        let mut redirects = Vec::new();
        while let Some(r) = self.redirect()? {
            redirects.push(r);
        }
        Ok(Command::Compound(Box::new(compound), redirects))
    }

    /// `[[ ... ]]`: operators inside are the test's own (`&&`, `||`, `<`, `(`), so they are
    /// kept as words for the `[[` command.
    fn double_bracket(&mut self) -> Result<Command, ParseError> {
        let mut words = Vec::new();
        loop {
            let Some(tok) = self.next() else {
                return Err(ParseError::UnexpectedEof);
            };
            let text = match &tok {
                Tok::Word(w) => {
                    words.push(w.clone());
                    if bare(w) == Some("]]") {
                        break;
                    }
                    continue;
                }
                Tok::Op(op @ (Op::And | Op::Or | Op::LParen | Op::RParen)) => {
                    Tok::Op(*op).to_string()
                }
                Tok::Redir {
                    fd: None,
                    op: op @ (RedirOp::Read | RedirOp::Write),
                } => Tok::Redir { fd: None, op: *op }.to_string(),
                Tok::Newline => continue,
                other => return Err(ParseError::Unexpected(other.to_string())),
            };
            words.push(vec![Part::Lit(text)]);
        }
        let mut redirects = Vec::new();
        while let Some(r) = self.redirect()? {
            redirects.push(r);
        }
        Ok(Command::Simple(SimpleCommand {
            assigns: Vec::new(),
            words,
            redirects,
        }))
    }

    fn if_clause(&mut self) -> Result<Compound, ParseError> {
        self.pos += 1;
        let mut branches = Vec::new();
        let mut otherwise = None;
        loop {
            let cond = self.list(&["then"])?;
            self.expect_word("then")?;
            let body = self.list(&["elif", "else", "fi"])?;
            branches.push((cond, body));
            self.skip_newlines();
            match self.peek_word() {
                Some("elif") => self.pos += 1,
                Some("else") => {
                    self.pos += 1;
                    otherwise = Some(self.list(&["fi"])?);
                    self.expect_word("fi")?;
                    break;
                }
                Some("fi") => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.unexpected()),
            }
        }
        Ok(Compound::If {
            branches,
            otherwise,
        })
    }

    fn for_clause(&mut self) -> Result<Compound, ParseError> {
        self.pos += 1;
        let var = match self.next() {
            Some(Tok::Word(w)) => match bare(&w) {
                Some(name) if is_param_name(name) && name.starts_with(is_name_start) => {
                    name.to_string()
                }
                _ => return Err(ParseError::Unexpected(word_text(&w))),
            },
            Some(Tok::Op(Op::LParen)) => return Err(ParseError::Unsupported("for ((...))")),
            _ => {
                self.pos -= 1;
                return Err(self.unexpected());
            }
        };
        self.skip_newlines();
        let mut items = None;
        if self.peek_word() == Some("in") {
            self.pos += 1;
            let mut words = Vec::new();
            while let Some(Tok::Word(w)) = self.peek() {
                words.push(w.clone());
                self.pos += 1;
            }
            items = Some(words);
        }
        if matches!(self.peek(), Some(Tok::Op(Op::Semi))) {
            self.pos += 1;
        }
        self.expect_word("do")?;
        let body = self.list(&["done"])?;
        self.expect_word("done")?;
        Ok(Compound::For { var, items, body })
    }

    fn simple(&mut self) -> Result<SimpleCommand, ParseError> {
        let mut cmd = SimpleCommand {
            assigns: Vec::new(),
            words: Vec::new(),
            redirects: Vec::new(),
        };
        loop {
            if let Some(r) = self.redirect()? {
                cmd.redirects.push(r);
                continue;
            }
            let Some(Tok::Word(w)) = self.peek() else {
                break;
            };
            let w = w.clone();
            self.pos += 1;
            if cmd.words.is_empty()
                && let Some((name, value)) = assignment(&w)
            {
                cmd.assigns.push((name, value));
                continue;
            }
            cmd.words.push(w);
        }
        if cmd.assigns.is_empty() && cmd.words.is_empty() && cmd.redirects.is_empty() {
            return Err(self.unexpected());
        }
        Ok(cmd)
    }

    fn redirect(&mut self) -> Result<Option<Redirect>, ParseError> {
        let (fd, op) = match self.peek() {
            Some(Tok::Redir { fd, op }) => (*fd, *op),
            Some(Tok::HereDoc { fd, index }) => {
                let r = Redirect {
                    fd: fd.unwrap_or(0),
                    kind: RedirKind::Here(self.heredocs.get(*index).cloned().unwrap_or_default()),
                };
                self.pos += 1;
                return Ok(Some(r));
            }
            _ => return Ok(None),
        };
        self.pos += 1;
        let target = match self.next() {
            Some(Tok::Word(w)) => w,
            None => return Err(ParseError::Unexpected("newline".into())),
            Some(_) => {
                self.pos -= 1;
                return Err(self.unexpected());
            }
        };
        let kind = match op {
            RedirOp::Read => RedirKind::Read(target),
            RedirOp::Write => RedirKind::Write {
                target,
                append: false,
            },
            RedirOp::Append => RedirKind::Write {
                target,
                append: true,
            },
            RedirOp::WriteBoth => RedirKind::WriteBoth {
                target,
                append: false,
            },
            RedirOp::AppendBoth => RedirKind::WriteBoth {
                target,
                append: true,
            },
            RedirOp::DupOut | RedirOp::DupIn => {
                // `>&file` (no descriptor number) means `&>file`.
                let is_fd = bare(&target)
                    .is_some_and(|s| s == "-" || s.chars().all(|c| c.is_ascii_digit()));
                if op == RedirOp::DupOut
                    && fd.is_none()
                    && !is_fd
                    && !matches!(target.first(), Some(Part::Param { .. }))
                {
                    RedirKind::WriteBoth {
                        target,
                        append: false,
                    }
                } else {
                    RedirKind::Dup(target)
                }
            }
            RedirOp::HereString => {
                let mut word = target;
                word.push(Part::Quoted("\n".into()));
                RedirKind::Here(word)
            }
        };
        let default_fd = match op {
            RedirOp::Read | RedirOp::DupIn | RedirOp::HereString => 0,
            _ => 1,
        };
        Ok(Some(Redirect {
            fd: fd.unwrap_or(default_fd),
            kind,
        }))
    }
}

/// `NAME=value` at the start of a simple command.
fn assignment(w: &Word) -> Option<(String, Word)> {
    let Some(Part::Lit(first)) = w.first() else {
        return None;
    };
    let eq = first.find('=')?;
    let name = &first[..eq];
    if name.is_empty() || !name.starts_with(is_name_start) || !name.chars().all(is_name_char) {
        return None;
    }
    let mut value: Word = Vec::new();
    let rest = &first[eq + 1..];
    if !rest.is_empty() {
        value.push(Part::Lit(rest.to_string()));
    }
    value.extend(w[1..].iter().cloned());
    Some((name.to_string(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pipelines_lists_and_redirects() {
        let l = parse("a b | c && d || e; f > out 2>&1").unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].first.commands.len(), 2);
        assert_eq!(l[0].rest.len(), 2);
        let Command::Simple(f) = &l[1].first.commands[0] else {
            panic!()
        };
        assert_eq!(f.redirects.len(), 2);
        assert_eq!(f.redirects[1].fd, 2);
    }

    #[test]
    fn heredoc_bodies_follow_the_line() {
        let l = parse("cat > f <<'EOF'\n$x `y`\nEOF\necho done").unwrap();
        assert_eq!(l.len(), 2);
        let Command::Simple(c) = &l[0].first.commands[0] else {
            panic!()
        };
        assert_eq!(
            c.redirects[1].kind,
            RedirKind::Here(vec![Part::Quoted("$x `y`\n".into())])
        );
    }

    #[test]
    fn reports_bash_style_errors() {
        assert_eq!(parse("a |").unwrap_err(), ParseError::UnexpectedEof);
        assert_eq!(
            parse("; a").unwrap_err().to_string(),
            "syntax error near unexpected token `;'"
        );
        assert_eq!(
            parse("echo 'x").unwrap_err(),
            ParseError::Unterminated('\'')
        );
        assert!(parse("if true; then echo").is_err());
    }
}
