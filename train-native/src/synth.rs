//! Task synthesis: candidate bugs planted one at a time in a copy of a project and kept only
//! when its test suite, run in the sandbox, says they are bugs: at least one test that passed
//! in the baseline fails (FAIL_TO_PASS), every other one still passes (PASS_TO_PASS), no test
//! disappears, and the run ends within its time. Every attempt is logged (attempts.jsonl), so
//! a killed run resumes where it stopped and the yield per operator and project can be told.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use lilypad_agent::{RepoPath, Sandbox};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::envs::Environment;
use crate::mutate::{self, Mutation, Operator};
use crate::pytest::{Outcome, TestCommand, TestReport};
use crate::task::{self, BugSite, Hints, Task};
use crate::workspace::Workspace;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Attempt {
    /// The candidate's id (hash of the project, file and edits).
    pub key: String,
    pub project: String,
    pub operator: String,
    pub file: String,
    pub line: usize,
    pub verdict: Verdict,
    pub fail_to_pass: usize,
    pub seconds: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Valid,
    /// Every test still passes: not a bug the tests can see.
    NoTestFails,
    /// Tests that passed are no longer reported (a collection or import error).
    TestsVanish,
    Timeout,
    /// pytest itself failed (no report).
    RunFailed,
    /// Same resulting source as an earlier candidate.
    Duplicate,
    /// A model asked to change the code left no edit of a source file.
    NoChange,
}

pub struct SynthOptions {
    /// Valid tasks wanted per project.
    pub per_project: usize,
    /// Candidates tried per project at most (per run).
    pub max_tries: usize,
    pub seed: u64,
    pub hint_level: u8,
}

/// The paths synthesis writes.
pub struct SynthFiles {
    pub tasks: PathBuf,
    pub attempts: PathBuf,
}

impl SynthFiles {
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            tasks: dir.join("tasks.jsonl"),
            attempts: dir.join("attempts.jsonl"),
        }
    }
}

/// A test run's timeout for an environment: three times its baseline, at least 30 s.
pub fn run_timeout(env: &Environment) -> Duration {
    Duration::from_secs_f64((env.suite_s * 3.0).max(30.0))
}

