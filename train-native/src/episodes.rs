//! The task families `train-native run` samples episodes from. An episode is what the trainer
//! needs, the token sequence the policy saw and wrote with its reward ([`Episode`]), plus a
//! JSON record of what happened, for `episodes.jsonl`.
//!
//! - `reply`: single-turn questions with one right answer (a JSONL of `{"prompt", "answer"}`;
//!   reward 1 when the reply's last number is the answer).
//! - `agent`: synthesized bug-fix tasks (a JSONL of tasks from `synth`, or a calibrated pool
//!   `pool-iterN.jsonl`). Each episode is a multi-turn agent run on a fresh buggy copy of the
//!   task's project, every command sandboxed, graded by the project's tests
//!   ([`crate::rollout::rollout`]). The transcript holds every turn: the policy's replies are
//!   trained, the prompt, the template and the tools' output are context.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use lilypad_agent::{AgentConfig, Message, Request, Sampling};
use lilypad_chat::ChatSession;
use serde::Deserialize;

use crate::calibrate;
use crate::envs::Environment;
use crate::manifest::Manifest;
use crate::rollout::{Rollout, RolloutPaths, rollout};
use crate::task::{Task, read_lines, read_tasks};
use crate::train::Episode;
use crate::workspace::Workspace;

/// How episodes are sampled: the run's `[sampling]` table (`max_tokens` is per reply, and
/// per agent step).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingConfig {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: u32,
    pub max_tokens: usize,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_tokens: 64,
        }
    }
}

impl SamplingConfig {
    fn with_seed(&self, seed: u64) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            seed,
            ..Sampling::default()
        }
    }
}

/// The run's `[tasks]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TasksConfig {
    /// Questions with one right answer: a JSONL of `{"prompt", "answer"}`.
    Reply { file: PathBuf },
    /// Bug-fix tasks (a JSONL of tasks), each episode an agent run graded by the tests.
    Agent {
        file: PathBuf,
        /// Model replies per episode at most.
        #[serde(default = "default_max_steps")]
        max_steps: usize,
        #[serde(default)]
        reward: AgentReward,
        /// Let the model think before it answers, where its template has a thinking phase.
        #[serde(default)]
        thinking: bool,
        /// The projects' manifest (default: the built-in projects.toml).
        #[serde(default)]
        manifest: Option<PathBuf>,
        /// Online calibration: a task whose whole group failed is drawn next time with its
        /// next hint level, one whose whole group resolved it with the level before (tasks
        /// out of the band are refined, not dropped).
        #[serde(default = "default_refine")]
        refine: bool,
    },
}

fn default_refine() -> bool {
    true
}

fn default_max_steps() -> usize {
    8
}

/// An agent episode's reward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentReward {
    /// 1 when every FAIL_TO_PASS and PASS_TO_PASS test passes, else 0.
    #[default]
    Resolved,
    /// The fraction of FAIL_TO_PASS tests fixed, 0 when a PASS_TO_PASS test broke or the
    /// suite could not grade the edits (1 exactly when resolved).
    Partial,
}

impl AgentReward {
    pub fn of(self, r: &Rollout) -> f64 {
        if r.resolved {
            return 1.0;
        }
        match self {
            Self::Resolved => 0.0,
            Self::Partial if r.pass_to_pass_broken > 0 || r.grade_error.is_some() => 0.0,
            Self::Partial => r.fail_to_pass_fixed as f64 / r.fail_to_pass.max(1) as f64,
        }
    }
}

impl TasksConfig {
    /// Makes the task file's path relative to `base` (the config's folder).
    pub fn resolve_paths(&mut self, base: &Path) {
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        match self {
            Self::Reply { file } => resolve(file),
            Self::Agent { file, manifest, .. } => {
                resolve(file);
                if let Some(m) = manifest {
                    resolve(m);
                }
            }
        }
    }

