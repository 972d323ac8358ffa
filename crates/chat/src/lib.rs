//! A chat session over one loaded model: renders OpenAI-style messages with the model's own chat
//! template, generates with streaming, and keeps the model's state between turns so each turn
//! evaluates only its new tokens. It is the engine-backed [`LanguageModel`] the agent runs on.

use lilypad_engine::{Batch, BatchEvent, DoneReason, EngineError, Model, SamplingParams};
use lilypad_lm::{
    Completion, FinishReason, LanguageModel, Message, ModelError, ProgressSink, PromptProgress,
    Request, Role, Sampling, TokenSink,
};
use lilypad_tokenizer::{ChatTemplate, TemplateValue, TextTokenizer};
use serde_json::Value;
use web_time::Instant;

pub mod prefix;
#[cfg(not(target_arch = "wasm32"))]
pub use prefix::DirPrefixStore;
pub use prefix::MemoryPrefixStore;
pub use prefix::PrefixStore;

/// What the previous turn left in the model's state.
struct PreviousTurn {
    /// How many messages the previous prompt rendered.
    n_messages: usize,
    /// That prompt's text, generation prompt included.
    prompt_text: String,
    /// The tokens the model has seen: that prompt and everything it generated.
    tokens: Vec<u32>,
    /// Whether the generation ended with an end-of-turn token.
    ended: bool,
}

pub struct ChatSession {
    model: Model,
    tok: TextTokenizer,
    template: ChatTemplate,
    /// The template renders `tools` itself; otherwise tools are described in the system message.
    template_has_tools: bool,
    name: String,
    previous: Option<PreviousTurn>,
    /// The conversation's tokens since the last [`ChatSession::take_transcript`], each marked
    /// with whether the model generated it: what a trainer differentiates.
    transcript: Transcript,
    /// Where the state after a conversation's system message is saved and found again.
    prefix_store: Option<Box<dyn PrefixStore>>,
}

/// A conversation as token ids, each marked with whether the model wrote it (true) or was
/// shown it (prompt, template, tool output).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transcript {
    pub tokens: Vec<u32>,
    pub generated: Vec<bool>,
}

impl Transcript {
    /// Appends a turn: `prompt` (which extends what is here, or replaces it when it does not)
    /// and what the model generated after it.
    fn record(&mut self, prompt: &[u32], generated: &[u32]) {
        if !prompt.starts_with(&self.tokens) {
            // The conversation was re-rendered from the start: earlier replies come back as
            // prompt text, which a trainer must not count as the model's.
            self.tokens.clear();
            self.generated.clear();
        }
        let new = &prompt[self.tokens.len()..];
        self.tokens.extend_from_slice(new);
        self.generated.extend(std::iter::repeat_n(false, new.len()));
        self.tokens.extend_from_slice(generated);
        self.generated
            .extend(std::iter::repeat_n(true, generated.len()));
    }
}

impl ChatSession {
    pub fn new(model: Model, tok: TextTokenizer, name: &str) -> Result<Self, ModelError> {
        let template = tok
            .template()
            .map_err(|e| ModelError::Other(e.to_string()))?;
        let template_has_tools = tok
            .chat_template
            .as_deref()
            .is_some_and(|t| t.contains("tools") && t.contains("tool_call"));
        Ok(Self {
            model,
            tok,
            template,
            template_has_tools,
            name: name.into(),
            previous: None,
            transcript: Transcript::default(),
            prefix_store: None,
        })
    }

    /// Keeps the state after each conversation's system message (with its tool schemas) in
    /// `store`, so a later session that opens the same way does not evaluate it again.
    pub fn set_prefix_store(&mut self, store: Option<Box<dyn PrefixStore>>) {
        self.prefix_store = store;
    }

