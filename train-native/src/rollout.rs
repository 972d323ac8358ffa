//! Rollouts: the agent on a task's buggy copy of its project, every command sandboxed, then
//! graded by the project's own test suite.
//!
//! Grading keeps only the model's edits to existing source files: changes to tests, test
//! configuration, new files and deleted files are reverted before the suite runs, so a
//! rollout cannot pass by editing the tests. A task is resolved when its whole suite
//! completes with every FAIL_TO_PASS and every PASS_TO_PASS test passing.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use lilypad_agent::{
    AgentConfig, AgentEvent, DiskRepo, LanguageModel, NativeShell, RepoPath, Repository, Sandbox,
    Snapshot, Toolbox, Trajectory, run_agent,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::envs::{Environment, is_test_path};
use crate::pytest::{Outcome, TestCommand};
use crate::synth::run_timeout;
use crate::task::Task;
use crate::workspace::{Workspace, write_atomic};

/// One agent run on one task, as graded.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rollout {
    pub instance_id: String,
    pub project: String,
    /// Which of the task's k samples this is.
    pub sample: usize,
    pub seed: u64,
    pub hint_level: u8,
    pub resolved: bool,
    /// How the agent loop ended (`Submitted`, `StepLimit`, …).
    pub exit: String,
    pub steps: usize,
    pub prefilled_tokens: usize,
    pub generated_tokens: usize,
    pub agent_s: f64,
    pub test_s: f64,
    /// FAIL_TO_PASS tests that pass after the model's edits, of `fail_to_pass`.
    pub fail_to_pass_fixed: usize,
    pub fail_to_pass: usize,
    /// PASS_TO_PASS tests that no longer pass.
    pub pass_to_pass_broken: usize,
    /// Source files whose edits were graded.
    pub graded_files: Vec<String>,
    /// Files the model changed that grading reverted (tests, configuration, new files).
    pub reverted_files: Vec<String>,
    /// Why the suite could not grade the edits (it timed out or crashed), if it could not.
    pub grade_error: Option<String>,
    /// The model's whole patch (`git diff` of the buggy copy), as SWE-bench's `model_patch`.
    pub model_patch: String,
}

/// Readies a chat session for agent rollouts: the agent's opening (its system prompt and
/// tool schemas, the same for every task) is evaluated once per model and adapter and kept in
/// memory, so every later episode starts after it instead of reading it again. A training
/// step changes the adapter's key ([`lilypad_engine::Model::state_key`]), so episodes after
/// it evaluate the opening afresh.
pub fn keep_openings(session: &mut lilypad_chat::ChatSession) {
    session.set_prefix_store(Some(Box::new(lilypad_chat::MemoryPrefixStore::new())));
}

/// The agent's sampling seed for a task's `sample`-th rollout: distinct per task and sample,
/// the same on every run.
pub fn rollout_seed(base: u64, instance_id: &str, sample: usize) -> u64 {
    let mut h = Sha256::new();
    h.update(base.to_le_bytes());
    h.update(instance_id.as_bytes());
    h.update((sample as u64).to_le_bytes());
    u64::from_le_bytes(h.finalize()[..8].try_into().unwrap_or_default())
}

/// Plants the task's bug in `dir`, a fresh copy of its project.
pub fn plant(dir: &Path, task: &Task) -> Result<()> {
    let mut files = Snapshot::new();
    for b in &task.bugs {
        let path = RepoPath::new(&b.file)?;
        if let std::collections::btree_map::Entry::Vacant(slot) = files.entry(path) {
            let data = std::fs::read(dir.join(&b.file))
                .with_context(|| format!("{}: reading {}", task.instance_id, b.file))?;
            slot.insert(data);
        }
    }
    let before = files.clone();
    lilypad_agent::patch::apply(&mut files, &task.bug_patch)
        .with_context(|| format!("{}: the bug patch does not apply", task.instance_id))?;
    for (path, data) in &files {
        if before.get(path) != Some(data) {
            std::fs::write(dir.join(path.as_str()), data)?;
        }
    }
    if files == before {
        bail!("{}: the bug patch changes nothing", task.instance_id);
    }
    Ok(())
}

/// What grading found.
pub struct Grade {
    pub resolved: bool,
    pub fail_to_pass_fixed: usize,
    pub pass_to_pass_broken: usize,
    pub graded_files: Vec<String>,
    pub reverted_files: Vec<String>,
    pub test_s: f64,
    pub error: Option<String>,
}

