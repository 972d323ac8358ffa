//! The shapes that cross the JS boundary, OpenAI-style, as plain serde types: the worker
//! passes JSON-compatible objects in and gets them back, and the defaults and checks here are
//! unit-tested natively.

use lilypad_engine::models::ModelConfig;
use lilypad_engine::{AdapterSummary, DType, Draft, GpuContext, Model, ModelOptions};
use lilypad_lm::{Completion, FinishReason, Message, Sampling};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::error::WebError;

/// Most tokens one request may ask for when `max_tokens` is absent.
pub const DEFAULT_MAX_TOKENS: usize = 512;

/// How a model is loaded (all optional).
#[derive(Clone, Debug, Default, Deserialize, TS)]
#[ts(optional_fields)]
#[serde(default, deny_unknown_fields)]
pub struct LoadOptions {
    /// KV cache positions (default: the model's training context, at most 4096).
    pub context: Option<u32>,
    /// Cap on one weight buffer, below the adapter's binding limit (tests force splitting).
    pub max_chunk_bytes: Option<u64>,
    /// The KV cache's element type, "f16" (the default) or "f32".
    #[ts(type = "'f16' | 'f32'", optional)]
    pub kv_cache: Option<String>,
    /// What to call the adapter in messages: the browser describes it to the page (vendor,
    /// architecture), while wgpu gets no name for it.
    pub adapter_name: Option<String>,
    /// Speculative decoding (the same output, fewer steps when drafts are right): "lookup"
    /// or "lookup:N" drafts up to N tokens (default 4) from what followed the latest earlier
    /// occurrence of the last few tokens; "mtp" drafts one with Qwen3.5's
    /// multi-token-prediction layer (loaded for it).
    #[ts(type = "'mtp' | 'lookup' | `lookup:${number}`", optional)]
    pub draft: Option<String>,
}

impl LoadOptions {
    pub fn draft(&self) -> Result<Option<Draft>, WebError> {
        self.draft
            .as_deref()
            .map(|s| s.parse().map_err(WebError::request))
            .transpose()
    }

    pub fn kv_cache(&self) -> Result<DType, WebError> {
        match &self.kv_cache {
            None => Ok(ModelOptions::default().kv_cache),
            Some(s) => s.parse().map_err(WebError::request),
        }
    }
}

/// The sampling and length fields shared by chat and raw completions.
#[derive(Clone, Debug, Default, Deserialize, TS)]
#[ts(optional_fields)]
#[serde(default)]
pub struct GenerationParams {
    pub max_tokens: Option<usize>,
    /// OpenAI's default is 1; 0 is greedy.
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// 0 = off.
    pub top_k: Option<u32>,
    pub seed: Option<u64>,
    /// OpenAI's presence penalty: subtracted once from the logit of each of the last 64
    /// tokens (0 = off).
    pub presence_penalty: Option<f32>,
    /// llama.cpp's repetition penalty over the last 64 tokens (1 = off).
    pub repeat_penalty: Option<f32>,
}

impl GenerationParams {
    pub fn sampling(&self) -> Result<Sampling, WebError> {
        let s = Sampling {
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            top_k: self.top_k.unwrap_or(0),
            seed: self.seed.unwrap_or(0),
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            repeat_penalty: self.repeat_penalty.unwrap_or(1.0),
        };
        if !(s.temperature.is_finite() && s.temperature >= 0.0) {
            return Err(WebError::request(format!(
                "temperature {} must be ≥ 0",
                s.temperature
            )));
        }
        if !(s.top_p > 0.0 && s.top_p <= 1.0) {
            return Err(WebError::request(format!(
                "top_p {} must be in (0, 1]",
                s.top_p
            )));
        }
        if !(s.repeat_penalty > 0.0 && s.repeat_penalty.is_finite()) {
            return Err(WebError::request(format!(
                "repeat_penalty {} must be > 0",
                s.repeat_penalty
            )));
        }
        if !s.presence_penalty.is_finite() {
            return Err(WebError::request("presence_penalty must be finite"));
        }
        Ok(s)
    }

    pub fn max_tokens(&self) -> Result<usize, WebError> {
        match self.max_tokens {
            Some(0) => Err(WebError::request("max_tokens must be at least 1")),
            Some(n) => Ok(n),
            None => Ok(DEFAULT_MAX_TOKENS),
        }
    }
}

/// `chat.completions.create` minus the streaming flag, which the JS side handles.
#[derive(Clone, Debug, Deserialize, TS)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    #[serde(default)]
    #[ts(type = "unknown[]", optional)]
    pub tools: Vec<Value>,
    /// Qwen-style templates: whether the model may think before answering.
    #[serde(default)]
    #[ts(as = "Option<bool>", optional)]
    pub enable_thinking: bool,
    #[serde(flatten)]
    pub params: GenerationParams,
}

/// `completions.create`: a raw prompt, no chat template.
#[derive(Clone, Debug, Deserialize, TS)]
pub struct PromptRequest {
    pub prompt: String,
    #[serde(flatten)]
    pub params: GenerationParams,
}

