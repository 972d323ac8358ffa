/** Messages between the page (index.ts) and the engine's worker (worker.ts). */
import type { ErrorData } from './errors';
import type { ChatRequest, PromptRequest } from './wire';

// The shapes the engine's wasm side takes and returns, generated from its Rust types.
export type {
  ChatRequest,
  EngineInfo,
  GenerationParams,
  GenerationResult,
  LoraInfo,
  Message as WireMessage,
  PromptRequest,
  UploadProgress,
} from './wire';

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

export interface LoadOptions {
  /** KV cache positions (default: the model's training context, at most 4096). */
  context?: number;
  /** Cap on one weight buffer in bytes (below the adapter's binding limit). */
  maxChunkBytes?: number;
  /** The KV cache's element type: 'f16' (the default) halves its memory, 'f32' keeps every bit. */
  kvCache?: 'f16' | 'f32';
  /**
   * Speculative decoding: the same output, fewer steps when drafts are right. 'lookup' or
   * 'lookup:N' drafts up to N tokens (default 4) from what followed the latest earlier
   * occurrence of the last few tokens (edits and quotations of the context); 'mtp' drafts one
   * with Qwen3.5's multi-token-prediction layer.
   */
  draft?: 'mtp' | 'lookup' | `lookup:${number}`;
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

export type ToWorker =
  | { id: number; type: 'load'; source: ModelSource; options: LoadOptions; lora?: LoraSource }
  | { id: number; type: 'setLora'; lora: LoraSource | null }
  | { id: number; type: 'chat'; request: ChatRequest }
  | { id: number; type: 'complete'; request: PromptRequest }
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
