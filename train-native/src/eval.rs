//! Evaluation: k rollouts of every task, graded by the tests, summarized as resolve rate
//! averaged over the k runs (Avg@k, with its spread across runs), pass@k, and per project,
//! per kind of bug and per way the agent stopped. Rollouts are logged as they finish
//! (rollouts.jsonl, with each trajectory beside it), so an interrupted evaluation resumes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use crate::rollout::Rollout;
use crate::task::Task;

/// The files of one evaluation.
pub struct EvalFiles {
    pub dir: PathBuf,
}

impl EvalFiles {
    pub fn rollouts(&self) -> PathBuf {
        self.dir.join("rollouts.jsonl")
    }
    /// SWE-bench's predictions format: instance_id, model_name_or_path, model_patch.
    pub fn predictions(&self) -> PathBuf {
        self.dir.join("predictions.jsonl")
    }
    pub fn trajectory(&self, instance_id: &str, sample: usize) -> PathBuf {
        self.dir
            .join("trajectories")
            .join(format!("{instance_id}.{sample}.json"))
    }
    pub fn report_md(&self) -> PathBuf {
        self.dir.join("report.md")
    }
    pub fn report_json(&self) -> PathBuf {
        self.dir.join("report.json")
    }
    pub fn plot(&self) -> PathBuf {
        self.dir.join("resolve-rate.svg")
    }
}

/// The (task, sample) pairs still to run, sample-major: every task's first rollout comes
/// before any second one, so a stopped evaluation holds whole runs.
pub fn pending<'a>(tasks: &'a [Task], k: usize, done: &[Rollout]) -> Vec<(&'a Task, usize)> {
    let have: HashSet<(&str, usize)> = done
        .iter()
        .map(|r| (r.instance_id.as_str(), r.sample))
        .collect();
    (0..k)
        .flat_map(|s| tasks.iter().map(move |t| (t, s)))
        .filter(|(t, s)| !have.contains(&(t.instance_id.as_str(), *s)))
        .collect()
}

#[derive(Clone, Debug, Serialize)]
pub struct Group {
    pub name: String,
    pub tasks: usize,
    pub rollouts: usize,
    pub resolved: usize,
    pub resolve_rate: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub model: String,
    pub tasks: usize,
    pub k: usize,
    pub rollouts: usize,
    /// Resolved rollouts over all rollouts (Avg@k when every task has k).
    pub resolve_rate: f64,
    /// Resolve rate of each run (the i-th rollout of every task), for the spread.
    pub per_run: Vec<f64>,
    pub per_run_std: f64,
    /// Share of tasks resolved at least once in their rollouts.
    pub pass_at_k: f64,
    /// Unbiased pass@1 from each task's rollouts (the mean of its p̂).
    pub pass_at_1: f64,
    pub mean_steps: f64,
    pub mean_generated_tokens: f64,
    pub mean_agent_s: f64,
    pub mean_test_s: f64,
    /// Rollouts whose suite could not grade them (timeout, crash).
    pub grade_errors: usize,
    /// Rollouts with edits to tests or configuration that grading reverted.
    pub reverted_edits: usize,
    pub by_project: Vec<Group>,
    pub by_operator: Vec<Group>,
    pub by_exit: BTreeMap<String, usize>,
    /// Tasks by how many of their rollouts resolved them (index = resolved count).
    pub solved_histogram: Vec<usize>,
}