#[derive(Clone, Debug, Serialize, TS)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    /// Prompt tokens evaluated now; the others came from the cached conversation.
    pub prefilled_tokens: usize,
}

#[derive(Clone, Debug, Serialize, TS)]
pub struct Timings {
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    /// Generated tokens a draft proposed and the model kept (`LoadOptions.draft`).
    pub draft_accepted: usize,
}

/// One finished generation: the JS side wraps it into OpenAI's completion objects.
#[derive(Clone, Debug, Serialize, TS)]
pub struct GenerationResult {
    pub text: String,
    pub finish_reason: StopReason,
    pub usage: Usage,
    pub timings: Timings,
    /// The generated ids, end-of-turn token excluded (raw prompts only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub tokens: Option<Vec<u32>>,
}

impl GenerationResult {
    pub fn new(c: &Completion, tokens: Option<Vec<u32>>) -> Self {
        // The first generated token comes out of the prefill step; decode speed counts the rest.
        let decoded = c.generated_tokens.saturating_sub(1);
        Self {
            text: c.text.clone(),
            finish_reason: finish_reason(c.finish),
            usage: Usage {
                prompt_tokens: c.prompt_tokens,
                completion_tokens: c.generated_tokens,
                total_tokens: c.prompt_tokens + c.generated_tokens,
                prefilled_tokens: c.prefilled_tokens,
            },
            timings: Timings {
                prefill_ms: c.prefill_ms,
                decode_ms: c.decode_ms,
                prefill_tokens_per_s: per_second(c.prefilled_tokens, c.prefill_ms),
                decode_tokens_per_s: per_second(decoded, c.decode_ms),
                draft_accepted: c.draft_accepted,
            },
            tokens,
        }
    }
}

fn per_second(n: usize, ms: f64) -> f64 {
    if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 }
}

/// OpenAI's names; an abort reads as "abort" so the page can tell it from a natural stop.
pub fn finish_reason(f: FinishReason) -> StopReason {
    match f {
        FinishReason::Stop => StopReason::Stop,
        FinishReason::Length | FinishReason::ContextFull => StopReason::Length,
        FinishReason::Aborted => StopReason::Abort,
    }
}

/// OpenAI's `finish_reason`, and "abort" for a request the page stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, TS)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    Stop,
    Length,
    Abort,
}

/// Load progress as the page sees it.
#[derive(Clone, Debug, Serialize, TS)]
pub struct UploadProgress {
    #[ts(type = "'upload'")]
    pub phase: &'static str,
    pub tensor: String,
    pub tensors_done: usize,
    pub tensors_total: usize,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// What `engine.info()` reports.
#[derive(Clone, Debug, Serialize, TS)]
pub struct EngineInfo {
    pub adapter: AdapterInfo,
    pub model: ModelInfo,
    /// The LoRA adapter in use (`null` when none).
    pub lora: Option<LoraInfo>,
}

/// A LoRA adapter applied to the model.
#[derive(Clone, Debug, PartialEq, Serialize, TS)]
pub struct LoraInfo {
    pub rank: usize,
    pub alpha: f32,
    /// What B·A is multiplied by: alpha / rank, or alpha / √rank with rsLoRA.
    pub scale: f32,
    /// The model's linear projections it adapts.
    pub linears: usize,
    /// `base_model_name_or_path` as the trainer recorded it.
    pub base_model: Option<String>,
}

#[derive(Clone, Debug, Serialize, TS)]
pub struct AdapterInfo {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub features: Vec<String>,
    pub max_storage_buffer_binding_size: u64,
    pub max_buffer_size: u64,
}

impl AdapterInfo {
    pub fn new(gpu: &GpuContext) -> Self {
        let AdapterSummary {
            name,
            backend,
            device_type,
            driver,
            subgroups,
            shader_f16,
            ..
        } = gpu.adapter.clone();
        let features = [(subgroups, "subgroups"), (shader_f16, "shader-f16")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| f.to_string())
            .collect();
        Self {
            name,
            backend,
            device_type,
            driver,
            features,
            max_storage_buffer_binding_size: gpu.limits.max_storage_buffer_binding_size,
            max_buffer_size: gpu.limits.max_buffer_size,
        }
    }
}

#[derive(Clone, Debug, Serialize, TS)]
pub struct ModelInfo {
    pub name: String,
    pub architecture: String,
    pub layers: u32,
    pub embedding: u32,
    pub vocab: u32,
    pub context: u32,
    pub parameters: u64,
    pub file_bytes: u64,
    /// GPU memory: weights, KV cache, activations.
    pub gpu_weights_bytes: u64,
    pub gpu_kv_cache_bytes: u64,
    /// The KV cache's element type ("f16" or "f32").
    #[ts(type = "'f16' | 'f32'")]
    pub kv_cache: &'static str,
    pub gpu_activation_bytes: u64,
    /// Speculative decoding's draft ("mtp", "lookup:N"), when one is set.
    pub draft: Option<String>,
}

impl ModelInfo {
    pub fn new(name: &str, model: &Model, parameters: u64, file_bytes: u64) -> Self {
        Self {
            name: name.to_string(),
            architecture: model.config.arch().to_string(),
            layers: match &model.config {
                ModelConfig::Llama(c) => c.n_layer,
                ModelConfig::Qwen35(c) => c.n_layer,
            },
            embedding: model.config.n_embd(),
            vocab: model.config.vocab(),
            context: model.context,
            parameters,
            file_bytes,
            gpu_weights_bytes: model.plan.weights,
            gpu_kv_cache_bytes: model.plan.kv_cache,
            kv_cache: model.kv_cache.name(),
            gpu_activation_bytes: model.plan.activations,
            draft: model.draft().map(|d| d.to_string()),
        }
    }
}

/// What the header of a (possibly partly downloaded) GGUF says, checked before the rest of it
/// is fetched: a file the engine cannot run fails in its first megabytes.
#[derive(Clone, Debug, Serialize, TS)]
pub struct HeaderInfo {
    pub architecture: String,
    pub tensors: usize,
    pub parameters: u64,
    /// Where tensor data starts: everything before it has been read.
    pub data_offset: u64,
    pub context_train: u32,
    pub chat_template: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(json: Value) -> Result<ChatRequest, serde_json::Error> {
        serde_json::from_value(json)
    }

