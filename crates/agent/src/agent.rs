//! The agent loop: ask the model, run the tool calls it makes, show it the results, until it
//! answers without a tool call or a limit is reached. The trajectory is complete after every step.
//!
//! `run_agent` → `Run::step` → `query` (the model) and `execute` (each tool call), ending in one
//! [`Exit`]. Every text the model is shown comes from `prompts/`.

use serde::{Deserialize, Serialize};

use crate::reply::parse_reply;
use crate::tools::{Observation, Toolbox, tool_schemas};
use crate::trajectory::{CallRecord, Exit, StepRecord, Trajectory};
use crate::{Message, RepoError, Repository, Role, ToolCall};
use lilypad_lm::{Completion, FinishReason, LanguageModel, ModelError, Request, Sampling};
use lilypad_repo::{ChangeTracker, TrackLimits};

const DEFAULT_SYSTEM_PROMPT: &str = include_str!("../prompts/system.md");
/// What the model reads when its reply hit the per-step token budget (`{tokens}`: how many).
const CUT_OFF: &str = include_str!("../prompts/cut_off.txt");
/// The reply to a tool call that the run's abort kept from running.
const CALL_NOT_RUN: &str = include_str!("../prompts/call_not_run.txt");

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct AgentConfig {
    /// `{root}` is replaced by the repository's root path.
    pub system_prompt: String,
    pub max_steps: usize,
    pub max_tokens_per_step: usize,
    pub max_consecutive_format_errors: usize,
    pub sampling: Sampling,
    pub enable_thinking: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            system_prompt: DEFAULT_SYSTEM_PROMPT.into(),
            max_steps: 30,
            max_tokens_per_step: 2048,
            max_consecutive_format_errors: 3,
            sampling: Sampling::default(),
            enable_thinking: true,
        }
    }
}