    pub fn file(&self) -> &Path {
        match self {
            Self::Reply { file } | Self::Agent { file, .. } => file,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct ReplyTask {
    pub prompt: String,
    pub answer: String,
}

/// Loaded tasks of one family.
pub enum Family {
    Reply(Vec<ReplyTask>),
    Agent(AgentFamily),
}

pub struct AgentFamily {
    ws: Workspace,
    tasks: Vec<Task>,
    /// Each task's environment (index into `envs`).
    env_of: Vec<usize>,
    envs: Vec<Environment>,
    max_steps: usize,
    reward: AgentReward,
    thinking: bool,
    refine: bool,
}

impl Family {
    /// The tasks of `file`, of the kind and with the settings `config` gives. Agent tasks need
    /// their projects' environments built in `ws` (`train-native envs build`).
    pub fn load(ws: &Workspace, config: &TasksConfig, file: &Path) -> Result<Self> {
        let family = match config {
            TasksConfig::Reply { .. } => Self::Reply(read_lines(file)?),
            TasksConfig::Agent {
                max_steps,
                reward,
                thinking,
                manifest,
                refine,
                ..
            } => {
                let tasks = read_tasks(file)?;
                let manifest = Manifest::load(manifest.as_deref())?;
                let mut envs: Vec<Environment> = Vec::new();
                let mut env_of = Vec::with_capacity(tasks.len());
                for t in &tasks {
                    let known = envs
                        .iter()
                        .position(|e| e.project.name == t.repo && e.project.version == t.version);
                    let i = match known {
                        Some(i) => i,
                        None => {
                            let project = manifest
                                .projects
                                .iter()
                                .find(|p| p.name == t.repo && p.version == t.version)
                                .with_context(|| {
                                    format!(
                                        "{}: {} {} is not in the manifest",
                                        t.instance_id, t.repo, t.version
                                    )
                                })?;
                            let env = ws.load_env(project)?;
                            if !env.usable {
                                bail!("{}: {} is unusable: {}", t.instance_id, t.repo, env.reason);
                            }
                            envs.push(env);
                            envs.len() - 1
                        }
                    };
                    env_of.push(i);
                }
                Self::Agent(AgentFamily {
                    ws: ws.clone(),
                    tasks,
                    env_of,
                    envs,
                    max_steps: *max_steps,
                    reward: *reward,
                    thinking: *thinking,
                    refine: *refine,
                })
            }
        };
        if family.len() == 0 {
            bail!("{} holds no tasks", file.display());
        }
        Ok(family)
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Reply(tasks) => tasks.len(),
            Self::Agent(a) => a.tasks.len(),
        }
    }

    /// Sequence slots a session needs for groups of `n` episodes: a reply group is decoded
    /// together, agent episodes run one after another.
    pub fn sequences(&self, n: usize) -> u32 {
        match self {
            Self::Reply(_) => n.max(1) as u32,
            Self::Agent(_) => 1,
        }
    }

    /// A group of `n` episodes of task `index`, episode i with seed `seed + i`. A reply group
    /// is decoded together (its prompt evaluated once and forked; the session needs `n`
    /// sequence slots); agent episodes run one after another, each writing its trajectory to
    /// `trajectory(i)` as it goes. Returns the episodes with their records, and the error
    /// that ended the group early (the environment's, not the policy's), if one did.
    pub fn group(
        &self,
        session: &mut ChatSession,
        index: usize,
        sampling: &SamplingConfig,
        seed: u64,
        n: usize,
        trajectory: &dyn Fn(usize) -> PathBuf,
    ) -> (Vec<(Episode, serde_json::Value)>, Option<anyhow::Error>) {
        match self {
            Self::Reply(tasks) => match reply_group(session, &tasks[index], sampling, seed, n) {
                Ok(group) => (group, None),
                Err(e) => (Vec::new(), Some(e)),
            },
            Self::Agent(a) => {
                let mut group = Vec::with_capacity(n);
                for i in 0..n {
                    let seed = seed.wrapping_add(i as u64);
                    match a.episode(session, index, sampling, seed, &trajectory(i)) {
                        Ok(episode) => group.push(episode),
                        Err(e) => return (group, Some(e)),
                    }
                }
                (group, None)
            }
        }
    }
}

impl Family {
    /// Each task's hint level (agent tasks; empty for reply tasks): what online refinement
    /// has changed, for a run's checkpoint.
    pub fn hint_levels(&self) -> Vec<u8> {
        match self {
            Self::Reply(_) => Vec::new(),
            Self::Agent(a) => a.tasks.iter().map(|t| t.hint_level).collect(),
        }
    }

    /// Puts back hint levels from [`Family::hint_levels`] (a resumed run's).
    pub fn set_hint_levels(&mut self, levels: &[u8]) -> Result<()> {
        match self {
            Self::Agent(a) if levels.len() == a.tasks.len() => {
                for (task, &level) in a.tasks.iter_mut().zip(levels) {
                    if task.hint_level != level {
                        *task = calibrate::with_hint_level(task, level);
                    }
                }
                Ok(())
            }
            _ if levels.is_empty() => Ok(()),
            _ => bail!(
                "the checkpoint holds hint levels for {} tasks, the task file has {}",
                levels.len(),
                self.len()
            ),
        }
    }

    /// Online calibration after a group of task `index` whose rewards were all `reward`:
    /// all failed (0) moves the task to its next hint level, all resolved (1) to the one
    /// before. Returns the task's id before and after, or None when it stays as it is (reply
    /// tasks, refinement off, a partial reward, no level left that way, or a second bug
    /// needed, which only `calibrate` can plant and validate).
    pub fn refine(&mut self, index: usize, reward: f64) -> Option<(String, String)> {
        let Self::Agent(a) = self else {
            return None;
        };
        let task = a.tasks.get_mut(index)?;
        if !a.refine || (reward != 0.0 && reward != 1.0) {
            return None;
        }
        let Some(calibrate::Refinement::Hint(level)) = calibrate::refinement(task, reward) else {
            return None;
        };
        let from = task.instance_id.clone();
        *task = calibrate::with_hint_level(task, level);
        Some((from, task.instance_id.clone()))
    }
}

impl AgentFamily {
    fn episode(
        &self,
        session: &mut ChatSession,
        index: usize,
        sampling: &SamplingConfig,
        seed: u64,
        trajectory: &Path,
    ) -> Result<(Episode, serde_json::Value)> {
        let task = &self.tasks[index];
        let env = &self.envs[self.env_of[index]];
        let config = AgentConfig {
            max_steps: self.max_steps,
            max_tokens_per_step: sampling.max_tokens,
            sampling: sampling.with_seed(seed),
            enable_thinking: self.thinking,
            ..AgentConfig::default()
        };
        if let Some(dir) = trajectory.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Every episode starts from an empty conversation and an empty transcript.
        session.reset();
        let _ = session.take_transcript();
        let paths = RolloutPaths {
            trajectory: trajectory.to_path_buf(),
        };
        let (r, traj) = rollout(
            &self.ws,
            env,
            task,
            0,
            session,
            &config,
            &paths,
            &mut |_| {},
        )?;
        let transcript = session.take_transcript();
        let trained = transcript.generated.iter().filter(|&&g| g).count();
        let reward = self.reward.of(&r);
        let record = serde_json::json!({
            "seed": seed, "instance_id": task.instance_id, "reward": reward,
            "resolved": r.resolved, "exit": r.exit, "steps": r.steps,
            "fail_to_pass_fixed": r.fail_to_pass_fixed, "fail_to_pass": r.fail_to_pass,
            "pass_to_pass_broken": r.pass_to_pass_broken, "grade_error": r.grade_error,
            "agent_s": r.agent_s, "test_s": r.test_s, "prefilled_tokens": r.prefilled_tokens,
            "transcript_tokens": transcript.tokens.len(),
            // The policy's tokens the transcript holds, of those it generated: fewer when a
            // turn re-rendered the conversation (those earlier replies are not trained).
            "trained_tokens": trained, "generated_tokens": traj.generated_tokens(),
            "trajectory": trajectory,
        });
        let episode = Episode {
            transcript,
            reward,
            logp_old: None,
        };
        Ok((episode, record))
    }
}

/// The reward of a reply: 1 when the last number in it is the answer ("45 + 9 = 54" and
/// "The answer is 54." both count; "54, no, 55" does not).
pub fn reply_reward(reply: &str, answer: &str) -> f64 {
    let last = reply
        .split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .map(|w| w.trim_start_matches('-').trim_end_matches('-'))
        .rfind(|w| !w.is_empty());
    f64::from(last == Some(answer.trim()))
}

/// `n` replies to one question decoded together, reply i with seed `seed + i`.
fn reply_group(
    session: &mut ChatSession,
    task: &ReplyTask,
    sampling: &SamplingConfig,
    seed: u64,
    n: usize,
) -> Result<Vec<(Episode, serde_json::Value)>> {
    let messages = [Message::user(&task.prompt)];
    let request = Request {
        messages: &messages,
        tools: &[],
        sampling: sampling.with_seed(seed),
        max_tokens: sampling.max_tokens,
        enable_thinking: false,
    };
    let samples = pollster::block_on(session.complete_group(&request, n))?;
    Ok(samples
        .into_iter()
        .enumerate()
        .map(|(i, (completion, transcript))| {
            let reward = reply_reward(&completion.text, &task.answer);
            let record = serde_json::json!({
                "seed": seed.wrapping_add(i as u64), "prompt": task.prompt,
                "reply": completion.text, "reward": reward,
            });
            let episode = Episode {
                transcript,
                reward,
                logp_old: None,
            };
            (episode, record)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_judged_by_their_last_number() {
        assert_eq!(reply_reward("Let me think.\n12", "12"), 1.0);
        assert_eq!(reply_reward("5 + 7 = 12.\n\n", "12"), 1.0);
        assert_eq!(reply_reward("The answer is 12", "12"), 1.0);
        assert_eq!(reply_reward("12\nno, 13", "12"), 0.0);
        assert_eq!(reply_reward("5 + 7 = ", "12"), 0.0);
        assert_eq!(reply_reward("120", "12"), 0.0);
        assert_eq!(reply_reward("", "12"), 0.0);
    }

    #[test]
    fn partial_credit_counts_fixed_tests_unless_something_broke() {
        let line = serde_json::json!({
            "instance_id": "t", "project": "p", "sample": 0, "seed": 0, "hint_level": 1,
            "resolved": false, "exit": "Submitted", "steps": 1, "prefilled_tokens": 0,
            "generated_tokens": 0, "agent_s": 0.0, "test_s": 0.0, "fail_to_pass_fixed": 1,
            "fail_to_pass": 4, "pass_to_pass_broken": 0, "graded_files": [],
            "reverted_files": [], "grade_error": null, "model_patch": "",
        });
        let mut r: Rollout = serde_json::from_value(line).unwrap();
        assert_eq!(AgentReward::Resolved.of(&r), 0.0);
        assert_eq!(AgentReward::Partial.of(&r), 0.25);
        r.pass_to_pass_broken = 1;
        assert_eq!(AgentReward::Partial.of(&r), 0.0);
        r.pass_to_pass_broken = 0;
        r.grade_error = Some("the suite ran past 30 s".into());
        assert_eq!(AgentReward::Partial.of(&r), 0.0);
        r.resolved = true;
        assert_eq!(AgentReward::Resolved.of(&r), 1.0);
        assert_eq!(AgentReward::Partial.of(&r), 1.0);
    }

    /// Online calibration: a group that all failed moves its task a hint level up, one that
    /// all resolved it a level down; partial rewards, a task needing a second bug and
    /// refinement turned off leave it; a checkpoint's levels put the pool back as it was.
    #[test]
    fn online_calibration_refines_out_of_band_tasks_and_resumes() {
        use crate::testing::task;
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(Some(dir.path().into())).unwrap();
        let family = |refine| {
            Family::Agent(AgentFamily {
                ws: ws.clone(),
                tasks: vec![task("a", "f", 0), task("b", "g", 2), task("c", "h", 0)],
                env_of: vec![0, 0, 0],
                envs: Vec::new(),
                max_steps: 1,
                reward: AgentReward::Partial,
                thinking: false,
                refine,
            })
        };
        let mut pool = family(true);
        assert_eq!(pool.refine(0, 0.0), Some(("a".into(), "a@h1".into())));
        assert_eq!(pool.refine(1, 1.0), Some(("b".into(), "b@h1".into())));
        assert_eq!(pool.refine(0, 0.5), None, "partial credit: in band");
        assert_eq!(
            pool.refine(2, 1.0),
            None,
            "hint level 0, one bug: needs a second"
        );
        assert_eq!(pool.hint_levels(), [1, 1, 0]);
        assert_eq!(family(false).refine(0, 0.0), None);

        let mut resumed = family(true);
        resumed.set_hint_levels(&pool.hint_levels()).unwrap();
        let (Family::Agent(a), Family::Agent(b)) = (&pool, &resumed) else {
            unreachable!()
        };
        for (x, y) in a.tasks.iter().zip(&b.tasks) {
            assert_eq!(x.instance_id, y.instance_id);
            assert_eq!(x.problem_statement, y.problem_statement);
        }
        assert!(
            resumed.set_hint_levels(&[1, 1]).is_err(),
            "another pool's levels"
        );
        assert!(resumed.set_hint_levels(&[]).is_ok(), "nothing refined yet");
    }

    /// Agent episodes on a real environment with a real (tiny, random) policy: each is graded
    /// by the tests, its transcript holds every reply with the policy's tokens marked, and the
    /// trainer learns from it. The rewards of the update are set by hand (a random model fixes
    /// nothing): what is checked is that the episode the update favours becomes more likely.
    #[test]
    fn agent_episodes_hold_every_turn_and_train() {
        use crate::grpo::AdvantageNorm;
        use crate::testing::{built_inflection, synthesized_task, tiny_llama_session};
        use crate::train::Trainer;

        let Some((ws, env)) = built_inflection() else {
            return;
        };
        // The agent's system prompt is some 4,000 of this vocabulary's byte-level tokens.
        let Some(mut session) = tiny_llama_session(8192) else {
            return;
        };
        crate::rollout::keep_openings(&mut session);
        let (task, _, _) = synthesized_task(&ws, &env);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tasks.jsonl");
        crate::task::append_line(&file, &task).unwrap();
        let config = TasksConfig::Agent {
            file: file.clone(),
            max_steps: 2,
            reward: AgentReward::Resolved,
            thinking: false,
            manifest: None,
            refine: true,
        };
        let family = Family::load(&ws, &config, &file).unwrap();
        let sampling = SamplingConfig {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_tokens: 12,
        };
        let trajectory = |i: usize| dir.path().join(format!("{}.json", i + 1));
        let (group, error) = family.group(&mut session, 0, &sampling, 1, 2, &trajectory);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(group.len(), 2);
        // The second episode starts after the opening the first one evaluated.
        let prefilled = |i: usize| group[i].1["prefilled_tokens"].as_u64().unwrap();
        assert!(
            prefilled(1) + 3000 < prefilled(0),
            "{} then {} tokens prefilled",
            prefilled(0),
            prefilled(1)
        );
        let mut episodes = Vec::new();
        for (i, (episode, record)) in group.into_iter().enumerate() {
            let trajectory = trajectory(i);
            eprintln!("{record}");
            assert_eq!(record["seed"], i as u64 + 1);
            assert_eq!(record["instance_id"], task.instance_id.as_str());
            assert_eq!(record["resolved"], false, "{record}");
            assert_eq!(episode.reward, 0.0);
            assert!(trajectory.is_file());
            // Every reply is in the transcript as the policy's, each a run of its own (a
            // later turn extends the conversation instead of re-rendering it).
            let steps = record["steps"].as_u64().unwrap();
            assert!(steps >= 1, "{record}");
            assert_eq!(
                record["trained_tokens"], record["generated_tokens"],
                "{record}"
            );
            let g = &episode.transcript.generated;
            let runs = g.windows(2).filter(|w| !w[0] && w[1]).count();
            assert_eq!(runs as u64, steps, "one run of policy tokens per reply");
            assert!(!g[0], "the prompt is context");
            episodes.push(episode);
        }
        let [mut favoured, other] = <[_; 2]>::try_from(episodes).unwrap();
        favoured.reward = 1.0;
        let log_p = |session: &mut ChatSession, e: &Episode| -> f64 {
            let model = session.model_mut();
            model.truncate(0);
            let lp =
                pollster::block_on(model.log_probs(0, &e.transcript.tokens, &e.targets())).unwrap();
            lp.iter()
                .zip(e.trained())
                .filter(|(_, t)| *t)
                .map(|(&l, _)| f64::from(l))
                .sum()
        };
        let targets = session.model_mut().lora_targets();
        let adapter = crate::run::initial_adapter(&targets, 4, 8.0, 3);
        session.model_mut().set_lora(Some(&adapter)).unwrap();
        let model = session.model_mut();
        let mut trainer = Trainer::new(model, Default::default(), AdvantageNorm::GroupStd).unwrap();
        let before = log_p(&mut session, &favoured);
        let groups = [vec![favoured.clone(), other]];
        let stats = pollster::block_on(trainer.update(session.model_mut(), &groups, 1e-2)).unwrap();
        let after = log_p(&mut session, &favoured);
        eprintln!("{stats:?}\nlog p of the favoured episode's replies: {before:.4} -> {after:.4}");
        assert!(stats.grad_norm > 0.0 && stats.loss.is_finite(), "{stats:?}");
        assert_eq!(
            stats.tokens,
            groups[0]
                .iter()
                .map(|e| e.trained().iter().filter(|&&t| t).count())
                .sum::<usize>()
        );
        assert!(after > before + 0.1, "{before} -> {after}");
    }
}