fn group(name: String, rollouts: &[&Rollout]) -> Group {
    let tasks: HashSet<&str> = rollouts.iter().map(|r| r.instance_id.as_str()).collect();
    let resolved = rollouts.iter().filter(|r| r.resolved).count();
    Group {
        name,
        tasks: tasks.len(),
        rollouts: rollouts.len(),
        resolved,
        resolve_rate: resolved as f64 / rollouts.len().max(1) as f64,
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (n, s) = xs.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    if n == 0 { 0.0 } else { s / n as f64 }
}

/// Summarizes `rollouts` of `tasks` (only the rollouts of those tasks count).
pub fn report(model: &str, tasks: &[Task], k: usize, rollouts: &[Rollout]) -> Report {
    let by_id: HashMap<&str, &Task> = tasks.iter().map(|t| (t.instance_id.as_str(), t)).collect();
    let rs: Vec<&Rollout> = rollouts
        .iter()
        .filter(|r| by_id.contains_key(r.instance_id.as_str()) && r.sample < k)
        .collect();
    let resolved = rs.iter().filter(|r| r.resolved).count();
    let per_run: Vec<f64> = (0..k)
        .map(|s| {
            let run: Vec<&&Rollout> = rs.iter().filter(|r| r.sample == s).collect();
            run.iter().filter(|r| r.resolved).count() as f64 / run.len().max(1) as f64
        })
        .collect();
    let run_mean = mean(per_run.iter().copied());
    let per_run_std = if per_run.len() > 1 {
        (per_run.iter().map(|x| (x - run_mean).powi(2)).sum::<f64>() / (per_run.len() - 1) as f64)
            .sqrt()
    } else {
        0.0
    };
    let mut per_task: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for r in &rs {
        let e = per_task.entry(r.instance_id.as_str()).or_default();
        e.0 += 1;
        e.1 += usize::from(r.resolved);
    }
    let mut solved_histogram = vec![0; k + 1];
    for (n, c) in per_task.values() {
        if *n == k {
            solved_histogram[*c] += 1;
        }
    }
    let mut by_project: BTreeMap<String, Vec<&Rollout>> = BTreeMap::new();
    let mut by_operator: BTreeMap<String, Vec<&Rollout>> = BTreeMap::new();
    let mut by_exit = BTreeMap::new();
    for r in &rs {
        by_project.entry(r.project.clone()).or_default().push(r);
        let ops: Vec<&str> = by_id[r.instance_id.as_str()]
            .bugs
            .iter()
            .map(|b| b.operator.as_str())
            .collect();
        by_operator.entry(ops.join("+")).or_default().push(r);
        let exit = r.exit.split('(').next().unwrap_or("").to_string();
        *by_exit.entry(exit).or_insert(0) += 1;
    }
    Report {
        model: model.to_string(),
        tasks: per_task.len(),
        k,
        rollouts: rs.len(),
        resolve_rate: resolved as f64 / rs.len().max(1) as f64,
        per_run,
        per_run_std,
        pass_at_k: per_task.values().filter(|(_, c)| *c > 0).count() as f64
            / per_task.len().max(1) as f64,
        pass_at_1: mean(per_task.values().map(|(n, c)| *c as f64 / *n as f64)),
        mean_steps: mean(rs.iter().map(|r| r.steps as f64)),
        mean_generated_tokens: mean(rs.iter().map(|r| r.generated_tokens as f64)),
        mean_agent_s: mean(rs.iter().map(|r| r.agent_s)),
        mean_test_s: mean(rs.iter().map(|r| r.test_s)),
        grade_errors: rs.iter().filter(|r| r.grade_error.is_some()).count(),
        reverted_edits: rs.iter().filter(|r| !r.reverted_files.is_empty()).count(),
        by_project: by_project.into_iter().map(|(n, v)| group(n, &v)).collect(),
        by_operator: by_operator.into_iter().map(|(n, v)| group(n, &v)).collect(),
        by_exit,
        solved_histogram,
    }
}

impl Report {
    pub fn markdown(&self) -> String {
        let pct = |x: f64| format!("{:.1}%", 100.0 * x);
        let mut s = format!(
            "# Evaluation: {}\n\n{} tasks × k = {} ({} rollouts)\n\n\
             | metric | value |\n|---|---|\n\
             | resolve rate (Avg@{}) | {} (runs: {}; std {}) |\n\
             | pass@1 (mean p̂) | {} |\n| pass@{} | {} |\n\
             | mean steps | {:.1} |\n| mean generated tokens | {:.0} |\n\
             | mean agent time | {:.1} s |\n| mean grading time | {:.1} s |\n\
             | rollouts the suite could not grade | {} |\n\
             | rollouts with test/config edits reverted | {} |\n",
            self.model,
            self.tasks,
            self.k,
            self.rollouts,
            self.k,
            pct(self.resolve_rate),
            self.per_run
                .iter()
                .map(|x| pct(*x))
                .collect::<Vec<_>>()
                .join(", "),
            pct(self.per_run_std),
            pct(self.pass_at_1),
            self.k,
            pct(self.pass_at_k),
            self.mean_steps,
            self.mean_generated_tokens,
            self.mean_agent_s,
            self.mean_test_s,
            self.grade_errors,
            self.reverted_edits,
        );
        for (title, groups) in [
            ("project", &self.by_project),
            ("bug kind", &self.by_operator),
        ] {
            s.push_str(&format!(
                "\n## By {title}\n\n| {title} | tasks | rollouts | resolved | rate |\n|---|---:|---:|---:|---:|\n"
            ));
            for g in groups {
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} |\n",
                    g.name,
                    g.tasks,
                    g.rollouts,
                    g.resolved,
                    pct(g.resolve_rate)
                ));
            }
        }
        s.push_str("\n## How the agent stopped\n\n| exit | rollouts |\n|---|---:|\n");
        for (e, n) in &self.by_exit {
            s.push_str(&format!("| {e} | {n} |\n"));
        }
        s.push_str(&format!(
            "\n## Tasks by rollouts resolved (of {})\n\n| resolved | tasks |\n|---:|---:|\n",
            self.k
        ));
        for (c, n) in self.solved_histogram.iter().enumerate() {
            s.push_str(&format!("| {c} | {n} |\n"));
        }
        s
    }
}

