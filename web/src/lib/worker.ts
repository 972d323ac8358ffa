/**
 * The engine's dedicated worker: it owns the wasm module, the WebGPU device and the model, so
 * the page never blocks. Requests arrive one at a time from index.ts; text streams back as it
 * is decoded, and an `abort` message stops a download, or a generation between two tokens or two
 * steps of its prompt.
 * A LoRA adapter's two files are read whole here (they are small) and handed to the engine.
 */
import init, { type Engine, inspectHeader, loadEngine } from '../wasm/lilypad_wasm.js';
import { type SyncFile, fetchModel } from './cache';
import { LilypadError, errorData } from './errors';
import { opfsStore } from './opfs';
import { readLoraFiles } from './lora';
import { openPromptStates } from './prompt-states';
import type {
  EngineInfo, FromWorker, LoadOptions, LoraSource, ModelSource, Progress, ToWorker, UploadProgress,
} from './protocol';
import type { LoadOptions as WireLoadOptions } from './wire';
import { type ModelReader, blobReader, fileReader } from './readers';

/**
 * The wasm module, fetched beside this script on first use, or handed over by a page whose
 * workers cannot fetch the extension's files (a `wasm` message, before any request).
 */
let ready: Promise<unknown> | undefined;
let engine: Engine | undefined;
let aborted = false;
let download: AbortController | undefined;

const post = (m: FromWorker) => postMessage(m);

/** The browser's adapter description; throws a LilypadError when there is no adapter. */
async function requireWebGpu(): Promise<GPUAdapterInfo> {
  const gpu = (navigator as Navigator & { gpu?: GPU }).gpu;
  if (!gpu) {
    throw new LilypadError('no-webgpu', 'this browser has no WebGPU (navigator.gpu is missing); use a recent Chrome, Edge or Safari');
  }
  const adapter = await gpu.requestAdapter();
  if (!adapter) {
    throw new LilypadError('no-webgpu', 'WebGPU is present but offers no adapter (it may be disabled or blocklisted for this GPU)');
  }
  return adapter.info;
}

async function load(id: number, source: ModelSource, options: LoadOptions, lora?: LoraSource): Promise<unknown> {
  const started = performance.now();
  const progress = (p: Progress) => post({ id, type: 'progress', progress: p });
  await (ready ??= init());
  const adapter = await requireWebGpu();
  engine?.unload();
  engine = undefined;
  download = new AbortController();
  // Before the model: a missing adapter fails in a moment, not after a long download.
  const loraFiles = lora && (await readLoraFiles(lora, { signal: download.signal }));

  let reader: ModelReader;
  let file: SyncFile | undefined;
  let fromCache = false;
  let name: string;
  if (source.kind === 'url') {
    const got = await fetchModel({
      url: source.url,
      store: opfsStore,
      signal: download.signal,
      chunkBytes: options.downloadChunkBytes,
      onProgress: progress,
      // Parse the header as soon as it is in: a file that can never load fails now.
      checkHeader: (f, available, size) => inspectHeader(fileReader(f, size, () => available)) !== null,
    });
    file = got.file;
    fromCache = got.fromCache;
    reader = fileReader(file, got.entry.size);
    name = decodeURIComponent(new URL(source.url, location.href).pathname.split('/').pop() || source.url);
  } else {
    reader = blobReader(source.blob);
    name = source.name;
  }
  try {
    engine = await loadEngine(
      reader,
      name,
      {
        context: options.context,
        max_chunk_bytes: options.maxChunkBytes,
        kv_cache: options.kvCache,
        draft: options.draft,
        adapter_name: [adapter.vendor, adapter.architecture, adapter.description].filter(Boolean).join(' ') || undefined,
      } satisfies WireLoadOptions,
      (p: UploadProgress) =>
        progress({
          phase: 'upload',
          tensor: p.tensor,
          tensorsDone: p.tensors_done,
          tensorsTotal: p.tensors_total,
          bytesDone: p.bytes_done,
          bytesTotal: p.bytes_total,
        }),
      loraFiles?.config,
      loraFiles?.weights,
    );
  } finally {
    // The weights are on the GPU now; release the file so the page may delete it.
    file?.close();
  }
  // Openings computed before (in an earlier visit too) are read instead of evaluated again.
  engine.setPromptStateStore(await openPromptStates());
  progress({ phase: 'ready', fromCache, seconds: (performance.now() - started) / 1e3 });
  return loaded().info() as EngineInfo;
}

/** Puts the adapter on the loaded model, or removes it (null); returns its info. */
async function setLora(lora: LoraSource | null): Promise<unknown> {
  const model = loaded();
  download = new AbortController();
  const files = lora && (await readLoraFiles(lora, { signal: download.signal }));
  return model.setLora(files?.config ?? null, files?.weights ?? null);
}

function loaded(): Engine {
  if (!engine) throw new LilypadError('unloaded', 'no model is loaded');
  return engine;
}

const streamText = (id: number) => (text: string) => {
  post({ id, type: 'text', text });
  return !aborted;
};

/** The engine asks after each step of a long prompt: an abort that arrived meanwhile stops it. */
const streamPrompt = (id: number) => (done: number, total: number) => {
  post({ id, type: 'prompt', progress: { done, total } });
  return !aborted;
};

async function handle(m: Exclude<ToWorker, { type: 'abort' | 'destroyDevice' }>): Promise<unknown> {
  aborted = false;
  switch (m.type) {
    case 'load':
      return load(m.id, m.source, m.options, m.lora);
    case 'setLora':
      return setLora(m.lora);
    case 'chat':
      return loaded().chat(m.request, streamPrompt(m.id), streamText(m.id));
    case 'complete':
      return loaded().complete(m.request, streamPrompt(m.id), streamText(m.id));
    case 'info':
      return loaded().info() as EngineInfo;
    case 'reset':
      return loaded().reset();
    case 'unload':
      engine?.unload();
      engine = undefined;
      return null;
  }
}

self.onmessage = async (e: MessageEvent<ToWorker>) => {
  const m = e.data;
  if (m.type === 'wasm') {
    ready = init({ module_or_path: m.module });
    return;
  }
  if (m.type === 'abort') {
    aborted = true;
    download?.abort();
    return;
  }
  // Out of band, like abort: it must reach a generation that is running.
  if (m.type === 'destroyDevice') {
    engine?.destroyDevice();
    return;
  }
  try {
    post({ id: m.id, type: 'result', value: await handle(m) });
  } catch (err) {
    post({ id: m.id, type: 'error', error: errorData(err) });
  }
};
