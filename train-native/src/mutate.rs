//! Procedural bugs from Python's syntax tree (tree-sitter's Python grammar): every place an
//! operator can plant a bug, as byte edits of one file. Only code inside a function body is
//! touched (module-level edits mostly break the import, which no test isolates), and every
//! edited file must still parse. Whether a candidate is a bug at all is for the test suite
//! to say (`synth`).

use serde::{Deserialize, Serialize};
use tree_sitter::{Node, Parser, Tree};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    /// `==`↔`!=`, `<`↔`>`, `<=`↔`>=`, `in`↔`not in`, `is`↔`is not`.
    FlipComparison,
    /// `<`↔`<=`, `>`↔`>=`: a bound moved by one.
    ChangeBoundary,
    /// `and`↔`or`.
    FlipBoolean,
    /// `+`↔`-`, `*`↔`/`, `//`→`/`, `%`→`//`, `**`→`*`, `<<`↔`>>`, `&`↔`|`, `^`→`|`.
    ChangeArithmetic,
    /// An integer constant one more or one less.
    OffByOne,
    /// An `if` without `else` removed with its body.
    RemoveCondition,
    /// An assignment or a call statement removed.
    RemoveStatement,
    /// A `for` or `while` loop removed.
    RemoveLoop,
    /// A `with` or `try` replaced by its body.
    RemoveWrapper,
    /// The bodies of an `if`/`else` swapped.
    InvertIf,
    /// The first two positional arguments of a call swapped.
    SwapArguments,
    /// A returned value replaced: `True`↔`False`, anything else by `None`.
    WrongReturn,
}

impl Operator {
    pub const ALL: [Operator; 12] = [
        Operator::FlipComparison,
        Operator::ChangeBoundary,
        Operator::FlipBoolean,
        Operator::ChangeArithmetic,
        Operator::OffByOne,
        Operator::RemoveCondition,
        Operator::RemoveStatement,
        Operator::RemoveLoop,
        Operator::RemoveWrapper,
        Operator::InvertIf,
        Operator::SwapArguments,
        Operator::WrongReturn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Operator::FlipComparison => "flip_comparison",
            Operator::ChangeBoundary => "change_boundary",
            Operator::FlipBoolean => "flip_boolean",
            Operator::ChangeArithmetic => "change_arithmetic",
            Operator::OffByOne => "off_by_one",
            Operator::RemoveCondition => "remove_condition",
            Operator::RemoveStatement => "remove_statement",
            Operator::RemoveLoop => "remove_loop",
            Operator::RemoveWrapper => "remove_wrapper",
            Operator::InvertIf => "invert_if",
            Operator::SwapArguments => "swap_arguments",
            Operator::WrongReturn => "wrong_return",
        }
    }

    /// What kind of mistake it is, in words a problem statement can use as a hint.
    pub fn hint(self) -> &'static str {
        match self {
            Operator::FlipComparison => "a comparison tests the opposite of what it should",
            Operator::ChangeBoundary => "a comparison is off at its boundary",
            Operator::FlipBoolean => "a boolean condition combines its parts the wrong way",
            Operator::ChangeArithmetic => "an arithmetic or bitwise operator is wrong",
            Operator::OffByOne => "a numeric constant is off by one",
            Operator::RemoveCondition => "a check (an `if` block) is missing",
            Operator::RemoveStatement => "a statement is missing",
            Operator::RemoveLoop => "a loop is missing",
            Operator::RemoveWrapper => "a `with` or `try` block around some code is missing",
            Operator::InvertIf => "the branches of an `if`/`else` are swapped",
            Operator::SwapArguments => "a call passes its arguments in the wrong order",
            Operator::WrongReturn => "a function returns the wrong value",
        }
    }
}

/// One candidate bug: byte edits of one file, applied from the last to the first.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Mutation {
    pub operator: Operator,
    /// The file, relative to the project's root.
    pub file: String,
    /// `(start, end, replacement)`, non-overlapping, in increasing order.
    pub edits: Vec<(usize, usize, String)>,
    /// 1-based line of the first edit.
    pub line: usize,
    /// The enclosing function (`Class.method` for methods).
    pub function: String,
}

impl Mutation {
    pub fn apply(&self, source: &str) -> String {
        let mut out = source.to_string();
        for (start, end, with) in self.edits.iter().rev() {
            out.replace_range(*start..*end, with);
        }
        out
    }
}

pub fn parse(source: &str) -> Option<Tree> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .ok()?;
    parser.parse(source, None)
}

