//! `$(( ))` arithmetic: 64-bit integers with C precedence, variables by name, and the
//! assignment operators loops use (`i += 1`, `i++`).

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(i64),
    Name(String),
    Op(&'static str),
}

const OPS: &[&str] = &[
    "<<=", ">>=", "**", "++", "--", "+=", "-=", "*=", "/=", "%=", "<<", ">>", "<=", ">=", "==",
    "!=", "&&", "||", "+", "-", "*", "/", "%", "<", ">", "=", "!", "~", "&", "|", "^", "(", ")",
    "?", ":",
];

fn lex(src: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let text = &src[start..i];
            let n = parse_integer(text)
                .ok_or_else(|| format!("value too great for base (error token is \"{text}\")"))?;
            out.push(Tok::Num(n));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Name(src[start..i].to_string()));
        } else {
            let op = OPS
                .iter()
                .find(|op| src[i..].starts_with(**op))
                .ok_or_else(|| {
                    format!(
                        "syntax error: operand expected (error token is \"{}\")",
                        &src[i..]
                    )
                })?;
            out.push(Tok::Op(op));
            i += op.len();
        }
    }
    Ok(out)
}

/// An unsigned integer as C writes it: `0x1f` hexadecimal, `017` octal, else decimal.
pub(super) fn parse_integer(text: &str) -> Option<i64> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        i64::from_str_radix(hex, 16).ok()
    } else if text.len() > 1 && text.starts_with('0') {
        i64::from_str_radix(&text[1..], 8).ok()
    } else {
        text.parse().ok()
    }
}

struct Eval<'v> {
    toks: Vec<Tok>,
    pos: usize,
    vars: &'v mut BTreeMap<String, String>,
    depth: usize,
}

/// Evaluates `src`, reading and assigning shell variables.
pub fn eval(src: &str, vars: &mut BTreeMap<String, String>) -> Result<i64, String> {
    let toks = lex(src)?;
    if toks.is_empty() {
        return Ok(0);
    }
    let mut e = Eval {
        toks,
        pos: 0,
        vars,
        depth: 0,
    };
    let v = e.assign()?;
    match e.toks.get(e.pos) {
        None => Ok(v),
        Some(t) => Err(format!(
            "syntax error in expression (error token is \"{}\")",
            show(t)
        )),
    }
}

fn show(t: &Tok) -> String {
    match t {
        Tok::Num(n) => n.to_string(),
        Tok::Name(n) => n.clone(),
        Tok::Op(o) => o.to_string(),
    }
}

/// Binary operators by precedence level, loosest first.
const LEVELS: &[&[&str]] = &[
    &["||"],
    &["&&"],
    &["|"],
    &["^"],
    &["&"],
    &["==", "!="],
    &["<", ">", "<=", ">="],
    &["<<", ">>"],
    &["+", "-"],
    &["*", "/", "%"],
];

