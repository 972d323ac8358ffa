//! Continuous batching over a model's sequence slots: requests join whenever a slot is
//! free, every step decodes one token of each running sequence together
//! ([`Model::sample_batch`]), and a sequence leaves — freeing its slot — when it stops. A
//! group of samples of one prompt (GRPO's group, best-of-k) evaluates the prompt once and
//! forks its state into the other slots.

use std::collections::VecDeque;

use crate::error::{EngineError, Result};
use crate::model::{BatchToken, Logits, Model};
use crate::ops::sample::{Rng, SamplingParams};

/// Identifies a request submitted to a [`Batch`], in submission order.
pub type RequestId = usize;

/// What a [`Batch`] step produced for one request.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchEvent {
    /// The request's next token.
    Token { request: RequestId, token: u32 },
    /// The request ended (a stop token, its token limit, or the context is full); its slot
    /// is free.
    Done {
        request: RequestId,
        reason: DoneReason,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoneReason {
    Stop,
    MaxTokens,
    ContextFull,
}

struct Request {
    id: RequestId,
    prompt: Vec<u32>,
    params: SamplingParams,
    rng: Rng,
    max_tokens: usize,
    /// Members of one group after the first start from the first one's prompt state.
    fork_of: Option<RequestId>,
}

struct Running {
    req: Request,
    slot: u32,
    /// Prompt and generated tokens (the penalties' history).
    history: Vec<u32>,
    generated: usize,
    /// The token to feed next.
    next: u32,
}

/// A continuous batch over `model`'s sequence slots ([`crate::ModelOptions::sequences`]).
pub struct Batch<'m> {
    model: &'m mut Model,
    queue: VecDeque<Request>,
    running: Vec<Running>,
    next_id: RequestId,
    is_stop: Box<dyn Fn(u32) -> bool + 'm>,
}

impl<'m> Batch<'m> {
    /// A batch that ends a sequence after a token for which `is_stop` is true.
    pub fn new(model: &'m mut Model, is_stop: impl Fn(u32) -> bool + 'm) -> Self {
        for seq in 0..model.sequences() {
            model.release(seq);
        }
        Self {
            model,
            queue: VecDeque::new(),
            running: Vec::new(),
            next_id: 0,
            is_stop: Box::new(is_stop),
        }
    }

    /// Queues a request: up to `max_tokens` tokens after `prompt`, sampled with `params`
    /// (its seed starts the request's own random stream).
    pub fn submit(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        max_tokens: usize,
    ) -> Result<RequestId> {
        Ok(self.submit_group(prompt, 1, params, max_tokens)?[0])
    }

    /// Queues `n` samples of one prompt: the prompt is evaluated once, and member i samples
    /// with seed `params.seed + i`.
    pub fn submit_group(
        &mut self,
        prompt: &[u32],
        n: usize,
        params: &SamplingParams,
        max_tokens: usize,
    ) -> Result<Vec<RequestId>> {
        params.validate()?;
        self.model.check_prompt(prompt)?;
        if n == 0 || n > self.model.sequences() as usize {
            return Err(EngineError::Sequence(format!(
                "a group of {n} needs {n} sequence slots at once; the model has {}",
                self.model.sequences()
            )));
        }
        let first = self.next_id;
        let ids: Vec<RequestId> = (first..first + n).collect();
        for (i, &id) in ids.iter().enumerate() {
            let params = SamplingParams {
                seed: params.seed.wrapping_add(i as u64),
                ..params.clone()
            };
            self.queue.push_back(Request {
                id,
                prompt: prompt.to_vec(),
                rng: Rng::new(params.seed),
                params,
                max_tokens,
                fork_of: (i > 0).then_some(first),
            });
        }
        self.next_id += n;
        Ok(ids)
    }

    /// Requests running or waiting.
    pub fn pending(&self) -> usize {
        self.queue.len() + self.running.len()
    }

    /// Admits waiting requests into free slots (a group only when all its members fit),
    /// then decodes one token of every running sequence in one step.
    pub async fn step(&mut self) -> Result<Vec<BatchEvent>> {
        let mut events = Vec::new();
        self.admit().await?;
        if self.running.is_empty() {
            return Ok(events);
        }
        let us: Vec<f32> = self
            .running
            .iter_mut()
            .map(|r| {
                if r.req.params.is_greedy() {
                    0.0
                } else {
                    r.req.rng.next_f32()
                }
            })
            .collect();
        let items: Vec<BatchToken> = self
            .running
            .iter()
            .zip(&us)
            .map(|(r, &u)| BatchToken {
                seq: r.slot,
                token: r.next,
                params: &r.req.params,
                u,
                history: &r.history,
            })
            .collect();
        let sampled = self.model.sample_batch(&items).await?;
        let context = self.model.context as usize;
        let mut still = Vec::with_capacity(self.running.len());
        for (mut r, token) in self.running.drain(..).zip(sampled) {
            events.push(BatchEvent::Token {
                request: r.req.id,
                token,
            });
            r.history.push(token);
            r.generated += 1;
            r.next = token;
            let reason = if (self.is_stop)(token) {
                Some(DoneReason::Stop)
            } else if r.generated >= r.req.max_tokens {
                Some(DoneReason::MaxTokens)
            } else if self.model.sequence_tokens(r.slot).len() + 1 > context {
                Some(DoneReason::ContextFull)
            } else {
                None
            };
            match reason {
                Some(reason) => {
                    self.model.release(r.slot);
                    events.push(BatchEvent::Done {
                        request: r.req.id,
                        reason,
                    });
                }
                None => still.push(r),
            }
        }
        self.running = still;
        Ok(events)
    }

    /// Moves queued requests into free slots, evaluating their prompts (all but the last
    /// token, which the next decode step feeds) or forking a group's first member.
    async fn admit(&mut self) -> Result<()> {
        loop {
            let Some(front) = self.queue.front() else {
                return Ok(());
            };
            let group = self
                .queue
                .iter()
                .take_while(|r| r.id == front.id || r.fork_of == Some(front.id))
                .count();
            let free = self.free_slots();
            if free.len() < group {
                return Ok(());
            }
            for slot in free.into_iter().take(group) {
                let req = self.queue.pop_front().expect("counted above");
                let (head, last) = req.prompt.split_at(req.prompt.len() - 1);
                match req
                    .fork_of
                    .and_then(|f| self.running.iter().find(|r| r.req.id == f))
                {
                    Some(first) => self.model.fork(first.slot, slot)?,
                    None if !head.is_empty() => {
                        self.model.eval_sequence(slot, head, Logits::None).await?;
                    }
                    None => {}
                }
                self.running.push(Running {
                    slot,
                    history: req.prompt.clone(),
                    generated: 0,
                    next: last[0],
                    req,
                });
            }
        }
    }

    fn free_slots(&self) -> Vec<u32> {
        (0..self.model.sequences())
            .filter(|s| !self.running.iter().any(|r| r.slot == *s))
            .collect()
    }
}
