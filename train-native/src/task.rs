//! Bug-fix tasks, stored one per line (JSONL) with the field names SWE-bench and SWE-smith
//! use, so their tools read them: `instance_id`, `repo`, `version`, `patch` (the fix: applied
//! to the buggy source it restores the release, as SWE-bench's gold patch does),
//! `test_patch` (empty: the release's own tests are the tests), `FAIL_TO_PASS`,
//! `PASS_TO_PASS` and `problem_statement`. Our own fields say how the bug was made
//! (`bug_patch` plants it in the released source, `bugs` names the mutations) and carry what
//! calibration needs (`hints`, `hint_level`).

use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::manifest::Split;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Task {
    pub instance_id: String,
    /// The project's name on the package index.
    pub repo: String,
    pub version: String,
    pub split: Split,
    /// The fix, as a `git diff` of the buggy source.
    pub patch: String,
    pub test_patch: String,
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Vec<String>,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Vec<String>,
    pub problem_statement: String,
    /// Plants the bug in the released source (the reverse of `patch`).
    pub bug_patch: String,
    /// The mutations that make the bug (two for a combined task).
    pub bugs: Vec<BugSite>,
    pub hints: Hints,
    /// How much of `hints` the problem statement gives (0–3).
    pub hint_level: u8,
    /// Seconds the validating test run took.
    pub validation_s: f64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BugSite {
    pub operator: String,
    pub file: String,
    pub line: usize,
    pub function: String,
}

/// What a problem statement can say, from least to most revealing.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Hints {
    /// The tests that fail, in order.
    pub failing_tests: Vec<String>,
    /// The end of the first failing test's traceback.
    pub failure: String,
}

pub const MAX_HINT_LEVEL: u8 = 3;

impl Task {
    /// The problem statement at `level`: 0 names the failing tests; 1 adds the first
    /// failure's traceback; 2 the file and function of the bug; 3 its line and kind.
    pub fn statement(&self, level: u8) -> String {
        let tests = &self.hints.failing_tests;
        let shown: Vec<String> = tests.iter().take(3).map(|t| format!("- `{t}`")).collect();
        let more = if tests.len() > 3 {
            format!("\n(and {} more)", tests.len() - 3)
        } else {
            String::new()
        };
        let mut s = format!(
            "A bug in {} {} makes its tests fail:\n{}{more}\n\nFind the bug in the source code \
             (not in the tests) and fix it. Check with `python -m pytest -q {}`.",
            self.repo,
            self.version,
            shown.join("\n"),
            tests.first().map_or("", |t| t.as_str()),
        );
        if level >= 1 && !self.hints.failure.is_empty() {
            s.push_str(&format!(
                "\n\nThe first failure ends with:\n```\n{}\n```",
                self.hints.failure.trim_end()
            ));
        }
        if level >= 2 {
            let places: Vec<String> = self
                .bugs
                .iter()
                .map(|b| match b.function.as_str() {
                    "" => format!("`{}`", b.file),
                    f => format!("`{f}` in `{}`", b.file),
                })
                .collect();
            s.push_str(&format!("\n\nLook at {}.", places.join(" and ")));
        }
        if level >= 3 {
            let kinds: Vec<String> = self
                .bugs
                .iter()
                .map(|b| format!("near line {}, {}", b.line, operator_hint(&b.operator)))
                .collect();
            s.push_str(&format!("\nThe mistake: {}.", kinds.join("; and ")));
        }
        s
    }

    pub fn set_hint_level(&mut self, level: u8) {
        self.hint_level = level.min(MAX_HINT_LEVEL);
        self.problem_statement = self.statement(self.hint_level);
    }
}

fn operator_hint(name: &str) -> &'static str {
    crate::mutate::Operator::ALL
        .iter()
        .find(|o| o.name() == name)
        .map_or("a small change", |o| o.hint())
}

/// The end of a traceback, at most `lines` lines and 1,500 characters.
pub fn failure_excerpt(message: &str, lines: usize) -> String {
    let kept: Vec<&str> = message.lines().rev().take(lines).collect();
    let text: String = kept.into_iter().rev().collect::<Vec<_>>().join("\n");
    let start = text.len().saturating_sub(1500);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    text[start..].to_string()
}

pub fn read_tasks(path: &Path) -> Result<Vec<Task>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut tasks = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        tasks.push(
            serde_json::from_str(&line)
                .with_context(|| format!("{}:{}: not a task", path.display(), i + 1))?,
        );
    }
    Ok(tasks)
}

/// Appends one JSON line and flushes it, so a killed run keeps every finished record.
pub fn append_line<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut line = serde_json::to_string(value)?;
    line.push('\n');
    f.write_all(line.as_bytes())?;
    f.flush()?;
    Ok(())
}

/// Reads the JSON lines of `path` (none when it is missing); a torn last line (a killed
/// writer) is skipped.
pub fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        if let Ok(v) = serde_json::from_str(&line?) {
            out.push(v);
        }
    }
    Ok(out)
}