/// Writes report.md, report.json, resolve-rate.svg (per project) and predictions.jsonl (the first sample of each task, as
/// SWE-bench's harness reads them).
pub fn write_outputs(files: &EvalFiles, report: &Report, rollouts: &[Rollout]) -> Result<()> {
    use crate::workspace::write_atomic;
    write_atomic(&files.report_md(), report.markdown().as_bytes())?;
    let bars: Vec<(String, f64)> = report
        .by_project
        .iter()
        .map(|g| (g.name.clone(), g.resolve_rate))
        .chain([("all".to_string(), report.resolve_rate)])
        .collect();
    crate::plot::bar_chart(
        &files.plot(),
        &format!("{}: resolve rate (Avg@{})", report.model, report.k),
        "resolve rate",
        &bars,
        1.0,
    )?;
    write_atomic(
        &files.report_json(),
        serde_json::to_string_pretty(report)?.as_bytes(),
    )?;
    let mut preds = String::new();
    for r in rollouts.iter().filter(|r| r.sample == 0) {
        preds.push_str(&serde_json::to_string(&serde_json::json!({
            "instance_id": r.instance_id,
            "model_name_or_path": report.model,
            "model_patch": r.model_patch,
        }))?);
        preds.push('\n');
    }
    write_atomic(&files.predictions(), preds.as_bytes())
}

pub fn default_dir(root: &Path, name: &str) -> PathBuf {
    root.join("runs").join(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Split;

    fn task(id: &str, op: &str) -> Task {
        let mut t = crate::testing::task(id, "f", 1);
        t.repo = id.split('-').next().unwrap_or(id).into();
        t.split = Split::Eval;
        t.bugs[0].operator = op.into();
        t
    }

    fn rollout(id: &str, sample: usize, resolved: bool) -> Rollout {
        Rollout {
            instance_id: id.into(),
            project: id.split('-').next().unwrap_or(id).into(),
            sample,
            seed: 0,
            hint_level: 1,
            resolved,
            exit: "Submitted".into(),
            steps: 2,
            prefilled_tokens: 0,
            generated_tokens: 10,
            agent_s: 1.0,
            test_s: 1.0,
            fail_to_pass_fixed: usize::from(resolved),
            fail_to_pass: 1,
            pass_to_pass_broken: 0,
            graded_files: vec![],
            reverted_files: vec![],
            grade_error: None,
            model_patch: String::new(),
        }
    }

    #[test]
    fn pending_is_sample_major_and_skips_done() {
        let tasks = vec![task("a-1", "x"), task("b-1", "y")];
        let done = vec![rollout("a-1", 0, true)];
        let p: Vec<(&str, usize)> = pending(&tasks, 2, &done)
            .into_iter()
            .map(|(t, s)| (t.instance_id.as_str(), s))
            .collect();
        assert_eq!(p, vec![("b-1", 0), ("a-1", 1), ("b-1", 1)]);
    }

    #[test]
    fn report_counts_runs_pass_at_k_and_groups() {
        let tasks = vec![task("a-1", "x"), task("b-1", "y"), task("c-1", "x")];
        // a: 2 of 2, b: 1 of 2, c: 0 of 2.
        let rs = vec![
            rollout("a-1", 0, true),
            rollout("a-1", 1, true),
            rollout("b-1", 0, false),
            rollout("b-1", 1, true),
            rollout("c-1", 0, false),
            rollout("c-1", 1, false),
            // Not one of the tasks: ignored.
            rollout("z-1", 0, true),
        ];
        let r = report("m", &tasks, 2, &rs);
        assert_eq!(r.rollouts, 6);
        assert!((r.resolve_rate - 0.5).abs() < 1e-12);
        assert_eq!(r.per_run.len(), 2);
        assert!((r.per_run[0] - 1.0 / 3.0).abs() < 1e-12);
        assert!((r.per_run[1] - 2.0 / 3.0).abs() < 1e-12);
        assert!((r.pass_at_k - 2.0 / 3.0).abs() < 1e-12);
        assert!((r.pass_at_1 - 0.5).abs() < 1e-12);
        assert_eq!(r.solved_histogram, vec![1, 1, 1]);
        let x = r.by_operator.iter().find(|g| g.name == "x").unwrap();
        assert_eq!((x.tasks, x.rollouts, x.resolved), (2, 4, 2));
        assert!(r.markdown().contains("| a | 1 | 2 | 2 | 100.0% |"));
    }
}