    #[test]
    fn chat_requests_take_openai_fields_and_defaults() {
        let r = chat(serde_json::json!({
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0, "top_k": 20, "max_tokens": 8, "seed": 7,
            "tools": [{"type": "function", "function": {"name": "Read"}}]
        }))
        .unwrap();
        assert_eq!(r.messages[0].content, "hi");
        assert_eq!(r.tools.len(), 1);
        let s = r.params.sampling().unwrap();
        assert_eq!((s.temperature, s.top_p, s.top_k, s.seed), (0.0, 1.0, 20, 7));
        assert_eq!((s.repeat_penalty, s.presence_penalty), (1.0, 0.0));
        assert_eq!(r.params.max_tokens().unwrap(), 8);

        let r = chat(serde_json::json!({"messages": []})).unwrap();
        assert_eq!(r.params.sampling().unwrap().temperature, 1.0);
        assert_eq!(r.params.max_tokens().unwrap(), DEFAULT_MAX_TOKENS);
    }

    #[test]
    fn bad_parameters_are_request_errors() {
        let p = |json| {
            serde_json::from_value::<PromptRequest>(json)
                .unwrap()
                .params
        };
        let e = p(serde_json::json!({"prompt": "x", "top_p": 0}))
            .sampling()
            .unwrap_err();
        assert_eq!(e.code, "bad-request");
        assert!(e.message.contains("top_p"));
        assert!(
            p(serde_json::json!({"prompt": "x", "temperature": -1}))
                .sampling()
                .is_err()
        );
        let e = p(serde_json::json!({"prompt": "x", "repeat_penalty": 0}))
            .sampling()
            .unwrap_err();
        assert!(e.message.contains("repeat_penalty"), "{}", e.message);
        let s =
            p(serde_json::json!({"prompt": "x", "presence_penalty": 0.5, "repeat_penalty": 1.1}))
                .sampling()
                .unwrap();
        assert_eq!((s.repeat_penalty, s.presence_penalty), (1.1, 0.5));
        assert!(
            p(serde_json::json!({"prompt": "x", "max_tokens": 0}))
                .max_tokens()
                .is_err()
        );
        assert!(
            chat(serde_json::json!({"messages": [{"role": "wizard", "content": ""}]})).is_err()
        );
    }

    #[test]
    fn results_report_openai_usage_and_speeds() {
        let c = Completion {
            text: "Paris.".into(),
            finish: FinishReason::Stop,
            prompt_tokens: 20,
            prefilled_tokens: 15,
            generated_tokens: 5,
            prefill_ms: 500.0,
            decode_ms: 200.0,
            draft_accepted: 0,
        };
        let r = GenerationResult::new(&c, Some(vec![1, 2]));
        assert_eq!(r.finish_reason, StopReason::Stop);
        assert_eq!(r.usage.total_tokens, 25);
        assert_eq!(r.timings.prefill_tokens_per_s, 30.0);
        assert_eq!(r.timings.decode_tokens_per_s, 20.0);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["tokens"], serde_json::json!([1, 2]));
        let aborted = Completion {
            finish: FinishReason::Aborted,
            decode_ms: 0.0,
            ..c
        };
        let r = GenerationResult::new(&aborted, None);
        assert_eq!(r.finish_reason, StopReason::Abort);
        assert_eq!(r.timings.decode_tokens_per_s, 0.0);
        assert!(serde_json::to_value(&r).unwrap().get("tokens").is_none());
    }
}
