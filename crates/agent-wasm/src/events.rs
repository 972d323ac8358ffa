//! What an agent run tells the page, one event per call of its `onEvent` listener. The page's
//! TypeScript type for it is generated from this enum (tests/tests/typescript.rs).

use lilypad_agent::{AgentEvent, CallRecord, ToolCall, Trajectory};
use serde::Serialize;
use ts_rs::TS;

#[derive(Debug, Serialize, TS)]
#[serde(tag = "type", rename_all = "lowercase")]
#[ts(rename = "AgentEvent")]
pub enum PageEvent<'a> {
    /// A step begins (its index).
    Step { index: usize },
    /// Generated text, as it streams.
    Text { text: &'a str },
    /// A tool call is about to run.
    Tool { call: &'a ToolCall },
    /// A tool call ran: the record the trajectory keeps.
    Observation { record: &'a CallRecord },
    /// The trajectory after a finished step.
    Trajectory { trajectory: &'a Trajectory },
}

impl<'a> From<AgentEvent<'a>> for PageEvent<'a> {
    fn from(event: AgentEvent<'a>) -> Self {
        match event {
            AgentEvent::StepStarted(index) => Self::Step { index },
            AgentEvent::Text(text) => Self::Text { text },
            AgentEvent::ToolStarted(call) => Self::Tool { call },
            AgentEvent::ToolFinished(record) => Self::Observation { record },
            AgentEvent::StepFinished(trajectory) => Self::Trajectory { trajectory },
        }
    }
}