/// The shell the agent's commands run in on a copy of `env`'s project at `work`: sandboxed,
/// with the venv first on PATH and the copy's source on PYTHONPATH, so `python -m pytest`
/// tests the code being edited.
pub fn agent_shell(
    ws: &Workspace,
    env: &Environment,
    work: &Path,
    sandbox: &Sandbox,
) -> Result<NativeShell> {
    let source = work.join(&env.project.source);
    Ok(NativeShell::new(work.to_path_buf())
        .sandboxed(sandbox.clone())
        .with_env("PATH", ws.command_path(&env.project)?.to_string_lossy())
        .with_env("PYTHONPATH", source.to_string_lossy())
        .with_env("PYTHONDONTWRITEBYTECODE", "1")
        .with_env("PYTEST_ADDOPTS", "-p no:cacheprovider"))
}

/// A file whose edits count (for grading, and as a model-written bug): an existing Python
/// source file, not a test.
pub fn graded(path: &RepoPath, baseline: &Snapshot) -> bool {
    baseline.contains_key(path) && path.as_str().ends_with(".py") && !is_test_path(path.as_str())
}

/// Reverts every change in `dir` (against `baseline`, the buggy copy) that is not an edit of
/// an existing source file, runs the suite and compares it with the task's tests.
pub fn grade(
    dir: &Path,
    baseline: &Snapshot,
    task: &Task,
    cmd: &TestCommand,
    sandbox: &Sandbox,
) -> Result<Grade> {
    let mut repo = DiskRepo::open(dir)?;
    let now = repo.snapshot()?;
    let mut graded_files = Vec::new();
    let mut reverted_files = Vec::new();
    let changed = baseline
        .keys()
        .chain(now.keys())
        .filter(|p| baseline.get(*p) != now.get(*p))
        .collect::<std::collections::BTreeSet<_>>();
    for path in changed {
        if graded(path, baseline) && now.contains_key(path) {
            graded_files.push(path.as_str().to_string());
            continue;
        }
        reverted_files.push(path.as_str().to_string());
        match baseline.get(path) {
            Some(data) => {
                if let Some(parent) = path.parent() {
                    repo.create_dir_all(&parent)?;
                }
                repo.write(path, data)?;
            }
            None => repo.remove(path)?,
        }
    }
    let report = cmd.run(dir, sandbox, None)?;
    let passed = |id: &String| {
        report
            .tests
            .get(id)
            .is_some_and(|r| r.outcome == Outcome::Passed)
    };
    let fixed = task.fail_to_pass.iter().filter(|id| passed(id)).count();
    let broken = task.pass_to_pass.iter().filter(|id| !passed(id)).count();
    let error = if report.timed_out {
        Some(format!(
            "the suite ran past {:.0} s",
            cmd.timeout.as_secs_f64()
        ))
    } else if !report.completed() {
        Some(format!(
            "pytest did not finish its run (exit status {:?}): {}",
            report.exit_status,
            report
                .output_tail
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ")
        ))
    } else {
        None
    };
    Ok(Grade {
        resolved: error.is_none() && fixed == task.fail_to_pass.len() && broken == 0,
        fail_to_pass_fixed: fixed,
        pass_to_pass_broken: broken,
        graded_files,
        reverted_files,
        test_s: report.wall_s,
        error,
    })
}

/// Runs the agent, writing its trajectory to `path` after every step and at the end, so a
/// killed run keeps what it did.
#[allow(clippy::too_many_arguments)]
pub fn run_recorded<M: LanguageModel>(
    model: &mut M,
    repo: &mut DiskRepo,
    toolbox: &mut Toolbox,
    task: &str,
    config: &AgentConfig,
    path: &Path,
    on_step: &mut dyn FnMut(&Trajectory),
) -> Result<Trajectory> {
    let mut write_error = None;
    let trajectory = pollster::block_on(run_agent(
        model,
        repo,
        toolbox,
        task,
        config,
        &mut |event| {
            if let AgentEvent::StepFinished(t) = event {
                if let Err(e) = write_atomic(path, t.to_json().as_bytes()) {
                    write_error = Some(e);
                }
                on_step(t);
            }
            true
        },
    ))?;
    write_atomic(path, trajectory.to_json().as_bytes())?;
    match write_error {
        Some(e) => Err(e),
        None => Ok(trajectory),
    }
}

/// Where a rollout writes its trajectory while it runs.
pub struct RolloutPaths {
    pub trajectory: PathBuf,
}