    pub fn prefix_store_mut(&mut self) -> Option<&mut (dyn PrefixStore + 'static)> {
        self.prefix_store.as_deref_mut()
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The model, to change it (apply or remove a LoRA adapter, say). The cached conversation is
    /// forgotten: what the model computed for it no longer holds once its weights change.
    pub fn model_mut(&mut self) -> &mut Model {
        self.previous = None;
        &mut self.model
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tok
    }

    /// The prompt text `request` renders to (what the model is shown, before tokenization).
    pub fn prompt_text(&self, request: &Request<'_>) -> Result<String, ModelError> {
        self.render(
            request.messages,
            request.tools,
            true,
            request.enable_thinking,
        )
    }

    /// The conversation's tokens since the last call (the start of an episode), each marked
    /// with whether the model generated it, and a fresh transcript from here on. A turn whose
    /// prompt does not extend the previous one restarts it.
    pub fn take_transcript(&mut self) -> Transcript {
        std::mem::take(&mut self.transcript)
    }

    /// Forgets the cached conversation.
    pub fn reset(&mut self) {
        self.previous = None;
        self.model.reset();
    }

    /// Generates after a raw prompt, with no chat template (special tokens written in it are
    /// parsed, BOS follows the tokenizer). Returns the completion and the generated token ids,
    /// end-of-turn token excluded. The cached prefix is still reused, but a later chat turn does
    /// not build on this one.
    pub async fn complete_prompt(
        &mut self,
        prompt: &str,
        sampling: Sampling,
        max_tokens: usize,
        on_prompt: &mut ProgressSink<'_>,
        on_text: &mut TokenSink<'_>,
    ) -> Result<(Completion, Vec<u32>), ModelError> {
        self.previous = None;
        let prompt = self.encode(prompt)?;
        let (completion, mut tokens) = self
            .run(&prompt, sampling, max_tokens, 0, on_prompt, on_text)
            .await?;
        if tokens.last().is_some_and(|&id| self.tok.is_stop(id)) {
            tokens.pop();
        }
        Ok((completion, tokens))
    }

    /// `n` samples of one request decoded together (GRPO's group, best-of-k): the prompt is
    /// evaluated once and its state forked, sample i uses seed `sampling.seed + i`. The model
    /// needs `n` sequence slots (`ModelOptions::sequences`). Returns each sample's completion
    /// and generated token ids (end-of-turn token excluded); the cached conversation is reset.
    pub async fn complete_many(
        &mut self,
        request: &Request<'_>,
        n: usize,
    ) -> Result<Vec<(Completion, Vec<u32>)>, ModelError> {
        let samples = self.sample_group(request, n).await?;
        Ok(self.without_stop_tokens(samples))
    }

    /// [`ChatSession::complete_many`] after a raw prompt, with no chat template (as
    /// [`ChatSession::complete_prompt`]).
    pub async fn complete_prompt_many(
        &mut self,
        prompt: &str,
        sampling: Sampling,
        max_tokens: usize,
        n: usize,
    ) -> Result<Vec<(Completion, Vec<u32>)>, ModelError> {
        self.previous = None;
        let prompt = self.encode(prompt)?;
        let samples = self.sample(prompt, &sampling, max_tokens, n).await?;
        Ok(self.without_stop_tokens(samples))
    }

    fn without_stop_tokens(
        &self,
        samples: Vec<(Completion, Vec<u32>, Vec<u32>)>,
    ) -> Vec<(Completion, Vec<u32>)> {
        samples
            .into_iter()
            .map(|(completion, mut tokens, _)| {
                if tokens.last().is_some_and(|&id| self.tok.is_stop(id)) {
                    tokens.pop();
                }
                (completion, tokens)
            })
            .collect()
    }

    /// [`ChatSession::complete_many`] with each sample's conversation as a trainer reads it:
    /// the prompt as shown, then the sample's tokens (its end-of-turn token included) as the
    /// model's, as [`ChatSession::take_transcript`] holds a single turn.
    pub async fn complete_group(
        &mut self,
        request: &Request<'_>,
        n: usize,
    ) -> Result<Vec<(Completion, Transcript)>, ModelError> {
        let samples = self.sample_group(request, n).await?;
        Ok(samples
            .into_iter()
            .map(|(completion, tokens, prompt)| {
                let mut transcript = Transcript::default();
                transcript.record(&prompt, &tokens);
                (completion, transcript)
            })
            .collect())
    }

    /// The samples of [`ChatSession::complete_many`], each with every generated token id
    /// (an end-of-turn token included) and the prompt's.
    async fn sample_group(
        &mut self,
        request: &Request<'_>,
        n: usize,
    ) -> Result<Vec<(Completion, Vec<u32>, Vec<u32>)>, ModelError> {
        self.previous = None;
        let text = self.render(
            request.messages,
            request.tools,
            true,
            request.enable_thinking,
        )?;
        let prompt = self.encode(&text)?;
        self.sample(prompt, &request.sampling, request.max_tokens, n)
            .await
    }

    /// `n` samples after `prompt` in one batch: each with its generated token ids (an
    /// end-of-turn token included) and the prompt's.
    async fn sample(
        &mut self,
        prompt: Vec<u32>,
        sampling: &Sampling,
        max_tokens: usize,
        n: usize,
    ) -> Result<Vec<(Completion, Vec<u32>, Vec<u32>)>, ModelError> {
        let sp = sampling_params(sampling);
        let start = Instant::now();
        let tok = &self.tok;
        let mut batch = Batch::new(&mut self.model, |id| tok.is_stop(id));
        let ids = batch
            .submit_group(&prompt, n, &sp, max_tokens)
            .map_err(engine_error)?;
        let mut tokens = vec![Vec::new(); n];
        let mut finish = vec![FinishReason::Length; n];
        let mut first = None;
        while batch.pending() > 0 {
            for event in batch.step().await.map_err(engine_error)? {
                first.get_or_insert_with(Instant::now);
                match event {
                    BatchEvent::Token { request, token } => tokens[request - ids[0]].push(token),
                    BatchEvent::Done { request, reason } => {
                        finish[request - ids[0]] = match reason {
                            DoneReason::Stop => FinishReason::Stop,
                            DoneReason::MaxTokens => FinishReason::Length,
                            DoneReason::ContextFull => FinishReason::ContextFull,
                        }
                    }
                }
            }
        }
        let (end, first) = (Instant::now(), first.unwrap_or(start));
        tokens
            .into_iter()
            .zip(finish)
            .map(|(t, finish)| {
                let generated_tokens = t.len();
                let text_tokens = match t.last() {
                    Some(&id) if self.tok.is_stop(id) => &t[..t.len() - 1],
                    _ => &t[..],
                };
                let text = self
                    .tok
                    .decode(text_tokens)
                    .map_err(|e| ModelError::Other(e.to_string()))?;
                let completion = Completion {
                    text,
                    finish,
                    prompt_tokens: prompt.len(),
                    prefilled_tokens: prompt.len(),
                    generated_tokens,
                    prefill_ms: (first - start).as_secs_f64() * 1e3,
                    decode_ms: (end - first).as_secs_f64() * 1e3,
                    draft_accepted: 0,
                };
                Ok((completion, t, prompt.clone()))
            })
            .collect()
    }

    /// Generates after `prompt`, streaming text to `on_text`; returns the completion and every
    /// generated token id (an end-of-turn token included). `opened` prompt tokens were
    /// evaluated just before (the conversation's opening), and count in the progress reported
    /// to `on_prompt`.
    async fn run(
        &mut self,
        prompt: &[u32],
        sampling: Sampling,
        max_tokens: usize,
        opened: usize,
        on_prompt: &mut ProgressSink<'_>,
        on_text: &mut TokenSink<'_>,
    ) -> Result<(Completion, Vec<u32>), ModelError> {
        self.model.check_prompt(prompt).map_err(engine_error)?;
        let capacity = self.model.context as usize;
        if prompt.len() == capacity {
            // It fits, with no room for a reply.
            return Err(ModelError::ContextFull {
                needed: prompt.len() + 1,
                capacity,
            });
        }
        let sp = sampling_params(&sampling);
        let start = Instant::now();
        let mut first: Option<Instant> = None;
        let mut detok = self.tok.stream();
        let mut text = String::new();
        let mut stopped_by_caller = false;
        let mut detok_error = None;
        let tok = &self.tok;
        let mut on_prompt = |done, total| {
            on_prompt(PromptProgress {
                done: opened + done,
                total: opened + total,
            })
        };
        let generation = self
            .model
            .generate_observed(
                prompt,
                &sp,
                max_tokens,
                &|id| tok.is_stop(id),
                &mut on_prompt,
                &mut |id| {
                    first.get_or_insert_with(Instant::now);
                    if tok.is_stop(id) {
                        return false;
                    }
                    match detok.push(id) {
                        Ok(piece) => {
                            text.push_str(&piece);
                            if !piece.is_empty() && !on_text(&piece) {
                                stopped_by_caller = true;
                                return false;
                            }
                            true
                        }
                        Err(e) => {
                            detok_error = Some(e.to_string());
                            false
                        }
                    }
                },
            )
            .await
            .map_err(engine_error)?;
        if let Some(e) = detok_error {
            return Err(ModelError::Other(e));
        }
        let end = Instant::now();
        let first = first.unwrap_or(end);
        let ended = generation
            .tokens
            .last()
            .is_some_and(|&id| self.tok.is_stop(id));
        let finish = if ended {
            FinishReason::Stop
        } else if stopped_by_caller || generation.prompt_stopped {
            FinishReason::Aborted
        } else if generation.tokens.len() >= max_tokens {
            FinishReason::Length
        } else {
            FinishReason::ContextFull
        };
        let completion = Completion {
            text,
            finish,
            prompt_tokens: prompt.len(),
            prefilled_tokens: generation.prompt_evaluated,
            generated_tokens: generation.tokens.len(),
            prefill_ms: (first - start).as_secs_f64() * 1e3,
            decode_ms: (end - first).as_secs_f64() * 1e3,
            draft_accepted: match self.model.draft() {
                Some(_) => self.model.speculative_stats().accepted,
                None => 0,
            },
        };
        Ok((completion, generation.tokens))
    }

    fn render(
        &self,
        messages: &[Message],
        tools: &[Value],
        generation_prompt: bool,
        thinking: bool,
    ) -> Result<String, ModelError> {
        let mut extra = serde_json::json!({ "enable_thinking": thinking });
        if self.template_has_tools && !tools.is_empty() {
            extra["tools"] = Value::from(tools.to_vec());
        }
        let extra = TemplateValue::from(minijinja::value::Serde(extra));
        if self.template_has_tools {
            self.template.render(messages, generation_prompt, extra)
        } else {
            self.template.render(
                &describe_tools_inline(messages, tools),
                generation_prompt,
                extra,
            )
        }
        .map_err(|e| ModelError::Other(e.to_string()))
    }

    /// With a prefix store, puts the state after the request's system message into the
    /// model: from the store when it has it, else evaluated now and saved. Nothing to do
    /// when the model already holds that opening (a later turn of the same conversation).
    /// Returns the tokens evaluated, and whether `on_prompt` stopped it before the end of the
    /// opening (nothing is saved then).
    async fn open_from_store(
        &mut self,
        req: &Request<'_>,
        prompt: &[u32],
        on_prompt: &mut ProgressSink<'_>,
    ) -> Result<(usize, bool), ModelError> {
        if self.prefix_store.is_none()
            || req.messages.first().is_none_or(|m| m.role != Role::System)
        {
            return Ok((0, false));
        }
        let opening = self.render(&req.messages[..1], req.tools, false, req.enable_thinking)?;
        let opening = self.encode(&opening)?;
        // The opening must tokenize as the prompt's start, and leave a token to evaluate.
        if opening.is_empty() || opening.len() >= prompt.len() || !prompt.starts_with(&opening) {
            return Ok((0, false));
        }
        let held = self.model.tokens();
        if held.len() >= opening.len() && held.starts_with(&opening) {
            return Ok((0, false));
        }
        let key = prefix::key(&self.model, &opening);
        self.previous = None;
        let store = self.prefix_store.as_mut().expect("checked above");
        if let Some(state) = store.load(&key) {
            // A state that does not load (truncated, another layout) is computed again.
            if self.model.load_state(&state).is_ok() && self.model.tokens() == opening {
                return Ok((0, false));
            }
        }
        // Part of the opening may be held (a request stopped while reading it): only the
        // rest is evaluated. The prompt after the opening follows at once, so progress
        // counts it too.
        let rest = self.model.reuse_prefix(&opening).to_vec();
        let total = prompt.len() - (opening.len() - rest.len());
        let evaluated = self
            .model
            .prefill(&rest, &mut |done| on_prompt(PromptProgress { done, total }))
            .await
            .map_err(engine_error)?;
        if evaluated < rest.len() {
            return Ok((evaluated, true));
        }
        let state = self.model.save_state().await.map_err(engine_error)?;
        self.prefix_store
            .as_mut()
            .expect("checked above")
            .save(&key, &state);
        Ok((rest.len(), false))
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        self.tok
            .encode(text, true)
            .map_err(|e| ModelError::Other(e.to_string()))
    }

    /// The prompt's tokens. When the conversation extends the previous turn, the tokens the model
    /// actually generated stand in for the template's re-rendering of that reply (which may
    /// format thinking or tool calls differently), so the cached state stays valid.
    fn prompt_tokens(&self, req: &Request<'_>) -> Result<(String, Vec<u32>), ModelError> {
        let full = self.render(req.messages, req.tools, true, req.enable_thinking)?;
        if let Some(tokens) = self.extend_previous(req, &full)? {
            return Ok((full, tokens));
        }
        let tokens = self.encode(&full)?;
        Ok((full, tokens))
    }

    fn extend_previous(
        &self,
        req: &Request<'_>,
        full: &str,
    ) -> Result<Option<Vec<u32>>, ModelError> {
        let Some(prev) = &self.previous else {
            return Ok(None);
        };
        let n = prev.n_messages;
        if req.messages.len() <= n || req.messages[n].role != Role::Assistant {
            return Ok(None);
        }
        let before = self.render(&req.messages[..n], req.tools, true, req.enable_thinking)?;
        let with_reply = self.render(&req.messages[..=n], req.tools, false, req.enable_thinking)?;
        if before != prev.prompt_text
            || !with_reply.starts_with(&before)
            || !full.starts_with(&with_reply)
        {
            return Ok(None);
        }
        // The rendered reply ends with the end-of-turn token's text and whatever the template
        // puts after it (a newline). Generated tokens that ended the turn already end with that
        // token; a reply cut off by the token limit gets it appended, as the template would.
        let reply = &with_reply[before.len()..];
        let Some((end_id, after_end)) = self
            .tok
            .stop
            .iter()
            .filter_map(|&id| Some((id, self.tok.token(id)?)))
            .filter_map(|(id, t)| reply.rfind(&t).map(|i| (id, &reply[i + t.len()..])))
            .min_by_key(|(_, s)| s.len())
        else {
            return Ok(None);
        };
        let mut tokens = prev.tokens.clone();
        if !prev.ended {
            tokens.push(end_id);
        }
        let tail = format!("{after_end}{}", &full[with_reply.len()..]);
        let mut tail_tokens = self.encode(&tail)?;
        // The tail is mid-conversation: no BOS there.
        if self.tok.add_bos
            && self.tok.bos.is_some()
            && tail_tokens.first() == self.tok.bos.as_ref()
        {
            tail_tokens.remove(0);
        }
        tokens.extend(tail_tokens);
        Ok(Some(tokens))
    }
}

/// For templates that know nothing of tools: the tool schemas go into the system message in
/// Qwen's Hermes-style wording, calls are written back as `<tool_call>` text and results as
/// `<tool_response>` user turns, so any chat model sees the same protocol.
fn describe_tools_inline(messages: &[Message], tools: &[Value]) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut tool_text = String::new();
    if !tools.is_empty() {
        tool_text.push_str("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        for t in tools {
            tool_text.push('\n');
            tool_text.push_str(&t.to_string());
        }
        tool_text.push_str("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
    }
    let mut iter = messages.iter().peekable();
    if let Some(first) = iter.peek() {
        if first.role == Role::System {
            out.push(Message::system(format!("{}{tool_text}", first.content)));
            iter.next();
        } else if !tool_text.is_empty() {
            out.push(Message::system(tool_text.trim_start().to_string()));
        }
    }
    for m in iter {
        match m.role {
            Role::Assistant => {
                let mut text = String::new();
                if let Some(r) = &m.reasoning_content {
                    text.push_str(&format!("<think>\n{r}\n</think>\n\n"));
                }
                text.push_str(&m.content);
                for c in &m.tool_calls {
                    let call = serde_json::json!({"name": c.name, "arguments": c.arguments});
                    text.push_str(&format!("\n<tool_call>\n{call}\n</tool_call>"));
                }
                out.push(Message::new(Role::Assistant, text.trim_start().to_string()));
            }
            Role::Tool => out.push(Message::user(format!(
                "<tool_response>\n{}\n</tool_response>",
                m.content
            ))),
            _ => out.push(Message::new(m.role, m.content.clone())),
        }
    }
    out
}

/// The engine's sampler settings for `s` (penalties over the engine's default window).
pub fn sampling_params(s: &Sampling) -> SamplingParams {
    SamplingParams {
        temperature: s.temperature,
        top_k: s.top_k,
        top_p: s.top_p,
        repeat_penalty: s.repeat_penalty,
        presence_penalty: s.presence_penalty,
        seed: s.seed,
        ..SamplingParams::greedy()
    }
}

fn engine_error(e: EngineError) -> ModelError {
    match e {
        EngineError::ContextFull { needed, capacity } => {
            ModelError::ContextFull { needed, capacity }
        }
        EngineError::PromptTooLong { prompt, context } => {
            ModelError::PromptTooLong { prompt, context }
        }
        e => ModelError::Other(e.to_string()),
    }
}

impl LanguageModel for ChatSession {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn context_length(&self) -> usize {
        self.model.context as usize
    }