/// Every candidate in `source` (the file `file`), in source order; each one still parses.
pub fn candidates(file: &str, source: &str) -> Vec<Mutation> {
    let Some(tree) = parse(source) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut stack = vec![tree.root_node()];
    while let Some(node) = stack.pop() {
        for i in (0..node.child_count()).rev() {
            if let Some(c) = node.child(i) {
                stack.push(c);
            }
        }
        if node.has_error() || enclosing_function(node, source).is_none() {
            continue;
        }
        for (operator, edits) in at(node, source) {
            let function = enclosing_function(node, source).unwrap_or_default();
            let m = Mutation {
                operator,
                file: file.to_string(),
                line: line_of(source, edits[0].0),
                edits,
                function,
            };
            if parse(&m.apply(source)).is_some_and(|t| !t.root_node().has_error()) {
                found.push(m);
            }
        }
    }
    found.sort_by_key(|m| (m.edits[0].0, m.operator));
    found
}

type Edits = Vec<(usize, usize, String)>;

/// The mutations rooted at `node`.
fn at(node: Node, src: &str) -> Vec<(Operator, Edits)> {
    let text = |n: Node| &src[n.start_byte()..n.end_byte()];
    let replace = |n: Node, with: &str| vec![(n.start_byte(), n.end_byte(), with.to_string())];
    let mut out = Vec::new();
    match node.kind() {
        "comparison_operator" => {
            // Only simple comparisons (`a < b`): chained ones read oddly once flipped.
            let ops: Vec<Node> = children(node)
                .into_iter()
                .filter(|c| !c.is_named() || matches!(c.kind(), "not in" | "is not"))
                .collect();
            if let [op] = ops[..] {
                let flipped = match text(op) {
                    "==" => Some("!="),
                    "!=" => Some("=="),
                    "<" => Some(">"),
                    ">" => Some("<"),
                    "<=" => Some(">="),
                    ">=" => Some("<="),
                    "in" => Some("not in"),
                    "not in" => Some("in"),
                    "is" => Some("is not"),
                    "is not" => Some("is"),
                    _ => None,
                };
                if let Some(f) = flipped {
                    out.push((Operator::FlipComparison, replace(op, f)));
                }
                let boundary = match text(op) {
                    "<" => Some("<="),
                    "<=" => Some("<"),
                    ">" => Some(">="),
                    ">=" => Some(">"),
                    _ => None,
                };
                if let Some(b) = boundary {
                    out.push((Operator::ChangeBoundary, replace(op, b)));
                }
            }
        }
        "boolean_operator" => {
            if let Some(op) = node.child_by_field_name("operator") {
                let f = if text(op) == "and" { "or" } else { "and" };
                out.push((Operator::FlipBoolean, replace(op, f)));
            }
        }
        "binary_operator" => {
            if let Some(op) = node.child_by_field_name("operator") {
                let changed = match text(op) {
                    "+" => Some("-"),
                    "-" => Some("+"),
                    "*" => Some("/"),
                    "/" => Some("*"),
                    "//" => Some("/"),
                    "%" => Some("//"),
                    "**" => Some("*"),
                    "<<" => Some(">>"),
                    ">>" => Some("<<"),
                    "&" => Some("|"),
                    "|" => Some("&"),
                    "^" => Some("|"),
                    _ => None,
                };
                // `"…" % args` formats a string: not arithmetic.
                let is_format = text(op) == "%"
                    && node
                        .child_by_field_name("left")
                        .is_some_and(|l| l.kind() == "string");
                if let (Some(c), false) = (changed, is_format) {
                    out.push((Operator::ChangeArithmetic, replace(op, c)));
                }
            }
        }
        "integer" => {
            if let Ok(n) = text(node).parse::<u64>()
                && n < 1000
                && !in_default_or_subscript_slice(node)
            {
                out.push((Operator::OffByOne, replace(node, &(n + 1).to_string())));
                if n > 0 {
                    out.push((Operator::OffByOne, replace(node, &(n - 1).to_string())));
                }
            }
        }
        "if_statement" => {
            let has_alternative = node.child_by_field_name("alternative").is_some();
            if !has_alternative {
                out.push((Operator::RemoveCondition, remove_statement(node, src)));
            }
            if let Some(swap) = invert_if(node, src) {
                out.push((Operator::InvertIf, swap));
            }
        }
        "expression_statement" => {
            let first = node.named_child(0);
            let removable = first.is_some_and(|c| {
                matches!(c.kind(), "assignment" | "augmented_assignment" | "call")
            });
            if removable {
                out.push((Operator::RemoveStatement, remove_statement(node, src)));
            }
        }
        "for_statement" | "while_statement"
            if node.child_by_field_name("alternative").is_none() =>
        {
            out.push((Operator::RemoveLoop, remove_statement(node, src)));
        }
        "with_statement" | "try_statement" => {
            if let Some(body) = node.child_by_field_name("body")
                && let Some(edits) = unwrap_block(node, body, src)
            {
                out.push((Operator::RemoveWrapper, edits));
            }
        }
        "argument_list" => {
            let args = named_children(node);
            if args.len() >= 2
                && args[..2].iter().all(|a| {
                    !matches!(
                        a.kind(),
                        "keyword_argument"
                            | "list_splat"
                            | "dictionary_splat"
                            | "comment"
                            | "generator_expression"
                    )
                })
                && text(args[0]) != text(args[1])
            {
                out.push((
                    Operator::SwapArguments,
                    vec![
                        (
                            args[0].start_byte(),
                            args[0].end_byte(),
                            text(args[1]).into(),
                        ),
                        (
                            args[1].start_byte(),
                            args[1].end_byte(),
                            text(args[0]).into(),
                        ),
                    ],
                ));
            }
        }
        "return_statement" => {
            if let Some(value) = node.named_child(0) {
                let with = match value.kind() {
                    "true" => "False",
                    "false" => "True",
                    "none" => "",
                    _ => "None",
                };
                if !with.is_empty() {
                    out.push((Operator::WrongReturn, replace(value, with)));
                }
            }
        }
        _ => {}
    }
    out
}

