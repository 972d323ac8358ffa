/**
 * lilypad's browser API, OpenAI-style:
 *
 *   const engine = await createEngine({ model: url, onProgress });
 *   for await (const chunk of await engine.chat.completions.create({ messages, stream: true }))
 *     output += chunk.choices[0].delta.content ?? '';
 *
 * A LoRA adapter (PEFT's format) goes on at load time (`createEngine({ model, lora })`) or later
 * (`engine.setLora(lora)`, `engine.setLora(null)` to remove it).
 *
 * The engine runs in a dedicated Web Worker (worker.ts); this module only passes messages.
 */
import type { CachedModel } from './cache';
import { LilypadError, errorData, toError } from './errors';
import { opfsStore } from './opfs';
import { type LoraAdapter, resolveLora } from './lora';
import type {
  ChatRequest, EngineInfo, FromWorker, GenerationParams, GenerationResult, LoadOptions, LoraInfo, LoraSource,
  ModelSource, Progress, PromptProgress, ToWorker, WireMessage,
} from './protocol';
import { cacheKey } from './ranges';

export { LilypadError } from './errors';
export type { ErrorCode } from './errors';
export type { CachedModel } from './cache';
export type { EngineInfo, GenerationResult, LoadOptions, LoraInfo, Progress, PromptProgress } from './protocol';
export type { AdapterFile, LoraAdapter } from './lora';
export { loraFromFiles } from './lora';

export interface CreateEngineOptions extends LoadOptions {
  /** A URL (downloaded with Range requests and cached in OPFS), or a local File / Blob. */
  model: string | URL | File | Blob;
  /**
   * A LoRA adapter in PEFT's format, trained on this model's Hugging Face checkpoint, put on the
   * model as it loads: the URL of its folder (`adapter_config.json` and
   * `adapter_model.safetensors` are fetched under it), or `{ config, weights }`, each a URL or a
   * local File / Blob (`loraFromFiles` finds them among picked files). Both files are read whole
   * (adapters are small), before the model. An adapter that does not fit the model fails with
   * code "bad-request"; a missing file with "not-found".
   */
  lora?: LoraAdapter;
  onProgress?: (p: Progress) => void;
  /** Cancels the download or upload; createEngine then rejects with code "aborted". */
  signal?: AbortSignal;
  /**
   * Starts the engine's worker, for pages whose workers cannot load it from the page's origin
   * (editor webviews). Such a page posts `{ type: 'wasm', module }` to the new worker first.
   */
  startWorker?: () => Worker;
}

/** OpenAI chat messages; `content` may also be an array of text parts. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null | Array<{ type: 'text'; text: string }>;
  reasoning_content?: string;
  tool_calls?: Array<{ id?: string; type?: 'function'; function: { name: string; arguments: string } }>;
  name?: string;
  tool_call_id?: string;
}

/**
 * Length and sampling: `max_tokens`, `temperature` (0 is greedy; default 1), `top_p`, `top_k`
 * (0 = off), `seed`, `presence_penalty` and `repeat_penalty` (over the last 64 tokens).
 */
export type SamplingOptions = GenerationParams;

/** Options of a request that are not sent to the model. */
export interface RequestHooks {
  /**
   * Called after each step of a long prompt (tokens the engine's cached conversation did not
   * hold): `{ done, total }`. A prompt of a few dozen tokens takes one step and reports once.
   * `engine.abort()` takes effect at the next report.
   */
  onPromptProgress?: (p: PromptProgress) => void;
}

export interface ChatCompletionRequest extends SamplingOptions, RequestHooks {
  messages: ChatMessage[];
  /** OpenAI function schemas, shown to the model through its chat template. */
  tools?: unknown[];
  stream?: boolean;
  enable_thinking?: boolean;
}

export interface CompletionRequest extends SamplingOptions, RequestHooks {
  /** Raw text; special tokens written in it (`<|im_start|>`) are parsed. No chat template. */
  prompt: string;
  stream?: boolean;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prefilled_tokens: number;
}