/// What the loop reports while it runs.
pub enum AgentEvent<'a> {
    StepStarted(usize),
    /// Generated text, as it streams.
    Text(&'a str),
    ToolStarted(&'a crate::ToolCall),
    ToolFinished(&'a CallRecord),
    /// The trajectory after a finished step (write it out here).
    StepFinished(&'a Trajectory),
}

/// Runs the agent on `task` until it submits or a limit ends the run. `on_event` sees every
/// event; returning false aborts the run (the trajectory then ends with [`Exit::Aborted`], and
/// every tool call the model made has its reply, "not run" where the abort came first).
///
/// The only error is a repository that cannot be read at the start; from then on the run ends
/// with its trajectory whatever happens (a change-tracking failure is recorded in it).
pub async fn run_agent<M: LanguageModel>(
    model: &mut M,
    repo: &mut dyn Repository,
    toolbox: &mut Toolbox,
    task: &str,
    config: &AgentConfig,
    on_event: &mut dyn FnMut(AgentEvent<'_>) -> bool,
) -> Result<Trajectory, RepoError> {
    let mut run = Run::start(model, repo, toolbox, task, config)?;
    let exit = loop {
        if let Some(exit) = run.step(on_event).await {
            break exit;
        }
    };
    Ok(run.finish(exit, on_event))
}

/// One run's state: what [`run_agent`] steps through.
struct Run<'a, M> {
    model: &'a mut M,
    repo: &'a mut dyn Repository,
    toolbox: &'a mut Toolbox,
    config: &'a AgentConfig,
    tools: Vec<serde_json::Value>,
    changes: ChangeTracker,
    traj: Trajectory,
    format_errors: usize,
}

impl<'a, M: LanguageModel> Run<'a, M> {
    fn start(
        model: &'a mut M,
        repo: &'a mut dyn Repository,
        toolbox: &'a mut Toolbox,
        task: &str,
        config: &'a AgentConfig,
    ) -> Result<Self, RepoError> {
        let changes = ChangeTracker::new(repo, TrackLimits::default())?;
        let tools = tool_schemas();
        let traj = Trajectory {
            format: Trajectory::FORMAT,
            task: task.into(),
            model: model.name(),
            repo_root: repo.root().into(),
            config: config.clone(),
            tools: tools.clone(),
            messages: vec![
                Message::system(config.system_prompt.replace("{root}", repo.root())),
                Message::user(task),
            ],
            steps: Vec::new(),
            exit: None,
            patch: String::new(),
            patch_error: None,
        };
        Ok(Self {
            model,
            repo,
            toolbox,
            config,
            tools,
            changes,
            traj,
            format_errors: 0,
        })
    }

    /// Asks the model once and runs the calls in its reply; `Some` when the run is over.
    async fn step(&mut self, on_event: &mut dyn FnMut(AgentEvent<'_>) -> bool) -> Option<Exit> {
        let index = self.traj.steps.len();
        if index >= self.config.max_steps {
            return Some(Exit::StepLimit);
        }
        if !on_event(AgentEvent::StepStarted(index)) {
            return Some(Exit::Aborted);
        }
        let (completion, mut aborted) = match self.query(index, on_event).await {
            Ok(answer) => answer,
            Err(ModelError::ContextFull { .. } | ModelError::PromptTooLong { .. }) => {
                return Some(Exit::ContextLimit);
            }
            Err(e) => return Some(Exit::ModelError(e.to_string())),
        };
        let reply = parse_reply(&completion.text, &self.tools);
        self.traj.messages.push(Message {
            role: Role::Assistant,
            content: reply.content.clone(),
            reasoning_content: reply.reasoning.clone(),
            tool_calls: reply
                .calls
                .iter()
                .filter_map(|c| c.as_ref().ok().cloned())
                .collect(),
            name: None,
        });
        let mut step = StepRecord {
            index,
            raw_output: completion.text.clone(),
            finish: completion.finish,
            prompt_tokens: completion.prompt_tokens,
            prefilled_tokens: completion.prefilled_tokens,
            generated_tokens: completion.generated_tokens,
            prefill_ms: completion.prefill_ms,
            decode_ms: completion.decode_ms,
            draft_accepted: completion.draft_accepted,
            calls: Vec::new(),
        };
        let stop = match completion.finish {
            FinishReason::Aborted => Some(Exit::Aborted),
            FinishReason::ContextFull => Some(Exit::ContextLimit),
            FinishReason::Length if reply.calls.is_empty() => {
                // A reply cut off by the per-step budget is not an answer: say so and go on.
                self.format_errors += 1;
                let note = CUT_OFF
                    .trim_end()
                    .replace("{tokens}", &completion.generated_tokens.to_string());
                self.traj.messages.push(Message::user(note.clone()));
                step.calls.push(CallRecord {
                    call: None,
                    observation: note,
                    is_error: true,
                    duration_ms: 0.0,
                });
                None
            }
            _ if reply.calls.is_empty() => Some(Exit::Submitted),
            _ => None,
        };
        aborted |= stop == Some(Exit::Aborted);
        let mut all_malformed = !reply.calls.is_empty();
        for parsed in &reply.calls {
            all_malformed &= parsed.is_err();
            let record = self.execute(parsed, &mut aborted, on_event).await;
            let name = record.call.as_ref().map_or("error", |c| c.name.as_str());
            self.traj
                .messages
                .push(Message::tool(name, record.observation.clone()));
            step.calls.push(record);
        }
        if all_malformed {
            self.format_errors += 1;
        } else if !reply.calls.is_empty() {
            self.format_errors = 0;
        }
        self.traj.steps.push(step);
        self.track_changes();
        on_event(AgentEvent::StepFinished(&self.traj));
        if stop.is_some() {
            stop
        } else if aborted {
            Some(Exit::Aborted)
        } else if self.format_errors >= self.config.max_consecutive_format_errors {
            Some(Exit::FormatErrors)
        } else {
            None
        }
    }

    /// The model's reply to the conversation so far, and whether the caller aborted it.
    async fn query(
        &mut self,
        index: usize,
        on_event: &mut dyn FnMut(AgentEvent<'_>) -> bool,
    ) -> Result<(Completion, bool), ModelError> {
        let request = Request {
            messages: &self.traj.messages,
            tools: &self.tools,
            sampling: Sampling {
                seed: self.config.sampling.seed.wrapping_add(index as u64),
                ..self.config.sampling
            },
            max_tokens: self.config.max_tokens_per_step,
            enable_thinking: self.config.enable_thinking,
        };
        let mut aborted = false;
        let mut sink = |text: &str| {
            aborted |= !on_event(AgentEvent::Text(text));
            !aborted
        };
        let completion = self.model.complete(&request, &mut sink).await?;
        Ok((completion, aborted))
    }

    /// Runs one call from the reply, or answers it without running once the run is aborted
    /// (so every call the model made has a reply and the conversation stays well formed).
    async fn execute(
        &mut self,
        parsed: &Result<ToolCall, String>,
        aborted: &mut bool,
        on_event: &mut dyn FnMut(AgentEvent<'_>) -> bool,
    ) -> CallRecord {
        let started = web_time::Instant::now();
        let (call, observation) = match parsed {
            Ok(call) => {
                *aborted = *aborted || !on_event(AgentEvent::ToolStarted(call));
                if *aborted {
                    let record = CallRecord {
                        call: Some(call.clone()),
                        observation: CALL_NOT_RUN.trim_end().into(),
                        is_error: true,
                        duration_ms: 0.0,
                    };
                    return record;
                }
                let observation = self.toolbox.execute_async(self.repo, call).await;
                (Some(call.clone()), observation)
            }
            Err(e) => (None, Observation::error(format!("Error: {e}"))),
        };
        let record = CallRecord {
            call,
            observation: observation.content,
            is_error: observation.is_error,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
        };
        *aborted = !on_event(AgentEvent::ToolFinished(&record)) || *aborted;
        record
    }

    /// Brings the trajectory's patch up to date. A failure (the repository's root became
    /// unreadable) is recorded, keeping the last patch, and the run goes on.
    fn track_changes(&mut self) {
        match self.changes.update(self.repo) {
            Ok(()) => {
                self.traj.patch = self.changes.patch();
                self.traj.patch_error = None;
            }
            Err(e) => self.traj.patch_error = Some(e.to_string()),
        }
    }

    fn finish(
        mut self,
        exit: Exit,
        on_event: &mut dyn FnMut(AgentEvent<'_>) -> bool,
    ) -> Trajectory {
        self.track_changes();
        self.traj.exit = Some(exit);
        on_event(AgentEvent::StepFinished(&self.traj));
        self.traj
    }
}
