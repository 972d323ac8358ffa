//! Calibration at the learnability frontier: k rollouts of the current model estimate each
//! task's solve rate p̂. A task is in band when 0 < p̂ < 1. Out-of-band tasks are refined and
//! measured again rather than dropped: p̂ = 0 gets a more revealing statement (the next hint
//! level), p̂ = 1 a less revealing one, and at hint level 0 a second bug from the same project
//! (validated together by the suite). A task that runs out of refinements stays in the pool
//! with weight 0, to be measured again once the model has moved.
//!
//! Everything is logged as it happens (rollouts.jsonl, variants.jsonl), so a killed
//! calibration resumes where it stopped; the pool and its summary are rewritten at the end.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;
use lilypad_agent::LanguageModel;
use lilypad_cli::AgentArgs;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::envs::Environment;
use crate::rollout::{Rollout, RolloutPaths, rollout, rollout_seed};
use crate::synth::{PlantedFile, Validator};
use crate::task::{self, MAX_HINT_LEVEL, Task};
use crate::workspace::Workspace;

pub struct CalibrationFiles {
    pub dir: PathBuf,
}

impl CalibrationFiles {
    pub fn rollouts(&self) -> PathBuf {
        self.dir.join("rollouts.jsonl")
    }
    /// Refined tasks, written when first made, so a resumed run measures the same ones.
    pub fn variants(&self) -> PathBuf {
        self.dir.join("variants.jsonl")
    }
    pub fn pool(&self) -> PathBuf {
        self.dir.join("pool.jsonl")
    }
    pub fn iteration_pool(&self, iteration: usize) -> PathBuf {
        self.dir.join(format!("pool-iter{iteration}.jsonl"))
    }
    pub fn summary(&self) -> PathBuf {
        self.dir.join("summary.md")
    }
    /// The p̂ histogram of the first measurement and after refinement.
    pub fn plot(&self, which: &str) -> PathBuf {
        self.dir.join(format!("p-hat-{which}.svg"))
    }
    pub fn trajectory(&self, instance_id: &str, sample: usize) -> PathBuf {
        self.dir
            .join("trajectories")
            .join(format!("{instance_id}.{sample}.json"))
    }
}

/// What refining an out-of-band task does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refinement {
    /// Measure the same bug with its statement at this hint level.
    Hint(u8),
    /// Plant a second bug beside this one (p̂ = 1 at hint level 0).
    Combine,
}

/// The next refinement of a task measured at `p_hat`, or None when it is in band or has none
/// left in that direction.
pub fn refinement(task: &Task, p_hat: f64) -> Option<Refinement> {
    if p_hat <= 0.0 {
        (task.hint_level < MAX_HINT_LEVEL).then(|| Refinement::Hint(task.hint_level + 1))
    } else if p_hat >= 1.0 {
        if task.hint_level > 0 {
            Some(Refinement::Hint(task.hint_level - 1))
        } else if task.bugs.len() == 1 {
            Some(Refinement::Combine)
        } else {
            None
        }
    } else {
        None
    }
}

/// A task's id without its hint-level suffix (`@h2`).
pub fn base_id(id: &str) -> &str {
    id.split('@').next().unwrap_or(id)
}

/// The same bug, its statement at `level`.
pub fn with_hint_level(task: &Task, level: u8) -> Task {
    let mut t = task.clone();
    t.instance_id = format!("{}@h{level}", base_id(&task.instance_id));
    t.set_hint_level(level);
    t
}

/// Partners for combining `task` with a second bug: tasks of the same project whose bug is
/// in another function, in a stable order that differs from task to task.
pub fn combine_partners<'a>(task: &Task, candidates: &'a [Task]) -> Vec<&'a Task> {
    let mut out: Vec<&Task> = candidates
        .iter()
        .filter(|c| {
            c.repo == task.repo
                && c.bugs.len() == 1
                && c.instance_id != task.instance_id
                && !task
                    .bugs
                    .iter()
                    .any(|b| b.file == c.bugs[0].file && b.function == c.bugs[0].function)
        })
        .collect();
    out.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    let mut h = 0u64;
    for b in task.instance_id.bytes() {
        h = h.wrapping_mul(31).wrapping_add(u64::from(b));
    }
    let mut rng = StdRng::seed_from_u64(h);
    out.shuffle(&mut rng);
    out
}

/// One task's calibration: each measurement on the way, and where it ended.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Calibrated {
    /// The task as first given.
    pub origin: String,
    /// (instance_id, hint level, p̂) of each measured variant, in order.
    pub measurements: Vec<(String, u8, f64)>,
    pub status: Status,
    /// p̂ of the final variant.
    pub p_hat: f64,
    /// p̂(1 − p̂): the task's sampling weight in a pool.
    pub weight: f64,
    /// The final variant, the one a pool samples.
    pub task: Task,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    InBand,
    /// p̂ = 0 with every hint given.
    TooHard,
    /// p̂ = 1 with no hint and two bugs (or no second bug to add).
    TooEasy,
    /// Stopped at the refinement limit out of band.
    Unsettled,
}

