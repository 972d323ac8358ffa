//! The record of a run: every message, tool call, observation, token count and timing. It is
//! written after every step and can be replayed through [`crate::ScriptedModel`].

use serde::{Deserialize, Serialize};

use crate::{AgentConfig, FinishReason, Message, ToolCall};

/// Why a run ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case", tag = "reason", content = "detail")]
pub enum Exit {
    /// The model replied without a tool call: its answer is final.
    Submitted,
    StepLimit,
    ContextLimit,
    /// Too many replies in a row whose tool calls could not be read.
    FormatErrors,
    Aborted,
    ModelError(String),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct CallRecord {
    /// The call as read from the reply; `None` when it could not be read.
    pub call: Option<ToolCall>,
    pub observation: String,
    pub is_error: bool,
    pub duration_ms: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct StepRecord {
    pub index: usize,
    /// The model's text exactly as generated.
    pub raw_output: String,
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub prefilled_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Generated tokens a draft proposed and the model kept (speculative decoding).
    #[serde(default)]
    #[cfg_attr(feature = "ts", ts(optional, as = "Option<usize>"))]
    pub draft_accepted: usize,
    pub calls: Vec<CallRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct Trajectory {
    pub format: u32,
    pub task: String,
    pub model: String,
    pub repo_root: String,
    pub config: AgentConfig,
    /// The tool schemas the model was shown.
    #[cfg_attr(feature = "ts", ts(type = "unknown[]"))]
    pub tools: Vec<serde_json::Value>,
    pub messages: Vec<Message>,
    pub steps: Vec<StepRecord>,
    pub exit: Option<Exit>,
    /// The repository's changes as a git patch (final once `exit` is set).
    pub patch: String,
    /// Why the patch could not be brought up to date after the last step (the repository's
    /// root became unreadable); `patch` is then the last one taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "ts", ts(optional))]
    pub patch_error: Option<String>,
}

impl Trajectory {
    pub const FORMAT: u32 = 1;

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("trajectories serialise")
    }

    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The same record with every timing zeroed: two runs of the same script compare equal.
    pub fn without_timings(&self) -> Self {
        let mut t = self.clone();
        for s in &mut t.steps {
            s.prefill_ms = 0.0;
            s.decode_ms = 0.0;
            for c in &mut s.calls {
                c.duration_ms = 0.0;
            }
        }
        t
    }

    pub fn prefilled_tokens(&self) -> usize {
        self.steps.iter().map(|s| s.prefilled_tokens).sum()
    }

    pub fn generated_tokens(&self) -> usize {
        self.steps.iter().map(|s| s.generated_tokens).sum()
    }
}