    async fn complete(
        &mut self,
        req: &Request<'_>,
        on_text: &mut TokenSink<'_>,
    ) -> Result<Completion, ModelError> {
        self.complete_observed(req, &mut |_| true, on_text).await
    }
}

impl ChatSession {
    /// [`LanguageModel::complete`], reporting how far the model has read the prompt to
    /// `on_prompt` while it reads a long one (the conversation's opening included); it
    /// returning false stops before the first token, with [`FinishReason::Aborted`].
    pub async fn complete_observed(
        &mut self,
        req: &Request<'_>,
        on_prompt: &mut ProgressSink<'_>,
        on_text: &mut TokenSink<'_>,
    ) -> Result<Completion, ModelError> {
        let (prompt_text, prompt) = self.prompt_tokens(req)?;
        let start = Instant::now();
        let (opened, stopped) = self.open_from_store(req, &prompt, on_prompt).await?;
        let opening_ms = start.elapsed().as_secs_f64() * 1e3;
        if stopped {
            return Ok(Completion {
                text: String::new(),
                finish: FinishReason::Aborted,
                prompt_tokens: prompt.len(),
                prefilled_tokens: opened,
                generated_tokens: 0,
                prefill_ms: opening_ms,
                decode_ms: 0.0,
                draft_accepted: 0,
            });
        }
        let (mut completion, generated) = self
            .run(
                &prompt,
                req.sampling,
                req.max_tokens,
                opened,
                on_prompt,
                on_text,
            )
            .await?;
        completion.prefill_ms += opening_ms;
        completion.prefilled_tokens += opened;
        if completion.finish == FinishReason::Aborted && generated.is_empty() {
            // Stopped while reading the prompt: the model holds part of it, no reply.
            self.previous = None;
            return Ok(completion);
        }
        let ended = generated.last().is_some_and(|&id| self.tok.is_stop(id));
        self.transcript.record(&prompt, &generated);
        let mut seen = prompt;
        seen.extend_from_slice(&generated);
        self.previous = Some(PreviousTurn {
            n_messages: req.messages.len(),
            prompt_text,
            tokens: seen,
            ended,
        });
        Ok(completion)
    }
}

#[cfg(test)]
mod tests {
    use super::{Sampling, Transcript, sampling_params};

    #[test]
    fn every_sampling_setting_reaches_the_engine() {
        let s = Sampling {
            temperature: 0.7,
            top_p: 0.8,
            top_k: 12,
            seed: 9,
            repeat_penalty: 1.3,
            presence_penalty: 0.4,
        };
        let p = sampling_params(&s);
        assert_eq!((p.temperature, p.top_p, p.top_k, p.seed), (0.7, 0.8, 12, 9));
        assert_eq!((p.repeat_penalty, p.presence_penalty), (1.3, 0.4));
    }

    #[test]
    fn turns_extend_the_transcript_and_a_re_rendering_restarts_it() {
        let mut t = Transcript::default();
        t.record(&[1, 2, 3], &[4, 5]);
        // The next prompt holds everything so far, then the tool's output.
        t.record(&[1, 2, 3, 4, 5, 6, 7], &[8]);
        assert_eq!(t.tokens, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            t.generated,
            [false, false, false, true, true, false, false, true]
        );
        // A prompt that re-renders the earlier reply differently: nothing before it is the
        // model's any more.
        t.record(&[1, 2, 9, 9], &[10]);
        assert_eq!(t.tokens, [1, 2, 9, 9, 10]);
        assert_eq!(t.generated, [false, false, false, false, true]);
    }
}
