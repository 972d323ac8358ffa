//! The agent loop: ask the model, run the tool calls it makes, show it the results, until it
//! answers without a tool call or a limit is reached. The trajectory is complete after every step.

use serde::{Deserialize, Serialize};

use crate::model::{FinishReason, LanguageModel, ModelError, Request, Sampling};
use crate::reply::parse_reply;
use crate::tools::{Toolbox, tool_schemas};
use crate::trajectory::{CallRecord, Exit, StepRecord, Trajectory};
use crate::{Message, RepoError, Repository, Role, patch};

const DEFAULT_SYSTEM_PROMPT: &str = include_str!("../prompts/system.md");

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
            max_tokens_per_step: 4096,
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
/// event; returning false aborts the run (the trajectory then ends with [`Exit::Aborted`]).
pub async fn run_agent<M: LanguageModel>(
    model: &mut M,
    repo: &mut dyn Repository,
    toolbox: &mut Toolbox,
    task: &str,
    config: &AgentConfig,
    on_event: &mut dyn FnMut(AgentEvent<'_>) -> bool,
) -> Result<Trajectory, RepoError> {
    let baseline = repo.snapshot()?;
    let tools = tool_schemas();
    let mut traj = Trajectory {
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
    };
    let mut format_errors = 0;
    let exit = loop {
        let index = traj.steps.len();
        if index >= config.max_steps {
            break Exit::StepLimit;
        }
        if !on_event(AgentEvent::StepStarted(index)) {
            break Exit::Aborted;
        }
        let request = Request {
            messages: &traj.messages,
            tools: &tools,
            sampling: Sampling {
                seed: config.sampling.seed.wrapping_add(index as u64),
                ..config.sampling
            },
            max_tokens: config.max_tokens_per_step,
            enable_thinking: config.enable_thinking,
        };
        let mut aborted = false;
        let completion = {
            let mut sink = |text: &str| {
                aborted |= !on_event(AgentEvent::Text(text));
                !aborted
            };
            model.complete(&request, &mut sink).await
        };
        let completion = match completion {
            Ok(c) => c,
            Err(ModelError::ContextFull { .. }) => break Exit::ContextLimit,
            Err(e) => break Exit::ModelError(e.to_string()),
        };
        let reply = parse_reply(&completion.text, &tools);
        traj.messages.push(Message {
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
            calls: Vec::new(),
        };
        let stop = match completion.finish {
            FinishReason::Aborted => Some(Exit::Aborted),
            FinishReason::ContextFull => Some(Exit::ContextLimit),
            FinishReason::Length if reply.calls.is_empty() => {
                // A reply cut off by the per-step budget is not an answer: say so and go on.
                format_errors += 1;
                let note = format!(
                    "Error: your reply was cut off after {} tokens. Think less and make one tool call at a time, or give your final answer.",
                    completion.generated_tokens
                );
                traj.messages.push(Message::user(note.clone()));
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
        let mut all_malformed = !reply.calls.is_empty();
        for parsed in &reply.calls {
            let started = web_time::Instant::now();
            let (call, observation) = match parsed {
                Ok(call) => {
                    all_malformed = false;
                    if !on_event(AgentEvent::ToolStarted(call)) {
                        aborted = true;
                        break;
                    }
                    (Some(call.clone()), toolbox.execute_async(repo, call).await)
                }
                Err(e) => (
                    None,
                    crate::tools::Observation::error(format!("Error: {e}")),
                ),
            };
            let record = CallRecord {
                call,
                observation: observation.content,
                is_error: observation.is_error,
                duration_ms: started.elapsed().as_secs_f64() * 1e3,
            };
            on_event(AgentEvent::ToolFinished(&record));
            let name = record.call.as_ref().map_or("error", |c| c.name.as_str());
            traj.messages
                .push(Message::tool(name, record.observation.clone()));
            step.calls.push(record);
        }
        if all_malformed {
            format_errors += 1;
        } else if !reply.calls.is_empty() {
            format_errors = 0;
        }
        traj.steps.push(step);
        traj.patch = patch::diff(&baseline, &repo.snapshot()?);
        on_event(AgentEvent::StepFinished(&traj));
        if let Some(exit) = stop {
            break exit;
        }
        if aborted {
            break Exit::Aborted;
        }
        if format_errors >= config.max_consecutive_format_errors {
            break Exit::FormatErrors;
        }
    };
    traj.patch = patch::diff(&baseline, &repo.snapshot()?);
    traj.exit = Some(exit);
    on_event(AgentEvent::StepFinished(&traj));
    Ok(traj)
}