/// p̂ of `id` from the rollouts of its first k samples, or None when fewer than k are logged.
pub fn p_hat(rollouts: &[Rollout], id: &str, k: usize) -> Option<f64> {
    let mine: Vec<&Rollout> = rollouts
        .iter()
        .filter(|r| r.instance_id == id && r.sample < k)
        .collect();
    let mut seen = vec![false; k];
    let mut resolved = 0;
    for r in mine {
        if !seen[r.sample] {
            seen[r.sample] = true;
            resolved += usize::from(r.resolved);
        }
    }
    seen.iter().all(|s| *s).then(|| resolved as f64 / k as f64)
}

/// A pool of `size` in-band tasks sampled without replacement with probability proportional
/// to p̂(1 − p̂) (Efraimidis–Spirakis keys), the same for the same `seed`.
pub fn sample_pool(calibrated: &[Calibrated], size: usize, seed: u64) -> Vec<&Calibrated> {
    use rand::Rng;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut keyed: Vec<(f64, &Calibrated)> = calibrated
        .iter()
        .filter(|c| c.weight > 0.0)
        .map(|c| (rng.random::<f64>().powf(1.0 / c.weight), c))
        .collect();
    keyed.sort_by(|a, b| b.0.total_cmp(&a.0));
    keyed.into_iter().take(size).map(|(_, c)| c).collect()
}

/// Counts of p̂ in bins: 0, (0, ¼], (¼, ½], (½, ¾], (¾, 1), 1.
pub fn histogram(ps: impl Iterator<Item = f64>) -> [usize; 6] {
    let mut h = [0; 6];
    for p in ps {
        let bin = if p <= 0.0 {
            0
        } else if p >= 1.0 {
            5
        } else {
            1 + ((p * 4.0).ceil() as usize - 1).min(3)
        };
        h[bin] += 1;
    }
    h
}

pub const HISTOGRAM_BINS: [&str; 6] = ["0", "(0, ¼]", "(¼, ½]", "(½, ¾]", "(¾, 1)", "1"];

/// Draws the p̂ histograms (first measurement, after refinement).
pub fn plots(files: &CalibrationFiles, model: &str, calibrated: &[Calibrated]) -> Result<()> {
    let first = histogram(
        calibrated
            .iter()
            .filter_map(|c| c.measurements.first().map(|m| m.2)),
    );
    let last = histogram(calibrated.iter().map(|c| c.p_hat));
    let max = first.iter().chain(&last).copied().max().unwrap_or(1).max(1) as f64;
    for (which, h, title) in [
        ("first", first, "first measurement"),
        ("refined", last, "after refinement"),
    ] {
        let bars: Vec<(String, f64)> = HISTOGRAM_BINS
            .iter()
            .zip(h)
            .map(|(b, n)| (b.to_string(), n as f64))
            .collect();
        crate::plot::bar_chart(
            &files.plot(which),
            &format!("{model}: p̂, {title}"),
            "tasks",
            &bars,
            max,
        )?;
    }
    Ok(())
}

/// The summary: statuses, and the p̂ histogram of the first measurement beside the final one.
pub fn summary(model: &str, k: usize, calibrated: &[Calibrated]) -> String {
    let first = histogram(
        calibrated
            .iter()
            .filter_map(|c| c.measurements.first().map(|m| m.2)),
    );
    let last = histogram(calibrated.iter().map(|c| c.p_hat));
    let mut statuses: BTreeMap<Status, usize> = BTreeMap::new();
    let mut by_level: BTreeMap<u8, usize> = BTreeMap::new();
    for c in calibrated {
        *statuses.entry(c.status).or_default() += 1;
        *by_level.entry(c.task.hint_level).or_default() += 1;
    }
    let measured: usize = calibrated.iter().map(|c| c.measurements.len()).sum();
    let mut s = format!(
        "# Calibration: {model}\n\n{} tasks, k = {k}, {measured} measurements ({} rollouts)\n\n\
         | p̂ | first measurement | after refinement |\n|---|---:|---:|\n",
        calibrated.len(),
        measured * k
    );
    for (i, bin) in HISTOGRAM_BINS.iter().enumerate() {
        s.push_str(&format!("| {bin} | {} | {} |\n", first[i], last[i]));
    }
    s.push_str("\n| status | tasks |\n|---|---:|\n");
    for (st, n) in &statuses {
        s.push_str(&format!("| {st:?} | {n} |\n"));
    }
    s.push_str("\n| final hint level | tasks |\n|---:|---:|\n");
    for (l, n) in &by_level {
        s.push_str(&format!("| {l} | {n} |\n"));
    }
    s
}