/// Runs the agent on `task` (a fresh copy of its project with the bug planted, commands in the
/// project's sandbox with its venv and source on the paths), then grades the result. The
/// trajectory is written after every step, so a killed run keeps what it did.
#[allow(clippy::too_many_arguments)]
pub fn rollout<M: LanguageModel>(
    ws: &Workspace,
    env: &Environment,
    task: &Task,
    sample: usize,
    model: &mut M,
    config: &AgentConfig,
    paths: &RolloutPaths,
    on_step: &mut dyn FnMut(&Trajectory),
) -> Result<(Rollout, Trajectory)> {
    let sandbox = ws.sandbox(&env.project)?;
    let work = ws.fixed_scratch_copy(&env.project, "rollout")?;
    let result = (|| {
        plant(&work, task)?;
        let mut repo = DiskRepo::open(&work)?;
        let baseline = repo.snapshot()?;
        let mut toolbox = Toolbox::new(Box::new(agent_shell(ws, env, &work, &sandbox)?));
        let start = Instant::now();
        let trajectory = run_recorded(
            model,
            &mut repo,
            &mut toolbox,
            &task.problem_statement,
            config,
            &paths.trajectory,
            on_step,
        )?;
        let agent_s = start.elapsed().as_secs_f64();
        let cmd = env.test_command(ws, run_timeout(env));
        let g = grade(&work, &baseline, task, &cmd, &sandbox)?;
        let rollout = Rollout {
            instance_id: task.instance_id.clone(),
            project: task.repo.clone(),
            sample,
            seed: config.sampling.seed,
            hint_level: task.hint_level,
            resolved: g.resolved,
            exit: trajectory
                .exit
                .as_ref()
                .map_or("unknown".into(), |e| format!("{e:?}")),
            steps: trajectory.steps.len(),
            prefilled_tokens: trajectory.prefilled_tokens(),
            generated_tokens: trajectory.generated_tokens(),
            agent_s,
            test_s: g.test_s,
            fail_to_pass_fixed: g.fail_to_pass_fixed,
            fail_to_pass: task.fail_to_pass.len(),
            pass_to_pass_broken: g.pass_to_pass_broken,
            graded_files: g.graded_files,
            reverted_files: g.reverted_files,
            grade_error: g.error,
            model_patch: trajectory.patch.clone(),
        };
        Ok((rollout, trajectory))
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{built_inflection, call, synthesized_task};
    use lilypad_agent::ScriptedModel;

    #[test]
    fn scripted_rollouts_are_graded_by_the_tests() {
        let Some((ws, env)) = built_inflection() else {
            return;
        };
        let (task, original, _buggy) = synthesized_task(&ws, &env);
        let file = task.bugs[0].file.clone();
        let out = tempfile::tempdir().unwrap();
        let config = AgentConfig {
            max_steps: 5,
            ..AgentConfig::default()
        };
        let paths = |n: &str| RolloutPaths {
            trajectory: out.path().join(format!("{n}.json")),
        };
        let run = |model: &mut ScriptedModel, n: &str| {
            rollout(&ws, &env, &task, 0, model, &config, &paths(n), &mut |_| {}).unwrap()
        };

        // Restoring the released source resolves the task.
        let fix = [
            call("Read", serde_json::json!({"file_path": file})),
            call(
                "Write",
                serde_json::json!({"file_path": file, "content": original}),
            ),
            "Fixed.".to_string(),
        ];
        let texts: Vec<&str> = fix.iter().map(String::as_str).collect();
        let (r, traj) = run(&mut ScriptedModel::new("fix", &texts), "fix");
        assert!(r.resolved, "{r:?}");
        assert_eq!(r.graded_files, vec![file.clone()]);
        assert_eq!(r.fail_to_pass_fixed, task.fail_to_pass.len());
        assert_eq!(r.pass_to_pass_broken, 0);
        assert_eq!(r.model_patch, task.patch);
        assert_eq!(traj.steps.len(), 3);
        assert!(out.path().join("fix.json").exists());

        // Emptying the tests is reverted, and the bug still fails them.
        let tests_file = task.fail_to_pass[0].split("::").next().unwrap().to_string();
        let cheat = [
            call(
                "Write",
                serde_json::json!({"file_path": tests_file, "content": "def test_ok():\n    pass\n"}),
            ),
            call(
                "Bash",
                serde_json::json!({"command": "python -m pytest -q"}),
            ),
            "Done.".to_string(),
        ];
        let texts: Vec<&str> = cheat.iter().map(String::as_str).collect();
        let (r, traj) = run(&mut ScriptedModel::new("cheat", &texts), "cheat");
        assert!(!r.resolved, "{r:?}");
        assert_eq!(r.reverted_files, vec![tests_file]);
        assert!(r.graded_files.is_empty());
        assert_eq!(r.fail_to_pass_fixed, 0);
        // The model's own test run saw the project's code on PYTHONPATH and pytest on PATH.
        let bash = &traj.steps[1].calls[0].observation;
        assert!(bash.contains("1 passed"), "{bash}");

        // Doing nothing resolves nothing.
        let (r, _) = run(&mut ScriptedModel::new("idle", &["I give up."]), "idle");
        assert!(!r.resolved);
        assert_eq!(r.exit, "Submitted");
        assert!(r.model_patch.is_empty());
    }
}
