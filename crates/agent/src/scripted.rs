//! A language model that replays fixed replies: for tests of the loop, and for replaying a
//! recorded trajectory step by step.

use std::collections::VecDeque;

use crate::trajectory::Trajectory;
use lilypad_lm::{Completion, FinishReason, LanguageModel, ModelError, Request, TokenSink};

pub struct ScriptedModel {
    name: String,
    context: usize,
    replies: VecDeque<Completion>,
    /// The requests it was asked, for tests that check what the loop sent.
    pub seen_messages: Vec<usize>,
}

impl ScriptedModel {
    /// Replies with `texts` in order. Token counts are word counts, enough to exercise limits.
    pub fn new(name: &str, texts: &[&str]) -> Self {
        let replies = texts
            .iter()
            .map(|t| Completion {
                text: (*t).to_string(),
                finish: FinishReason::Stop,
                prompt_tokens: 0,
                prefilled_tokens: 0,
                generated_tokens: t.split_whitespace().count(),
                prefill_ms: 0.0,
                decode_ms: 0.0,
                draft_accepted: 0,
            })
            .collect();
        Self {
            name: name.into(),
            context: usize::MAX,
            replies,
            seen_messages: Vec::new(),
        }
    }

    /// Replays the model side of a recorded run: the same texts, finish reasons, token counts
    /// and timings, so a replay reproduces the trajectory.
    pub fn from_trajectory(t: &Trajectory) -> Self {
        Self {
            name: t.model.clone(),
            context: usize::MAX,
            replies: t
                .steps
                .iter()
                .map(|s| Completion {
                    text: s.raw_output.clone(),
                    finish: s.finish,
                    prompt_tokens: s.prompt_tokens,
                    prefilled_tokens: s.prefilled_tokens,
                    generated_tokens: s.generated_tokens,
                    prefill_ms: s.prefill_ms,
                    decode_ms: s.decode_ms,
                    draft_accepted: s.draft_accepted,
                })
                .collect(),
            seen_messages: Vec::new(),
        }
    }

    /// Replies read from JSON: an array of reply texts, `{"replies": [...]}`, or a recorded
    /// trajectory (replayed as [`ScriptedModel::from_trajectory`] does). `name` names the
    /// first two kinds; the error says what the text is not.
    pub fn from_json(name: &str, text: &str) -> Result<Self, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let replies = match &value {
            serde_json::Value::Array(_) => &value,
            serde_json::Value::Object(o) if o.contains_key("replies") => &value["replies"],
            serde_json::Value::Object(o) if o.contains_key("steps") => {
                let t =
                    Trajectory::from_json(text).map_err(|e| format!("not a trajectory: {e}"))?;
                return Ok(Self::from_trajectory(&t));
            }
            _ => {
                return Err(
                    "neither a JSON array of reply texts nor a trajectory.json (nor \
                     {\"replies\": [...]})"
                        .into(),
                );
            }
        };
        let texts: Vec<&str> = replies
            .as_array()
            .and_then(|a| a.iter().map(serde_json::Value::as_str).collect())
            .ok_or("replies must be strings (reply texts)")?;
        Ok(Self::new(name, &texts))
    }

    pub fn with_context(mut self, tokens: usize) -> Self {
        self.context = tokens;
        self
    }
}

impl LanguageModel for ScriptedModel {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn context_length(&self) -> usize {
        self.context
    }

    async fn complete(
        &mut self,
        req: &Request<'_>,
        on_text: &mut TokenSink<'_>,
    ) -> Result<Completion, ModelError> {
        self.seen_messages.push(req.messages.len());
        let words: usize = req
            .messages
            .iter()
            .map(|m| m.content.split_whitespace().count())
            .sum();
        if words > self.context {
            return Err(ModelError::ContextFull {
                needed: words,
                capacity: self.context,
            });
        }
        let mut reply = self
            .replies
            .pop_front()
            .ok_or_else(|| ModelError::Other("the script has no more replies".into()))?;
        // Stream word by word, as a real model streams tokens.
        let mut sent = 0;
        for (i, _) in reply.text.match_indices(' ') {
            if !on_text(&reply.text[sent..=i]) {
                reply.text.truncate(i + 1);
                reply.finish = FinishReason::Aborted;
                return Ok(reply);
            }
            sent = i + 1;
        }
        if sent < reply.text.len() && !on_text(&reply.text[sent..]) {
            reply.finish = FinishReason::Aborted;
        }
        Ok(reply)
    }
}
