//! Running an environment's test suite with pytest, in the sandbox, and reading each test's
//! outcome from a small plugin (`pytest_report.py`, installed into every venv) rather than
//! from pytest's console output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lilypad_agent::{DiskRepo, NativeShell, Sandbox, Shell};
use serde::{Deserialize, Serialize};

/// The plugin, copied into each venv's site-packages as `lilypad_pytest_report.py`.
pub const PLUGIN: &str = include_str!("pytest_report.py");
pub const PLUGIN_MODULE: &str = "lilypad_pytest_report";
/// Where a run's report is written, inside the folder under test (the sandbox's only
/// writable place); removed after reading.
const REPORT_FILE: &str = ".lilypad-pytest.json";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Passed,
    Failed,
    Error,
    Skipped,
    Xfailed,
    Xpassed,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TestResult {
    pub outcome: Outcome,
    #[serde(default)]
    pub duration: f64,
    /// The failure's traceback, its last 4,000 characters.
    #[serde(default)]
    pub message: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TestReport {
    pub tests: BTreeMap<String, TestResult>,
    /// pytest's exit status (0 all passed, 1 some failed, 2–4 interrupted or a usage error,
    /// 5 nothing collected); None when it was killed or wrote no report.
    pub exit_status: Option<i32>,
    pub wall_s: f64,
    pub timed_out: bool,
    /// The end of pytest's console output, for the reason a run went wrong.
    pub output_tail: String,
}

impl TestReport {
    /// Finished and reported on its tests (whatever they did).
    pub fn completed(&self) -> bool {
        !self.timed_out && matches!(self.exit_status, Some(0 | 1))
    }
}

#[derive(Deserialize)]
struct PluginReport {
    exitstatus: i32,
    tests: BTreeMap<String, TestResult>,
}

/// How to run one environment's tests.
#[derive(Clone, Debug)]
pub struct TestCommand {
    pub venv: PathBuf,
    /// The folder put first on PYTHONPATH, relative to the folder under test.
    pub source: String,
    /// pytest's path arguments.
    pub tests: Vec<String>,
    /// pytest options given before the paths (the manifest's `pytest_args`).
    pub options: Vec<String>,
    pub timeout: Duration,
}

impl TestCommand {
    /// The shell command, run from the folder under test. pytest's own `addopts` are cleared:
    /// projects put coverage and plugin options there that the environment does not need.
    pub fn script(&self, only: Option<&[String]>) -> String {
        let python = self.venv.join("bin/python");
        let mut s = format!(
            "PATH={}:\"$PATH\" PYTHONPATH=\"$PWD/\"{} PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0 \
             LILYPAD_PYTEST_REPORT=\"$PWD/{REPORT_FILE}\" {} -m pytest -p {PLUGIN_MODULE} \
             -p no:cacheprovider -o addopts= -q --tb=short --color=no",
            quote(&self.venv.join("bin").to_string_lossy()),
            quote(&self.source),
            quote(&python.to_string_lossy()),
        );
        let paths = match only {
            Some(ids) => ids,
            None => &self.tests[..],
        };
        let args = self.options.iter().chain(paths);
        for a in args {
            s.push(' ');
            s.push_str(&quote(a));
        }
        s.push_str(" >.lilypad-pytest.log 2>&1; s=$?; tail -c 4000 .lilypad-pytest.log; rm -f .lilypad-pytest.log; exit $s");
        s
    }

    /// Runs the suite (or only the tests `only` names) on `dir` inside `sandbox`.
    pub fn run(
        &self,
        dir: &Path,
        sandbox: &Sandbox,
        only: Option<&[String]>,
    ) -> Result<TestReport> {
        let report_path = dir.join(REPORT_FILE);
        let _ = std::fs::remove_file(&report_path);
        let mut repo = DiskRepo::open(dir).with_context(|| format!("opening {}", dir.display()))?;
        let mut shell = NativeShell::new(dir.to_path_buf()).sandboxed(sandbox.clone());
        let start = Instant::now();
        let out = shell.run(&mut repo, &self.script(only), self.timeout);
        let wall_s = start.elapsed().as_secs_f64();
        let plugin: Option<PluginReport> = std::fs::read(&report_path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let _ = std::fs::remove_file(&report_path);
        let (tests, exit_status) = match plugin {
            Some(p) if !out.timed_out => (p.tests, Some(p.exitstatus)),
            _ => (BTreeMap::new(), None),
        };
        Ok(TestReport {
            tests,
            exit_status,
            wall_s,
            timed_out: out.timed_out,
            output_tail: tail(&out.output, 2000),
        })
    }
}

/// A word for `sh`, single-quoted.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn tail(s: &str, n: usize) -> String {
    let start = s.len().saturating_sub(n);
    let start = (start..=s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    s[start..].to_string()
}