/// How calibration runs.
pub struct CalibrateOptions {
    /// Rollouts per measurement.
    pub k: usize,
    /// Refinements of one task at most before it is left unsettled.
    pub max_rounds: usize,
    /// Combined-bug candidates tried for a task that is too easy.
    pub max_partners: usize,
}

/// What calibration reports as it goes.
pub enum Event<'a> {
    RolloutStarted(&'a Task, usize),
    RolloutFinished(&'a Rollout),
    RolloutFailed(&'a Task, usize, &'a anyhow::Error),
    Measured(&'a Task, f64),
    Refined(&'a Task, &'a str),
    Finished(&'a Calibrated),
}

/// Calibrates `tasks` (each a task as synthesized), combining too-easy ones with partners
/// from `all_tasks`. Rollouts already logged are not run again.
#[allow(clippy::too_many_arguments)]
pub fn calibrate<M: LanguageModel>(
    ws: &Workspace,
    envs: &[Environment],
    tasks: &[Task],
    all_tasks: &[Task],
    model: &mut M,
    agent: &AgentArgs,
    opts: &CalibrateOptions,
    files: &CalibrationFiles,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<Vec<Calibrated>> {
    std::fs::create_dir_all(files.dir.join("trajectories"))?;
    let mut rollouts: Vec<Rollout> = task::read_lines(&files.rollouts())?;
    let mut variants: Vec<Task> = task::read_lines(&files.variants())?;
    let mut out = Vec::new();
    'tasks: for origin in tasks {
        let Some(env) = envs
            .iter()
            .find(|e| e.project.name == origin.repo && e.project.version == origin.version)
        else {
            continue;
        };
        let mut current = origin.clone();
        let mut measurements = Vec::new();
        let status = loop {
            for sample in 0..opts.k {
                let done = rollouts
                    .iter()
                    .any(|r| r.instance_id == current.instance_id && r.sample == sample);
                if done {
                    continue;
                }
                on_event(Event::RolloutStarted(&current, sample));
                let seed = rollout_seed(agent.seed, &current.instance_id, sample);
                let paths = RolloutPaths {
                    trajectory: files.trajectory(&current.instance_id, sample),
                };
                let config = agent.config(seed);
                match rollout(
                    ws,
                    env,
                    &current,
                    sample,
                    model,
                    &config,
                    &paths,
                    &mut |_| {},
                ) {
                    Ok((r, _)) => {
                        task::append_line(&files.rollouts(), &r)?;
                        on_event(Event::RolloutFinished(&r));
                        rollouts.push(r);
                    }
                    Err(e) => {
                        on_event(Event::RolloutFailed(&current, sample, &e));
                        continue 'tasks;
                    }
                }
            }
            let p = p_hat(&rollouts, &current.instance_id, opts.k).unwrap_or(0.0);
            on_event(Event::Measured(&current, p));
            measurements.push((current.instance_id.clone(), current.hint_level, p));
            if p > 0.0 && p < 1.0 {
                break Status::InBand;
            }
            if measurements.len() > opts.max_rounds {
                break Status::Unsettled;
            }
            let next = match refinement(&current, p) {
                None if p <= 0.0 => break Status::TooHard,
                None => break Status::TooEasy,
                Some(Refinement::Hint(level)) => {
                    on_event(Event::Refined(
                        &current,
                        if p <= 0.0 {
                            "more hints"
                        } else {
                            "fewer hints"
                        },
                    ));
                    with_hint_level(&current, level)
                }
                Some(Refinement::Combine) => {
                    on_event(Event::Refined(&current, "a second bug"));
                    let prefix = format!("{}+", base_id(&current.instance_id));
                    match variants.iter().find(|v| v.instance_id.starts_with(&prefix)) {
                        Some(v) => v.clone(),
                        None => match combine(ws, env, &current, all_tasks, opts.max_partners)? {
                            Some(v) => {
                                task::append_line(&files.variants(), &v)?;
                                variants.push(v.clone());
                                v
                            }
                            None => break Status::TooEasy,
                        },
                    }
                }
            };
            current = next;
        };
        let p = measurements.last().map_or(0.0, |m| m.2);
        let c = Calibrated {
            origin: origin.instance_id.clone(),
            measurements,
            status,
            p_hat: p,
            weight: p * (1.0 - p),
            task: current,
        };
        on_event(Event::Finished(&c));
        out.push(c);
    }
    Ok(out)
}

/// `task` with a second bug from one of its partners, validated together by the suite.
fn combine(
    ws: &Workspace,
    env: &Environment,
    task: &Task,
    all_tasks: &[Task],
    max_partners: usize,
) -> Result<Option<Task>> {
    let validator = Validator::new(ws, env)?;
    let src = ws.project_src(&env.project);
    for partner in combine_partners(task, all_tasks)
        .into_iter()
        .take(max_partners)
    {
        let mut snapshot = lilypad_agent::Snapshot::new();
        for b in task.bugs.iter().chain(&partner.bugs) {
            let path = lilypad_agent::RepoPath::new(&b.file)?;
            if let std::collections::btree_map::Entry::Vacant(slot) = snapshot.entry(path) {
                slot.insert(std::fs::read(src.join(&b.file))?);
            }
        }
        let clean = snapshot.clone();
        let both = lilypad_agent::patch::apply(&mut snapshot, &task.bug_patch)
            .and_then(|()| lilypad_agent::patch::apply(&mut snapshot, &partner.bug_patch));
        if both.is_err() {
            continue;
        }
        let files: Vec<PlantedFile> = clean
            .iter()
            .filter(|(p, text)| snapshot.get(*p) != Some(*text))
            .map(|(p, text)| PlantedFile {
                file: p.as_str().to_string(),
                original: String::from_utf8_lossy(text).into_owned(),
                buggy: String::from_utf8_lossy(&snapshot[p]).into_owned(),
            })
            .collect();
        let base = base_id(&task.instance_id);
        let key = partner.instance_id.rsplit('.').next().unwrap_or("");
        let id = format!("{base}+{}.{key}", partner.bugs[0].operator);
        let bugs = task.bugs.iter().chain(&partner.bugs).cloned().collect();
        let v = validator.validate(&files, bugs, id, 0)?;
        if v.task.is_some() {
            return Ok(v.task);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::task;

    #[test]
    fn refinement_moves_toward_the_band() {
        assert_eq!(
            refinement(&task("a", "f", 1), 0.0),
            Some(Refinement::Hint(2))
        );
        assert_eq!(refinement(&task("a", "f", 3), 0.0), None);
        assert_eq!(
            refinement(&task("a", "f", 2), 1.0),
            Some(Refinement::Hint(1))
        );
        assert_eq!(
            refinement(&task("a", "f", 0), 1.0),
            Some(Refinement::Combine)
        );
        assert_eq!(refinement(&task("a", "f", 1), 0.5), None);
        let v = with_hint_level(&with_hint_level(&task("a", "f", 1), 2), 3);
        assert_eq!(v.instance_id, "a@h3");
        assert!(v.problem_statement.contains("near line 3"));
    }

    #[test]
    fn partners_are_other_functions_of_the_project() {
        let all = vec![
            task("a", "f", 0),
            task("b", "f", 0),
            task("c", "g", 0),
            task("d", "h", 0),
        ];
        let ids: Vec<&str> = combine_partners(&all[0], &all)
            .iter()
            .map(|t| t.instance_id.as_str())
            .collect();
        assert_eq!(ids.len(), 2);
        assert!(ids.contains(&"c") && ids.contains(&"d"));
    }

    #[test]
    fn p_hat_needs_all_k_samples() {
        let r = |s: usize, ok: bool| Rollout {
            instance_id: "a".into(),
            project: "p".into(),
            sample: s,
            seed: 0,
            hint_level: 0,
            resolved: ok,
            exit: "Submitted".into(),
            steps: 1,
            prefilled_tokens: 0,
            generated_tokens: 0,
            agent_s: 0.0,
            test_s: 0.0,
            fail_to_pass_fixed: 0,
            fail_to_pass: 1,
            pass_to_pass_broken: 0,
            graded_files: vec![],
            reverted_files: vec![],
            grade_error: None,
            model_patch: String::new(),
        };
        let rs = vec![r(0, true), r(2, false)];
        assert_eq!(p_hat(&rs, "a", 3), None);
        let rs = vec![r(0, true), r(1, false), r(2, false), r(3, true)];
        assert_eq!(p_hat(&rs, "a", 3), Some(1.0 / 3.0));
    }

    #[test]
    fn pools_follow_the_weights() {
        let mk = |id: &str, p: f64| Calibrated {
            origin: id.into(),
            measurements: vec![],
            status: Status::InBand,
            p_hat: p,
            weight: p * (1.0 - p),
            task: task(id, "f", 0),
        };
        let cs = vec![mk("half", 0.5), mk("rare", 0.05), mk("never", 0.0)];
        let mut half = 0;
        for seed in 0..2000 {
            let pool = sample_pool(&cs, 1, seed);
            assert_eq!(pool.len(), 1);
            assert_ne!(pool[0].origin, "never");
            half += usize::from(pool[0].origin == "half");
        }
        // P(half first) = 0.25 / (0.25 + 0.0475) ≈ 0.84.
        assert!((1600..1760).contains(&half), "{half}");
        assert_eq!(
            histogram([0.0, 0.1, 0.5, 0.6, 0.9, 1.0].into_iter()),
            [1, 1, 1, 1, 1, 1]
        );
    }
}