pub fn candidate_key(env: &Environment, m: &Mutation) -> String {
    let mut h = Sha256::new();
    h.update(env.project.key());
    h.update(serde_json::to_string(&(&m.file, &m.edits)).unwrap_or_default());
    h.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// All candidates of a project, shuffled per operator and interleaved across operators, so
/// that each operator gets its share of tries whatever the order of the files.
pub fn candidate_order(ws: &Workspace, env: &Environment, seed: u64) -> Result<Vec<Mutation>> {
    let root = ws.project_src(&env.project);
    let mut by_op: BTreeMap<Operator, Vec<Mutation>> = BTreeMap::new();
    for file in &env.source_files {
        let src =
            std::fs::read_to_string(root.join(file)).with_context(|| format!("reading {file}"))?;
        for m in mutate::candidates(file, &src) {
            by_op.entry(m.operator).or_default().push(m);
        }
    }
    let mut h = Sha256::new();
    h.update(env.project.key());
    h.update(seed.to_le_bytes());
    let mut rng = StdRng::from_seed(h.finalize().into());
    let queues = by_op
        .into_values()
        .map(|mut v| {
            v.shuffle(&mut rng);
            v
        })
        .collect();
    Ok(round_robin(queues).collect())
}

/// The first item of each queue, then the second of each, and so on, skipping queues that
/// ran out.
pub fn round_robin<T>(queues: Vec<Vec<T>>) -> impl Iterator<Item = T> {
    let mut queues: Vec<std::vec::IntoIter<T>> = queues.into_iter().map(Vec::into_iter).collect();
    let mut i = 0;
    std::iter::from_fn(move || {
        for _ in 0..queues.len() {
            let q = i % queues.len();
            i += 1;
            if let Some(x) = queues[q].next() {
                return Some(x);
            }
        }
        None
    })
}

/// Synthesizes tasks for one environment until it has `per_project` of them (counting tasks
/// from earlier runs) or `max_tries` candidates were tried in this run.
pub fn synthesize(
    ws: &Workspace,
    env: &Environment,
    opts: &SynthOptions,
    files: &SynthFiles,
    progress: &mut dyn FnMut(&Attempt, usize),
) -> Result<Vec<Attempt>> {
    let attempts: Vec<Attempt> = task::read_lines(&files.attempts)?;
    let tried: HashSet<String> = attempts.iter().map(|a| a.key.clone()).collect();
    let tasks: Vec<Task> = task::read_lines(&files.tasks)?;
    let mut have = tasks.iter().filter(|t| t.repo == env.project.name).count();
    let mut made = Vec::new();
    if have >= opts.per_project {
        return Ok(made);
    }
    let validator = Validator::new(ws, env)?;
    let mut seen_sources: HashSet<[u8; 32]> = HashSet::new();
    for m in candidate_order(ws, env, opts.seed)? {
        if have >= opts.per_project || made.len() >= opts.max_tries {
            break;
        }
        let key = candidate_key(env, &m);
        if tried.contains(&key) {
            continue;
        }
        let original = std::fs::read_to_string(ws.project_src(&env.project).join(&m.file))?;
        let digest: [u8; 32] = Sha256::digest(format!("{}\0{}", m.file, m.apply(&original))).into();
        let (attempt, task) = if seen_sources.insert(digest) {
            validator.mutation(&m, original, &key, opts.hint_level)?
        } else {
            (attempt_of(env, &m, &key, Verdict::Duplicate, 0, 0.0), None)
        };
        task::append_line(&files.attempts, &attempt)?;
        if let Some(t) = task {
            task::append_line(&files.tasks, &t)?;
            have += 1;
        }
        progress(&attempt, have);
        made.push(attempt);
    }
    Ok(made)
}

fn attempt_of(
    env: &Environment,
    m: &Mutation,
    key: &str,
    verdict: Verdict,
    f2p: usize,
    s: f64,
) -> Attempt {
    Attempt {
        key: key.to_string(),
        project: env.project.name.clone(),
        operator: m.operator.name().to_string(),
        file: m.file.clone(),
        line: m.line,
        verdict,
        fail_to_pass: f2p,
        seconds: s,
    }
}

/// What a test run of planted bugs says, against the baseline.
pub struct Judgement {
    pub verdict: Verdict,
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: Vec<String>,
}

pub fn judge(env: &Environment, report: &TestReport) -> Judgement {
    let mut j = Judgement {
        verdict: Verdict::Valid,
        fail_to_pass: Vec::new(),
        pass_to_pass: Vec::new(),
    };
    if report.timed_out {
        j.verdict = Verdict::Timeout;
        return j;
    }
    if !report.completed() {
        j.verdict = Verdict::RunFailed;
        return j;
    }
    for id in env.passing() {
        match report.tests.get(id).map(|r| r.outcome) {
            Some(Outcome::Passed) => j.pass_to_pass.push(id.to_string()),
            Some(Outcome::Failed | Outcome::Error) => j.fail_to_pass.push(id.to_string()),
            // Skipped now, or gone: the bug broke more than a test can isolate.
            _ => {
                j.verdict = Verdict::TestsVanish;
            }
        }
    }
    if j.verdict == Verdict::Valid && j.fail_to_pass.is_empty() {
        j.verdict = Verdict::NoTestFails;
    }
    j
}

/// One file of a planted bug: its released text and its buggy text.
pub struct PlantedFile {
    pub file: String,
    pub original: String,
    pub buggy: String,
}

/// What the suite said of a planted bug; `task` when it is valid.
pub struct Validation {
    pub verdict: Verdict,
    pub fail_to_pass: usize,
    pub seconds: f64,
    pub task: Option<Task>,
}

/// A scratch copy of one environment that candidate bugs are planted in, one at a time, and
/// the suite run on in the sandbox. The copy is removed when the validator is dropped.
pub struct Validator<'a> {
    pub env: &'a Environment,
    pub cmd: TestCommand,
    pub sandbox: Sandbox,
    pub work: PathBuf,
}

impl Drop for Validator<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

impl<'a> Validator<'a> {
    pub fn new(ws: &Workspace, env: &'a Environment) -> Result<Self> {
        Ok(Self {
            env,
            cmd: env.test_command(ws, run_timeout(env)),
            sandbox: ws.sandbox(&env.project)?,
            work: ws.scratch_copy(&env.project, "validate")?,
        })
    }