fn children(node: Node) -> Vec<Node> {
    (0..node.child_count())
        .filter_map(|i| node.child(i))
        .collect()
}

fn named_children(node: Node) -> Vec<Node> {
    (0..node.named_child_count() as u32)
        .filter_map(|i| node.named_child(i))
        .collect()
}

/// A default parameter value or a slice bound: changing those rarely reads as a bug.
fn in_default_or_subscript_slice(node: Node) -> bool {
    node.parent()
        .is_some_and(|p| matches!(p.kind(), "default_parameter" | "typed_default_parameter"))
}

/// `Class.method` or `function` around `node`, if it sits in a function body.
fn enclosing_function(node: Node, src: &str) -> Option<String> {
    let mut names = Vec::new();
    let mut in_body = false;
    let mut cur = node;
    while let Some(p) = cur.parent() {
        if matches!(p.kind(), "function_definition" | "class_definition") {
            let body = p.child_by_field_name("body");
            if p.kind() == "function_definition"
                && body.is_some_and(|b| b.start_byte() <= node.start_byte())
            {
                in_body = true;
            }
            if let Some(n) = p.child_by_field_name("name") {
                names.push(&src[n.start_byte()..n.end_byte()]);
            }
        }
        cur = p;
    }
    if !in_body {
        return None;
    }
    names.reverse();
    Some(names.join("."))
}

fn line_start(src: &str, byte: usize) -> usize {
    src[..byte].rfind('\n').map_or(0, |i| i + 1)
}

fn line_end(src: &str, byte: usize) -> usize {
    src[byte..].find('\n').map_or(src.len(), |i| byte + i + 1)
}

fn line_of(src: &str, byte: usize) -> usize {
    src[..byte].matches('\n').count() + 1
}

/// Deletes a statement's lines; `pass` takes its place when it is alone in its block.
fn remove_statement(node: Node, src: &str) -> Edits {
    let start = line_start(src, node.start_byte());
    let end = line_end(
        src,
        node.end_byte().saturating_sub(1).max(node.start_byte()),
    );
    let alone = node.parent().is_some_and(|block| {
        block.kind() == "block"
            && named_children(block)
                .iter()
                .filter(|c| c.kind() != "comment")
                .count()
                == 1
    });
    let indent = &src[start..node.start_byte()];
    let with = if alone {
        format!("{indent}pass\n")
    } else {
        String::new()
    };
    vec![(start, end, with)]
}

/// Swaps the bodies of `if …: A else: B` (no `elif`).
fn invert_if(node: Node, src: &str) -> Option<Edits> {
    let consequence = node.child_by_field_name("consequence")?;
    let alternatives: Vec<Node> = {
        let mut c = node.walk();
        node.children_by_field_name("alternative", &mut c).collect()
    };
    let [alt] = alternatives[..] else {
        return None;
    };
    let body = alt
        .child_by_field_name("body")
        .filter(|_| alt.kind() == "else_clause")?;
    // Bodies on the `if` line itself (`if x: return 1`) have no indentation to keep.
    if consequence.start_position().row == node.start_position().row
        || body.start_position().row == alt.start_position().row
    {
        return None;
    }
    let text = |n: Node| src[n.start_byte()..n.end_byte()].to_string();
    Some(vec![
        (consequence.start_byte(), consequence.end_byte(), text(body)),
        (body.start_byte(), body.end_byte(), text(consequence)),
    ])
}