export type Timings = GenerationResult['timings'];

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{
    index: 0;
    message: { role: 'assistant'; content: string };
    finish_reason: GenerationResult['finish_reason'];
  }>;
  usage: Usage;
  timings: Timings;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: 0;
    delta: { role?: 'assistant'; content?: string };
    finish_reason: GenerationResult['finish_reason'] | null;
  }>;
  /** On the last chunk only. */
  usage?: Usage;
  timings?: Timings;
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: Array<{ index: 0; text: string; finish_reason: GenerationResult['finish_reason'] }>;
  usage: Usage;
  timings: Timings;
  /** The generated token ids (end-of-turn token excluded). */
  tokens: number[];
}

export interface CompletionChunk {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: Array<{ index: 0; text: string; finish_reason: GenerationResult['finish_reason'] | null }>;
  usage?: Usage;
  timings?: Timings;
  tokens?: number[];
}

/** OpenAI's message shapes to the engine's: text parts joined, tool arguments parsed. */
export function toWireMessages(messages: ChatMessage[]): WireMessage[] {
  return messages.map((m) => {
    const content = Array.isArray(m.content) ? m.content.map((p) => p.text).join('') : (m.content ?? '');
    const out: WireMessage = { role: m.role, content };
    if (m.reasoning_content) out.reasoning_content = m.reasoning_content;
    if (m.name) out.name = m.name;
    if (m.tool_calls?.length) {
      out.tool_calls = m.tool_calls.map((c) => {
        let args: unknown;
        try {
          args = JSON.parse(c.function.arguments || '{}');
        } catch {
          throw new LilypadError('bad-request', `tool call ${c.function.name}: arguments are not JSON`);
        }
        return { name: c.function.name, arguments: args };
      });
    }
    return out;
  });
}

/** Drops undefined fields: the engine's strict parser reads a present `undefined` as an error. */
function compact<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

function wireParams(r: SamplingOptions): GenerationParams {
  const { max_tokens, temperature, top_p, top_k, seed, presence_penalty, repeat_penalty } = r;
  return compact({ max_tokens, temperature, top_p, top_k, seed, presence_penalty, repeat_penalty });
}

/** A queue that one side fills and an async iterator drains. */
class Channel<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private waiting?: () => void;
  private done = false;
  private error?: unknown;

  push(item: T) {
    this.items.push(item);
    this.wake();
  }
  close(error?: unknown) {
    this.done = true;
    this.error = error;
    this.wake();
  }
  private wake() {
    this.waiting?.();
    this.waiting = undefined;
  }
  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      const item = this.items.shift();
      if (item !== undefined) {
        yield item;
      } else if (this.done) {
        if (this.error) throw this.error;
        return;
      } else {
        await new Promise<void>((resolve) => (this.waiting = resolve));
      }
    }
  }
}

interface Pending {
  resolve(value: unknown): void;
  reject(error: unknown): void;
  onText?(text: string): void;
  onProgress?(p: Progress): void;
  onPrompt?(p: PromptProgress): void;
}

/** A worker request before it gets its id. */
type Request = Exclude<ToWorker, { type: 'abort' | 'destroyDevice' }> extends infer T ? (T extends unknown ? Omit<T, 'id'> : never) : never;

let nextId = 1;
const newId = (prefix: string) => `${prefix}-${Date.now().toString(36)}${(nextId++).toString(36)}`;

export class Engine {
  readonly chat = {
    completions: {
      create: ((req: ChatCompletionRequest) => this.createChat(req)) as {
        (req: ChatCompletionRequest & { stream: true }): Promise<AsyncIterable<ChatCompletionChunk>>;
        (req: ChatCompletionRequest & { stream?: false }): Promise<ChatCompletion>;
        (req: ChatCompletionRequest): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
      },
    },
  };

  /** Raw-prompt completions (no chat template). */
  readonly completions = {
    create: ((req: CompletionRequest) => this.createCompletion(req)) as {
      (req: CompletionRequest & { stream: true }): Promise<AsyncIterable<CompletionChunk>>;
      (req: CompletionRequest & { stream?: false }): Promise<Completion>;
      (req: CompletionRequest): Promise<Completion | AsyncIterable<CompletionChunk>>;
    },
  };

