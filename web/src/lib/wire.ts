// Generated from the Rust types in crates/wasm/src/api.rs and crates/lm: do not edit.
// LILYPAD_UPDATE_TS=1 cargo test -p lilypad-tests --test typescript writes this file again.

export type Role = "system" | "user" | "assistant" | "tool";

/**
 * One call of a tool, as the model wrote it.
 */
export type ToolCall = {
  name: string;
  arguments: unknown;
};

export type Message = {
  role: Role;
  content: string;
  /**
   * The assistant's thinking (`<think>…</think>`), kept so later turns render it back and
   * the model's cached state stays valid.
   */
  reasoning_content?: string;
  tool_calls?: Array<ToolCall>;
  /**
   * For tool results: which tool produced it.
   */
  name?: string;
};

export type Sampling = {
  temperature: number;
  top_p: number;
  top_k: number;
  seed: number;
  /**
   * 1 = off; llama.cpp's repetition penalty over the recent tokens.
   */
  repeat_penalty: number;
  /**
   * 0 = off; subtracted once from each recent token's logit.
   */
  presence_penalty: number;
};

export type FinishReason = "stop" | "length" | "context_full" | "aborted";

export type Completion = {
  /**
   * The raw text the model generated (thinking and tool calls included, end token excluded).
   */
  text: string;
  finish: FinishReason;
  /**
   * Length of the rendered prompt in tokens.
   */
  prompt_tokens: number;
  /**
   * Prompt tokens evaluated for this call; the rest came from the model's cached state.
   */
  prefilled_tokens: number;
  generated_tokens: number;
  prefill_ms: number;
  decode_ms: number;
  /**
   * Generated tokens that a draft proposed and the model kept (speculative decoding): the
   * generation took `generated_tokens - draft_accepted` steps of the model.
   */
  draft_accepted?: number;
};

/**
 * How a model is loaded (all optional).
 */
export type LoadOptions = {
  /**
   * KV cache positions (default: the model's training context, at most 4096).
   */
  context?: number;
  /**
   * Cap on one weight buffer, below the adapter's binding limit (tests force splitting).
   */
  max_chunk_bytes?: number;
  /**
   * The KV cache's element type, "f16" (the default) or "f32".
   */
  kv_cache?: 'f16' | 'f32';
  /**
   * What to call the adapter in messages: the browser describes it to the page (vendor,
   * architecture), while wgpu gets no name for it.
   */
  adapter_name?: string;
  /**
   * Speculative decoding (the same output, fewer steps when drafts are right): "lookup"
   * or "lookup:N" drafts up to N tokens (default 4) from what followed the latest earlier
   * occurrence of the last few tokens; "mtp" drafts one with Qwen3.5's
   * multi-token-prediction layer (loaded for it).
   */
  draft?: 'mtp' | 'lookup' | `lookup:${number}`;
};

/**
 * The sampling and length fields shared by chat and raw completions.
 */
export type GenerationParams = {
  max_tokens?: number;
  /**
   * OpenAI's default is 1; 0 is greedy.
   */
  temperature?: number;
  top_p?: number;
  /**
   * 0 = off.
   */
  top_k?: number;
  seed?: number;
  /**
   * OpenAI's presence penalty: subtracted once from the logit of each of the last 64
   * tokens (0 = off).
   */
  presence_penalty?: number;
  /**
   * llama.cpp's repetition penalty over the last 64 tokens (1 = off).
   */
  repeat_penalty?: number;
};

/**
 * `chat.completions.create` minus the streaming flag, which the JS side handles.
 */
export type ChatRequest = {
  messages: Array<Message>;
  tools?: unknown[];
  /**
   * Qwen-style templates: whether the model may think before answering.
   */
  enable_thinking?: boolean;
  max_tokens?: number;
  /**
   * OpenAI's default is 1; 0 is greedy.
   */
  temperature?: number;
  top_p?: number;
  /**
   * 0 = off.
   */
  top_k?: number;
  seed?: number;
  /**
   * OpenAI's presence penalty: subtracted once from the logit of each of the last 64
   * tokens (0 = off).
   */
  presence_penalty?: number;
  /**
   * llama.cpp's repetition penalty over the last 64 tokens (1 = off).
   */
  repeat_penalty?: number;
};