/// Replaces a `with`/`try` statement by its body, dedented to the statement's column.
fn unwrap_block(node: Node, body: Node, src: &str) -> Option<Edits> {
    if body.start_position().row == node.start_position().row {
        return None;
    }
    let stmt_col = node.start_position().column;
    let body_col = body.start_position().column;
    if body_col <= stmt_col {
        return None;
    }
    let shift = body_col - stmt_col;
    let start = line_start(src, node.start_byte());
    let end = line_end(
        src,
        node.end_byte().saturating_sub(1).max(node.start_byte()),
    );
    let body_text = &src[line_start(src, body.start_byte())..line_end(src, body.end_byte() - 1)];
    let mut out = String::new();
    for line in body_text.split_inclusive('\n') {
        let spaces = line.len() - line.trim_start_matches(' ').len();
        out.push_str(&line[spaces.min(shift)..]);
    }
    Some(vec![(start, end, out)])
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "\
import os

LIMIT = 10


def clamp(x, lo, hi):
    \"\"\"Clamp x.\"\"\"
    if x < lo:
        return lo
    total = x + 1
    for i in range(3):
        total += i
    if lo is None and hi:
        y = max(x, hi)
    else:
        y = min(x, hi)
    with open(os.devnull) as f:
        f.read()
        g = 2
    return total == y


class Box:
    def ok(self):
        return True
";

    fn applied(op: Operator) -> Vec<String> {
        candidates("m.py", SRC)
            .into_iter()
            .filter(|m| m.operator == op)
            .map(|m| m.apply(SRC))
            .collect()
    }

    #[test]
    fn module_level_code_is_left_alone() {
        assert!(
            candidates("m.py", SRC)
                .iter()
                .all(|m| m.line > 6 && !m.function.is_empty())
        );
    }

    #[test]
    fn each_operator_finds_its_sites_and_keeps_the_file_parsing() {
        let out = applied(Operator::FlipComparison);
        assert!(out.iter().any(|s| s.contains("if x > lo:")));
        assert!(out.iter().any(|s| s.contains("return total != y")));
        assert!(out.iter().any(|s| s.contains("lo is not None and hi")));
        assert!(
            applied(Operator::ChangeBoundary)
                .iter()
                .any(|s| s.contains("x <= lo"))
        );
        assert!(
            applied(Operator::FlipBoolean)
                .iter()
                .any(|s| s.contains("None or hi"))
        );
        assert!(
            applied(Operator::ChangeArithmetic)
                .iter()
                .any(|s| s.contains("total = x - 1"))
        );
        let obo = applied(Operator::OffByOne);
        assert!(
            obo.iter().any(|s| s.contains("range(4)"))
                && obo.iter().any(|s| s.contains("range(2)"))
        );
        assert!(
            applied(Operator::RemoveCondition)
                .iter()
                .any(|s| !s.contains("if x < lo"))
        );
        assert!(
            applied(Operator::RemoveLoop)
                .iter()
                .any(|s| !s.contains("for i in"))
        );
        let rs = applied(Operator::RemoveStatement);
        assert!(rs.iter().any(|s| !s.contains("total = x + 1")));
        // A statement alone in its block leaves `pass` behind.
        assert!(
            rs.iter()
                .any(|s| s.contains("    if lo is None and hi:\n        pass\n"))
        );
        let unwrapped = applied(Operator::RemoveWrapper);
        assert!(
            unwrapped
                .iter()
                .any(|s| s.contains("\n    f.read()\n    g = 2\n    return"))
        );
        assert!(
            applied(Operator::SwapArguments)
                .iter()
                .any(|s| s.contains("max(hi, x)"))
        );
        let wr = applied(Operator::WrongReturn);
        assert!(
            wr.iter().any(|s| s.contains("return False"))
                && wr.iter().any(|s| s.contains("return None"))
        );
        let inverted: Vec<String> = candidates("m.py", SRC)
            .into_iter()
            .filter(|m| m.operator == Operator::InvertIf)
            .map(|m| m.apply(SRC))
            .collect();
        assert_eq!(inverted.len(), 1);
        assert!(
            inverted[0]
                .contains("and hi:\n        y = min(x, hi)\n    else:\n        y = max(x, hi)\n")
        );
        // Docstrings and the import are never removed.
        assert!(
            rs.iter()
                .all(|s| s.contains("\"\"\"Clamp x.\"\"\"") && s.contains("import os"))
        );
    }

    #[test]
    fn every_candidate_parses_and_changes_the_file() {
        for m in candidates("m.py", SRC) {
            let out = m.apply(SRC);
            assert_ne!(out, SRC, "{m:?}");
            assert!(
                !parse(&out).unwrap().root_node().has_error(),
                "{m:?}\n{out}"
            );
        }
    }
}