impl Eval<'_> {
    fn peek_op(&self) -> Option<&'static str> {
        match self.toks.get(self.pos) {
            Some(Tok::Op(o)) => Some(o),
            _ => None,
        }
    }

    fn var(&self, name: &str) -> i64 {
        self.vars
            .get(name)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Runs a recursive step, refusing nesting deep enough to threaten the stack.
    fn nested(&mut self, step: fn(&mut Self) -> Result<i64, String>) -> Result<i64, String> {
        self.depth += 1;
        if self.depth > 200 {
            return Err("expression nested too deeply".into());
        }
        let r = step(self);
        self.depth -= 1;
        r
    }

    fn assign(&mut self) -> Result<i64, String> {
        self.nested(Self::assign_inner)
    }

    fn assign_inner(&mut self) -> Result<i64, String> {
        if let (Some(Tok::Name(name)), Some(Tok::Op(op))) =
            (self.toks.get(self.pos), self.toks.get(self.pos + 1))
            && matches!(*op, "=" | "+=" | "-=" | "*=" | "/=" | "%=" | "<<=" | ">>=")
        {
            let (name, op) = (name.clone(), *op);
            self.pos += 2;
            let rhs = self.assign()?;
            let old = self.var(&name);
            let v = match op {
                "=" => rhs,
                "<<=" => old.wrapping_shl(rhs as u32),
                ">>=" => old.wrapping_shr(rhs as u32),
                _ => binary(&op[..1], old, rhs)?,
            };
            self.vars.insert(name, v.to_string());
            return Ok(v);
        }
        self.ternary()
    }

    fn ternary(&mut self) -> Result<i64, String> {
        let c = self.binary(0)?;
        if self.peek_op() != Some("?") {
            return Ok(c);
        }
        self.pos += 1;
        let a = self.assign()?;
        if self.peek_op() != Some(":") {
            return Err("`:' expected for conditional expression".into());
        }
        self.pos += 1;
        let b = self.assign()?;
        Ok(if c != 0 { a } else { b })
    }

    fn binary(&mut self, level: usize) -> Result<i64, String> {
        let Some(ops) = LEVELS.get(level) else {
            return self.power();
        };
        let mut lhs = self.binary(level + 1)?;
        while let Some(op) = self.peek_op().filter(|o| ops.contains(o)) {
            self.pos += 1;
            let rhs = self.binary(level + 1)?;
            lhs = binary(op, lhs, rhs)?;
        }
        Ok(lhs)
    }

    fn power(&mut self) -> Result<i64, String> {
        let base = self.unary()?;
        if self.peek_op() == Some("**") {
            self.pos += 1;
            let exp = self.power()?;
            if exp < 0 {
                return Err("exponent less than 0".into());
            }
            return Ok(base.wrapping_pow(exp.min(u32::MAX as i64) as u32));
        }
        Ok(base)
    }

    fn unary(&mut self) -> Result<i64, String> {
        self.nested(Self::unary_inner)
    }

    fn unary_inner(&mut self) -> Result<i64, String> {
        let tok = self
            .toks
            .get(self.pos)
            .cloned()
            .ok_or("syntax error: operand expected")?;
        self.pos += 1;
        match tok {
            Tok::Num(n) => Ok(n),
            Tok::Name(name) => {
                let v = self.var(&name);
                match self.peek_op() {
                    Some(op @ ("++" | "--")) => {
                        self.pos += 1;
                        let nv = if op == "++" {
                            v.wrapping_add(1)
                        } else {
                            v.wrapping_sub(1)
                        };
                        self.vars.insert(name, nv.to_string());
                        Ok(v)
                    }
                    _ => Ok(v),
                }
            }
            Tok::Op("(") => {
                let v = self.assign()?;
                if self.peek_op() != Some(")") {
                    return Err("missing `)'".into());
                }
                self.pos += 1;
                Ok(v)
            }
            Tok::Op(op @ ("++" | "--")) => {
                let Some(Tok::Name(name)) = self.toks.get(self.pos).cloned() else {
                    return Err("syntax error: operand expected".into());
                };
                self.pos += 1;
                let v = self.var(&name);
                let nv = if op == "++" {
                    v.wrapping_add(1)
                } else {
                    v.wrapping_sub(1)
                };
                self.vars.insert(name, nv.to_string());
                Ok(nv)
            }
            Tok::Op("-") => Ok(self.unary()?.wrapping_neg()),
            Tok::Op("+") => self.unary(),
            Tok::Op("!") => Ok(i64::from(self.unary()? == 0)),
            Tok::Op("~") => Ok(!self.unary()?),
            Tok::Op(op) => Err(format!(
                "syntax error: operand expected (error token is \"{op}\")"
            )),
        }
    }
}

fn binary(op: &str, a: i64, b: i64) -> Result<i64, String> {
    Ok(match op {
        "+" => a.wrapping_add(b),
        "-" => a.wrapping_sub(b),
        "*" => a.wrapping_mul(b),
        "/" | "%" if b == 0 => return Err(format!("division by 0 (error token is \"{b}\")")),
        "/" => a.wrapping_div(b),
        "%" => a.wrapping_rem(b),
        "<<" => a.wrapping_shl(b as u32),
        ">>" => a.wrapping_shr(b as u32),
        "<" => i64::from(a < b),
        ">" => i64::from(a > b),
        "<=" => i64::from(a <= b),
        ">=" => i64::from(a >= b),
        "==" => i64::from(a == b),
        "!=" => i64::from(a != b),
        "&" => a & b,
        "^" => a ^ b,
        "|" => a | b,
        "&&" => i64::from(a != 0 && b != 0),
        "||" => i64::from(a != 0 || b != 0),
        _ => {
            return Err(format!(
                "syntax error: invalid arithmetic operator (error token is \"{op}\")"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_with_precedence_and_assignment() {
        let mut vars = BTreeMap::new();
        vars.insert("i".to_string(), "4".to_string());
        assert_eq!(eval("1 + 2 * 3", &mut vars), Ok(7));
        assert_eq!(eval("(1 + 2) * 3 - i", &mut vars), Ok(5));
        assert_eq!(eval("i += 2", &mut vars), Ok(6));
        assert_eq!(vars["i"], "6");
        assert_eq!(eval("i++", &mut vars), Ok(6));
        assert_eq!(eval("2 ** 10 % 7 == 2 ? 1 : 0", &mut vars), Ok(1));
        assert!(eval("1 / 0", &mut vars).is_err());
        assert!(eval("1 +", &mut vars).is_err());
        assert_eq!(eval("0x10 + 010", &mut vars), Ok(24));
    }
}