    /// Plants `files` (distinct files), runs the suite and restores them; a valid result
    /// becomes the task `instance_id`, its statement at `hint_level`.
    pub fn validate(
        &self,
        files: &[PlantedFile],
        bugs: Vec<BugSite>,
        instance_id: String,
        hint_level: u8,
    ) -> Result<Validation> {
        let (env, work) = (self.env, &self.work);
        for f in files {
            std::fs::write(work.join(&f.file), &f.buggy)?;
        }
        let report = self.cmd.run(work, &self.sandbox, None);
        for f in files {
            std::fs::write(work.join(&f.file), &f.original)?;
        }
        let report = report?;
        let j = judge(env, &report);
        let mut v = Validation {
            verdict: j.verdict,
            fail_to_pass: j.fail_to_pass.len(),
            seconds: report.wall_s,
            task: None,
        };
        if j.verdict != Verdict::Valid {
            return Ok(v);
        }
        let snapshot = |text: &dyn Fn(&PlantedFile) -> &str| -> Result<lilypad_agent::Snapshot> {
            let mut s = lilypad_agent::Snapshot::new();
            for f in files {
                s.insert(RepoPath::new(&f.file)?, text(f).as_bytes().to_vec());
            }
            Ok(s)
        };
        let clean = snapshot(&|f| &f.original)?;
        let buggy = snapshot(&|f| &f.buggy)?;
        let failure = j
            .fail_to_pass
            .first()
            .and_then(|id| report.tests.get(id))
            .map(|r| task::failure_excerpt(&r.message, 25))
            .unwrap_or_default();
        let mut t = Task {
            instance_id,
            repo: env.project.name.clone(),
            version: env.project.version.clone(),
            split: env.project.split,
            patch: lilypad_agent::patch::diff(&buggy, &clean),
            test_patch: String::new(),
            fail_to_pass: j.fail_to_pass,
            pass_to_pass: j.pass_to_pass,
            problem_statement: String::new(),
            bug_patch: lilypad_agent::patch::diff(&clean, &buggy),
            bugs,
            hints: Hints {
                failing_tests: Vec::new(),
                failure,
            },
            hint_level: 0,
            validation_s: report.wall_s,
        };
        t.hints.failing_tests = t.fail_to_pass.clone();
        t.set_hint_level(hint_level);
        v.task = Some(t);
        Ok(v)
    }

    /// Validates one mutation of `original` (its file's released text) as a task.
    pub fn mutation(
        &self,
        m: &Mutation,
        original: String,
        key: &str,
        hint_level: u8,
    ) -> Result<(Attempt, Option<Task>)> {
        let buggy = m.apply(&original);
        let site = BugSite {
            operator: m.operator.name().to_string(),
            file: m.file.clone(),
            line: m.line,
            function: m.function.clone(),
        };
        let file = PlantedFile {
            file: m.file.clone(),
            original,
            buggy,
        };
        let id = format!("{}.{}.{key}", self.env.project.key(), m.operator.name());
        let v = self.validate(&[file], vec![site], id, hint_level)?;
        let attempt = attempt_of(self.env, m, key, v.verdict, v.fail_to_pass, v.seconds);
        Ok((attempt, v.task))
    }
}

/// Yield per operator and per project from the attempts log.
pub fn yield_table(attempts: &[Attempt], by: impl Fn(&Attempt) -> String) -> String {
    let mut rows: BTreeMap<String, [usize; 7]> = BTreeMap::new();
    for a in attempts {
        let r = rows.entry(by(a)).or_default();
        r[a.verdict as usize] += 1;
    }
    let mut out = format!(
        "{:<20} {:>6} {:>6} {:>8} {:>8} {:>7} {:>6} {:>6} {:>7} {:>7}\n",
        "", "tried", "valid", "no fail", "vanish", "timeout", "error", "dup", "no edit", "yield"
    );
    for (name, r) in rows {
        let tried: usize = r.iter().sum();
        out.push_str(&format!(
            "{:<20} {:>6} {:>6} {:>8} {:>8} {:>7} {:>6} {:>6} {:>7} {:>6.0}%\n",
            name,
            tried,
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            100.0 * r[0] as f64 / tried.max(1) as f64
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::round_robin;

    #[test]
    fn round_robin_takes_one_from_each_queue_in_turn() {
        let order: Vec<u32> =
            round_robin(vec![vec![1, 4, 6], vec![], vec![2], vec![3, 5]]).collect();
        assert_eq!(order, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(round_robin(Vec::<Vec<u32>>::new()).count(), 0);
    }
}