  private pending = new Map<number, Pending>();
  private lastId = 0;
  private modelName = '';
  private loadedInfo?: EngineInfo;

  /** Use createEngine(). */
  constructor(private worker: Worker) {
    worker.onmessage = (e: MessageEvent<FromWorker>) => this.receive(e.data);
    worker.onerror = (e) => this.failAll(new LilypadError('internal', `the engine worker failed: ${e.message}`));
  }

  private receive(m: FromWorker) {
    const p = this.pending.get(m.id);
    if (!p) return;
    switch (m.type) {
      case 'progress':
        p.onProgress?.(m.progress);
        break;
      case 'text':
        p.onText?.(m.text);
        break;
      case 'prompt':
        p.onPrompt?.(m.progress);
        break;
      case 'result':
        this.pending.delete(m.id);
        p.resolve(m.value);
        break;
      case 'error':
        this.pending.delete(m.id);
        p.reject(toError(m.error));
        break;
    }
  }

  private failAll(error: LilypadError) {
    for (const p of this.pending.values()) p.reject(error);
    this.pending.clear();
  }

  private call(message: Request, hooks: Partial<Pending> = {}): Promise<unknown> {
    const id = ++this.lastId;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, ...hooks });
      this.worker.postMessage({ ...message, id } as ToWorker);
    });
  }

  /** @internal */
  async load(source: ModelSource, options: LoadOptions, onProgress?: (p: Progress) => void, lora?: LoraSource) {
    this.loadedInfo = (await this.call({ type: 'load', source, options, ...(lora && { lora }) }, { onProgress })) as EngineInfo;
    this.modelName = this.loadedInfo.model.name;
  }

  private async run<T>(
    type: 'chat' | 'complete',
    request: object,
    hooks: RequestHooks & { stream?: boolean },
    chunk: (text: string | null, result?: GenerationResult) => T,
  ): Promise<GenerationResult | AsyncIterable<T>> {
    const onPrompt = hooks.onPromptProgress;
    if (!hooks.stream) return (await this.call({ type, request } as Request, { onPrompt })) as GenerationResult;
    const channel = new Channel<T>();
    this.call({ type, request } as Request, { onPrompt, onText: (text) => channel.push(chunk(text)) }).then(
      (result) => {
        channel.push(chunk(null, result as GenerationResult));
        channel.close();
      },
      (error) => channel.close(error),
    );
    return channel;
  }

  private async createChat(req: ChatCompletionRequest) {
    const id = newId('chatcmpl');
    const created = Math.floor(Date.now() / 1000);
    const model = this.modelName;
    const request: ChatRequest = compact({
      messages: toWireMessages(req.messages),
      tools: req.tools,
      enable_thinking: req.enable_thinking,
      ...wireParams(req),
    });
    let first = true;
    const out = await this.run('chat', request, req, (text, result): ChatCompletionChunk => {
      const delta: ChatCompletionChunk['choices'][0]['delta'] = text === null ? {} : { content: text };
      if (first) delta.role = 'assistant';
      first = false;
      return {
        id, object: 'chat.completion.chunk', created, model,
        choices: [{ index: 0, delta, finish_reason: result?.finish_reason ?? null }],
        ...(result && { usage: result.usage, timings: result.timings }),
      };
    });
    if (Symbol.asyncIterator in out) return out;
    return {
      id, object: 'chat.completion', created, model,
      choices: [{ index: 0, message: { role: 'assistant', content: out.text }, finish_reason: out.finish_reason }],
      usage: out.usage,
      timings: out.timings,
    } satisfies ChatCompletion;
  }

  private async createCompletion(req: CompletionRequest) {
    const id = newId('cmpl');
    const created = Math.floor(Date.now() / 1000);
    const model = this.modelName;
    const out = await this.run('complete', { prompt: req.prompt, ...wireParams(req) }, req,
      (text, result): CompletionChunk => ({
        id, object: 'text_completion', created, model,
        choices: [{ index: 0, text: text ?? '', finish_reason: result?.finish_reason ?? null }],
        ...(result && { usage: result.usage, timings: result.timings, tokens: result.tokens }),
      }));
    if (Symbol.asyncIterator in out) return out;
    return {
      id, object: 'text_completion', created, model,
      choices: [{ index: 0, text: out.text, finish_reason: out.finish_reason }],
      usage: out.usage,
      timings: out.timings,
      tokens: out.tokens ?? [],
    } satisfies Completion;
  }

  /**
   * Stops the running download or generation, also while it reads its prompt (at the end of
   * the prompt's current step); a generation resolves with finish_reason "abort".
   */
  abort(): void {
    this.worker.postMessage({ type: 'abort' } satisfies ToWorker);
  }

  /**
   * Destroys the engine's GPU device, as a driver reset or the browser reclaiming the GPU
   * would: a running generation and later requests fail with code "device-lost" until the
   * model is loaded again. For testing an application's recovery.
   */
  destroyDevice(): void {
    this.worker.postMessage({ type: 'destroyDevice' } satisfies ToWorker);
  }

  /** Adapter (name, features, limits), model shape and GPU memory. */
  async info(): Promise<EngineInfo> {
    return (await this.call({ type: 'info' })) as EngineInfo;
  }

  /**
   * Puts a LoRA adapter on the model in place of the one in use (same forms as
   * `createEngine`'s `lora`), or removes it with `null`. Resolves to the adapter's info, or null
   * once removed. The conversation kept between chat requests is forgotten. An adapter that does
   * not fit the model rejects with code "bad-request" and leaves the model as it was; while a
   * request is running it rejects with code "busy".
   */
  async setLora(lora: LoraAdapter | null): Promise<LoraInfo | null> {
    const source = lora === null ? null : resolveLora(lora);
    return (await this.call({ type: 'setLora', lora: source })) as LoraInfo | null;
  }

  /** Forgets the conversation kept between chat requests. */
  async reset(): Promise<void> {
    await this.call({ type: 'reset' });
  }

  /** Frees the GPU memory and ends the worker; the engine cannot be used afterwards. */
  async unload(): Promise<void> {
    try {
      await this.call({ type: 'unload' });
    } finally {
      this.worker.terminate();
      this.failAll(new LilypadError('unloaded', 'the engine was unloaded'));
    }
  }
}

