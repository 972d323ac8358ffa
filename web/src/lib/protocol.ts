/** Messages between the page (index.ts) and the engine's worker (worker.ts). */
import type { ErrorData } from './errors';

export type ModelSource = { kind: 'url'; url: string } | { kind: 'blob'; blob: Blob; name: string };

/** One file of a LoRA adapter: fetched by the worker, or read from a File / Blob. */
export type AdapterFileSource = { kind: 'url'; url: string } | { kind: 'blob'; blob: Blob };

/** A PEFT LoRA adapter's two files, resolved by index.ts (`resolveLora`). */
export interface LoraSource {
  /** `adapter_config.json` */
  config: AdapterFileSource;
  /** `adapter_model.safetensors` */
  weights: AdapterFileSource;
}

/** The LoRA adapter in use, as `engine.info().lora` and `engine.setLora()` report it. */
export interface LoraInfo {
  rank: number;
  alpha: number;
  /** What B·A is multiplied by: alpha / rank, or alpha / √rank with rsLoRA. */
  scale: number;
  /** How many of the model's linear projections it adapts. */
  linears: number;
  /** `base_model_name_or_path` from adapter_config.json. */
  base_model: string | null;
}

export interface LoadOptions {
  /** KV cache positions (default: the model's training context, at most 4096). */
  context?: number;
  /** Cap on one weight buffer in bytes (below the adapter's binding limit). */
  maxChunkBytes?: number;
  /** The KV cache's element type: 'f16' (the default) halves its memory, 'f32' keeps every bit. */
  kvCache?: 'f16' | 'f32';
  /** Bytes per HTTP Range request while downloading. */
  downloadChunkBytes?: number;
}

export type Progress =
  | { phase: 'download'; bytesDone: number; bytesTotal: number; fromCache: boolean; resumedFrom: number }
  | {
      phase: 'upload';
      tensor: string;
      tensorsDone: number;
      tensorsTotal: number;
      bytesDone: number;
      bytesTotal: number;
    }
  | { phase: 'ready'; fromCache: boolean; seconds: number };

/** How far the model has read a long prompt: `done` of the `total` tokens its cached state lacked. */
export interface PromptProgress {
  done: number;
  total: number;
}

/** What the engine's wasm side takes for a request (snake_case, as in OpenAI's API). */
export interface WireMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  reasoning_content?: string;
  tool_calls?: Array<{ name: string; arguments: unknown }>;
  name?: string;
}

export interface WireParams {
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  seed?: number;
}

export interface WireChatRequest extends WireParams {
  messages: WireMessage[];
  tools?: unknown[];
  enable_thinking?: boolean;
}

export interface WirePromptRequest extends WireParams {
  prompt: string;
}

export interface GenerationResult {
  text: string;
  finish_reason: 'stop' | 'length' | 'abort';
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number; prefilled_tokens: number };
  timings: { prefill_ms: number; decode_ms: number; prefill_tokens_per_s: number; decode_tokens_per_s: number };
  /** Raw completions only: the generated token ids. */
  tokens?: number[];
}

export type ToWorker =
  | { id: number; type: 'load'; source: ModelSource; options: LoadOptions; lora?: LoraSource }
  | { id: number; type: 'setLora'; lora: LoraSource | null }
  | { id: number; type: 'chat'; request: WireChatRequest }
  | { id: number; type: 'complete'; request: WirePromptRequest }
  | { id: number; type: 'info' | 'reset' | 'unload' }
  | { type: 'abort' }
  | { type: 'destroyDevice' }
  | { type: 'wasm'; module: WebAssembly.Module };

export type FromWorker =
  | { id: number; type: 'progress'; progress: Progress }
  | { id: number; type: 'text'; text: string }
  | { id: number; type: 'prompt'; progress: PromptProgress }
  | { id: number; type: 'result'; value: unknown }
  | { id: number; type: 'error'; error: ErrorData };