/**
 * `completions.create`: a raw prompt, no chat template.
 */
export type PromptRequest = {
  prompt: string;
  max_tokens?: number;
  /**
   * OpenAI's default is 1; 0 is greedy.
   */
  temperature?: number;
  top_p?: number;
  /**
   * 0 = off.
   */
  top_k?: number;
  seed?: number;
  /**
   * OpenAI's presence penalty: subtracted once from the logit of each of the last 64
   * tokens (0 = off).
   */
  presence_penalty?: number;
  /**
   * llama.cpp's repetition penalty over the last 64 tokens (1 = off).
   */
  repeat_penalty?: number;
};

/**
 * OpenAI's `finish_reason`, and "abort" for a request the page stopped.
 */
export type StopReason = "stop" | "length" | "abort";

export type Usage = {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /**
   * Prompt tokens evaluated now; the others came from the cached conversation.
   */
  prefilled_tokens: number;
};

export type Timings = {
  prefill_ms: number;
  decode_ms: number;
  prefill_tokens_per_s: number;
  decode_tokens_per_s: number;
  /**
   * Generated tokens a draft proposed and the model kept (`LoadOptions.draft`).
   */
  draft_accepted: number;
};

/**
 * One finished generation: the JS side wraps it into OpenAI's completion objects.
 */
export type GenerationResult = {
  text: string;
  finish_reason: StopReason;
  usage: Usage;
  timings: Timings;
  /**
   * The generated ids, end-of-turn token excluded (raw prompts only).
   */
  tokens?: Array<number>;
};

/**
 * Load progress as the page sees it.
 */
export type UploadProgress = {
  phase: 'upload';
  tensor: string;
  tensors_done: number;
  tensors_total: number;
  bytes_done: number;
  bytes_total: number;
};

/**
 * A LoRA adapter applied to the model.
 */
export type LoraInfo = {
  rank: number;
  alpha: number;
  /**
   * What B·A is multiplied by: alpha / rank, or alpha / √rank with rsLoRA.
   */
  scale: number;
  /**
   * The model's linear projections it adapts.
   */
  linears: number;
  /**
   * `base_model_name_or_path` as the trainer recorded it.
   */
  base_model: string | null;
};

export type AdapterInfo = {
  name: string;
  backend: string;
  device_type: string;
  driver: string;
  features: Array<string>;
  max_storage_buffer_binding_size: number;
  max_buffer_size: number;
};

export type ModelInfo = {
  name: string;
  architecture: string;
  layers: number;
  embedding: number;
  vocab: number;
  context: number;
  parameters: number;
  file_bytes: number;
  /**
   * GPU memory: weights, KV cache, activations.
   */
  gpu_weights_bytes: number;
  gpu_kv_cache_bytes: number;
  /**
   * The KV cache's element type ("f16" or "f32").
   */
  kv_cache: 'f16' | 'f32';
  gpu_activation_bytes: number;
  /**
   * Speculative decoding's draft ("mtp", "lookup:N"), when one is set.
   */
  draft: string | null;
};

/**
 * What `engine.info()` reports.
 */
export type EngineInfo = {
  adapter: AdapterInfo;
  model: ModelInfo;
  /**
   * The LoRA adapter in use (`null` when none).
   */
  lora: LoraInfo | null;
};

/**
 * What the header of a (possibly partly downloaded) GGUF says, checked before the rest of it
 * is fetched: a file the engine cannot run fails in its first megabytes.
 */
export type HeaderInfo = {
  architecture: string;
  tensors: number;
  parameters: number;
  /**
   * Where tensor data starts: everything before it has been read.
   */
  data_offset: number;
  context_train: number;
  chat_template: boolean;
};