/** Starts a worker, loads `model` into it and resolves once it is ready to generate. */
export async function createEngine(options: CreateEngineOptions): Promise<Engine> {
  if (!('gpu' in navigator)) {
    throw new LilypadError('no-webgpu', 'this browser has no WebGPU (navigator.gpu is missing); use a recent Chrome, Edge or Safari');
  }
  const { model, lora, onProgress, signal, startWorker, ...load } = options;
  const loraSource = lora == null ? undefined : resolveLora(lora);
  const source: ModelSource =
    typeof model === 'string' || model instanceof URL
      ? { kind: 'url', url: new URL(model, location.href).href }
      : { kind: 'blob', blob: model, name: model instanceof File ? model.name : 'model.gguf' };
  const worker = startWorker?.() ?? new Worker(new URL('./worker.ts', import.meta.url), { type: 'module', name: 'lilypad-engine' });
  const engine = new Engine(worker);
  const abort = () => engine.abort();
  signal?.addEventListener('abort', abort);
  try {
    signal?.throwIfAborted();
    await engine.load(source, load, onProgress, loraSource);
  } catch (e) {
    worker.terminate();
    throw e instanceof LilypadError ? e : toError(errorData(e));
  } finally {
    signal?.removeEventListener('abort', abort);
  }
  return engine;
}

/** Models in the browser's cache, newest first (partial downloads have `complete: false`). */
export function listCachedModels(): Promise<CachedModel[]> {
  return opfsStore.list();
}

export { deletePromptStates, promptStatesUsage } from './prompt-states';

/** Deletes a cached model by its URL. */
export async function deleteCachedModel(url: string): Promise<void> {
  await opfsStore.remove(await cacheKey(new URL(url, location.href).href));
}
