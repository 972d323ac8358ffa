/**
 * The playground: choose a model (preset, URL, local file or cached) and optionally a LoRA
 * adapter, watch it load, chat with streaming output and see prefill/decode speed. The page's state is mirrored in
 * `body[data-state]` and data attributes, which the end-to-end test reads.
 */
import {
  type ChatMessage, type Engine, type LoraAdapter, type LoraInfo, type Progress, LilypadError, createEngine,
  deleteCachedModel, listCachedModels, loraFromFiles,
} from '../lib/index';
import { PRESETS } from './presets';

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const ui = {
  gpu: $('gpu-status'),
  preset: $<HTMLSelectElement>('preset'),
  presetNote: $('preset-note'),
  urlRow: $('url-row'),
  url: $<HTMLInputElement>('model-url'),
  file: $<HTMLInputElement>('model-file'),
  loraUrl: $<HTMLInputElement>('lora-url'),
  loraFiles: $<HTMLInputElement>('lora-files'),
  loraApply: $<HTMLButtonElement>('lora-apply'),
  loraRemove: $<HTMLButtonElement>('lora-remove'),
  load: $<HTMLButtonElement>('load'),
  cancelLoad: $<HTMLButtonElement>('cancel-load'),
  progress: $<HTMLProgressElement>('load-progress'),
  status: $('load-status'),
  error: $('error'),
  errorCode: $('error-code'),
  errorMessage: $('error-message'),
  retry: $<HTMLButtonElement>('retry'),
  cached: $<HTMLUListElement>('cached'),
  info: $('info'),
  mode: $<HTMLSelectElement>('mode'),
  clear: $<HTMLButtonElement>('clear'),
  messages: $('messages'),
  composer: $<HTMLFormElement>('composer'),
  input: $<HTMLTextAreaElement>('input'),
  send: $<HTMLButtonElement>('send'),
  stop: $<HTMLButtonElement>('stop'),
  stats: $('stats'),
  temperature: $<HTMLInputElement>('temperature'),
  topP: $<HTMLInputElement>('top-p'),
  topK: $<HTMLInputElement>('top-k'),
  maxTokens: $<HTMLInputElement>('max-tokens'),
  seed: $<HTMLInputElement>('seed'),
};

type State = 'idle' | 'loading' | 'ready' | 'generating' | 'error';

/** `?maxChunkBytes=N` caps each weight buffer, as a small GPU's binding limit would (tests). */
const maxChunkBytes = Number(new URLSearchParams(location.search).get('maxChunkBytes')) || undefined;
/** `?debug` exposes the engine as `lilypadEngine()`, for tests that drive it directly. */
if (new URLSearchParams(location.search).has('debug')) {
  Object.assign(globalThis, { lilypadEngine: () => engine });
}

let engine: Engine | undefined;
let loading: AbortController | undefined;
let lastSource: string | File | undefined;
const history: ChatMessage[] = [];

function setState(state: State) {
  document.body.dataset.state = state;
  const busy = state === 'loading' || state === 'generating';
  ui.load.disabled = busy;
  ui.cancelLoad.hidden = state !== 'loading';
  ui.input.disabled = !engine || busy;
  ui.input.placeholder = engine ? 'Ask something (Enter sends, Shift+Enter for a new line).' : 'Load a model, then ask something.';
  ui.send.disabled = !engine || busy;
  ui.stop.disabled = state !== 'generating';
  ui.loraApply.disabled = !engine || busy;
  ui.loraRemove.disabled = !engine || busy;
}

function showError(e: unknown) {
  const err = e instanceof LilypadError ? e : new LilypadError('internal', String((e as Error)?.message ?? e));
  ui.error.hidden = false;
  ui.error.dataset.code = err.code;
  ui.errorCode.textContent = describe(err.code);
  ui.errorMessage.textContent = err.message;
}

function describe(code: LilypadError['code']): string {
  const titles: Partial<Record<LilypadError['code'], string>> = {
    'no-webgpu': 'WebGPU is not available.',
    'not-found': 'Model not found.',
    'corrupt-model': 'The file is not a usable GGUF model.',
    'unsupported-model': 'This model is not supported yet.',
    'device-lost': 'The GPU device was lost; load the model again.',
    'out-of-memory': 'The GPU ran out of memory.',
    'too-large': "The model exceeds this GPU's limits.",
    network: 'The download was interrupted.',
    quota: 'Browser storage is full.',
  };
  return titles[code] ?? 'Error.';
}

const mib = (n: number) => `${(n / 2 ** 20).toFixed(1)} MiB`;

function onProgress(p: Progress) {
  const phases = new Set((document.body.dataset.phases ?? '').split(' ').filter(Boolean));
  phases.add(p.phase === 'download' && p.fromCache ? 'cache' : p.phase);
  document.body.dataset.phases = [...phases].join(' ');
  document.body.dataset.progressEvents = String(Number(document.body.dataset.progressEvents ?? 0) + 1);
  ui.progress.hidden = false;
  if (p.phase === 'download') {
    ui.progress.value = p.bytesTotal ? p.bytesDone / p.bytesTotal : 0;
    ui.status.textContent = p.fromCache
      ? `In the browser cache (${mib(p.bytesTotal)}).`
      : `Downloading ${mib(p.bytesDone)} of ${mib(p.bytesTotal)}${p.resumedFrom ? ` (resumed at ${mib(p.resumedFrom)})` : ''}…`;
  } else if (p.phase === 'upload') {
    ui.progress.value = p.bytesTotal ? p.bytesDone / p.bytesTotal : 0;
    ui.status.textContent = `Uploading to the GPU: tensor ${p.tensorsDone} of ${p.tensorsTotal} (${p.tensor}), ${mib(p.bytesDone)} of ${mib(p.bytesTotal)}`;
  } else {
    ui.progress.value = 1;
    ui.status.textContent = `Ready in ${p.seconds.toFixed(1)} s${p.fromCache ? ' (from the cache)' : ''}.`;
  }
}

function chosenSource(): string | File | undefined {
  const file = ui.file.files?.[0];
  if (file) return file;
  if (ui.preset.value === 'custom') return ui.url.value.trim() || undefined;
  return PRESETS.find((p) => p.id === ui.preset.value)?.url;
}

/** Shows the URL field for "Another URL…" only, and puts the preset's sampling in the form. */
function choosePreset() {
  const preset = PRESETS.find((p) => p.id === ui.preset.value);
  ui.urlRow.hidden = ui.preset.value !== 'custom';
  ui.presetNote.textContent = preset?.note ?? '';
  if (preset?.sampling) {
    ui.temperature.value = String(preset.sampling.temperature);
    ui.topP.value = String(preset.sampling.top_p);
    ui.topK.value = String(preset.sampling.top_k);
  }
}

/** The adapter in the LoRA fields: its two picked files, or its folder's URL. */
function chosenLora(): LoraAdapter | undefined {
  const files = ui.loraFiles.files;
  if (files?.length) return loraFromFiles(files);
  return ui.loraUrl.value.trim() || undefined;
}

async function load(source: string | File | undefined = chosenSource()) {
  if (!source) {
    showError(new LilypadError('bad-request', 'choose a preset, enter a URL or pick a file'));
    return;
  }
  let lora: LoraAdapter | undefined;
  try {
    lora = chosenLora();
  } catch (e) {
    showError(e);
    return;
  }
  lastSource = source;
  ui.error.hidden = true;
  delete document.body.dataset.phases;
  delete document.body.dataset.progressEvents;
  const old = engine;
  engine = undefined;
  setState('loading');
  await old?.unload().catch(() => {});
  ui.status.textContent = 'Starting…';
  const started = performance.now();
  try {
    loading = new AbortController();
    engine = await createEngine({ model: source, lora, onProgress, signal: loading.signal, maxChunkBytes });
    document.body.dataset.loadMs = String(Math.round(performance.now() - started));
    await showInfo(engine);
    clearConversation();
    setState('ready');
  } catch (e) {
    engine = undefined;
    ui.progress.hidden = true;
    ui.status.textContent = '';
    showError(e);
    setState('error');
  } finally {
    loading = undefined;
    void refreshCached();
  }
}

/** Puts the adapter in the LoRA fields on the loaded model (null: removes it). */
async function setLora(remove: boolean) {
  if (!engine) return;
  ui.error.hidden = true;
  setState('loading');
  ui.status.textContent = remove ? 'Removing the LoRA adapter…' : 'Applying the LoRA adapter…';
  try {
    const lora = remove ? null : chosenLora();
    if (lora === undefined) throw new LilypadError('bad-request', "enter the adapter folder's URL or pick its two files");
    await engine.setLora(lora);
    ui.status.textContent = remove ? 'LoRA adapter removed.' : 'LoRA adapter applied.';
  } catch (e) {
    ui.status.textContent = '';
    showError(e);
  }
  // Applied or not, the engine forgot the conversation; it still runs (a bad adapter changes nothing).
  clearConversation();
  await showInfo(engine).catch(showError);
  setState('ready');
}

function describeLora(l: LoraInfo | null): string {
  if (!l) return 'none';
  return `rank ${l.rank}, alpha ${l.alpha} (scale ${+l.scale.toFixed(4)}), ${l.linears} linears${l.base_model ? `, trained on ${l.base_model}` : ''}`;
}

async function showInfo(e: Engine) {
  const { adapter, model, lora } = await e.info();
  const rows: Array<[string, string]> = [
    ['Adapter', `${adapter.name} (${adapter.backend}, ${adapter.device_type}${adapter.driver ? `, ${adapter.driver}` : ''})`],
    ['Features', adapter.features.join(', ') || 'none'],
    ['Max storage binding', mib(adapter.max_storage_buffer_binding_size)],
    ['Model', `${model.name}: ${model.architecture}, ${model.layers} layers, ${(model.parameters / 1e6).toFixed(0)}M parameters`],
    ['Context', `${model.context} tokens`],
    ['GPU memory', `${mib(model.gpu_weights_bytes)} weights, ${mib(model.gpu_kv_cache_bytes)} KV cache, ${mib(model.gpu_activation_bytes)} activations`],
    ['LoRA adapter', describeLora(lora)],
  ];
  ui.info.replaceChildren(
    ...rows.flatMap(([k, v]) => [Object.assign(document.createElement('dt'), { textContent: k }), Object.assign(document.createElement('dd'), { textContent: v })]),
  );
  ui.info.dataset.adapter = adapter.name;
  ui.info.dataset.lora = JSON.stringify(lora);
}

async function refreshCached() {
  let models;
  try {
    models = await listCachedModels();
  } catch {
    return; // no OPFS: nothing to list
  }
  const items = models.map((m) => {
    const li = document.createElement('li');
    const label = `${decodeURIComponent(m.url.split('/').pop() ?? m.url)} — ${mib(m.bytes)}${m.complete ? '' : ` of ${mib(m.size)} (partial)`}`;
    const use = Object.assign(document.createElement('button'), { type: 'button', textContent: 'Load', title: m.url });
    use.onclick = () => void load(m.url);
    const del = Object.assign(document.createElement('button'), { type: 'button', textContent: 'Delete' });
    del.onclick = async () => {
      try {
        await deleteCachedModel(m.url);
      } catch (e) {
        showError(e);
      }
      void refreshCached();
    };
    li.append(label, ' ', use, ' ', del);
    li.dataset.url = m.url;
    return li;
  });
  ui.cached.replaceChildren(...(items.length ? items : [Object.assign(document.createElement('li'), { className: 'muted', textContent: 'none' })]));
}

function bubble(role: string, text: string): HTMLElement {
  const div = document.createElement('div');
  div.className = `message ${role}`;
  div.textContent = text;
  ui.messages.append(div);
  div.scrollIntoView({ block: 'end' });
  return div;
}

function clearConversation() {
  history.length = 0;
  ui.messages.replaceChildren();
  void engine?.reset().catch(() => {});
}

const num = (input: HTMLInputElement) => Number(input.value);

async function send() {
  const text = ui.input.value;
  if (!engine || !text.trim()) return;
  const raw = ui.mode.value === 'raw';
  const sampling = {
    temperature: num(ui.temperature),
    top_p: num(ui.topP),
    top_k: num(ui.topK),
    max_tokens: num(ui.maxTokens),
    seed: num(ui.seed),
  };
  ui.input.value = '';
  bubble(raw ? 'prompt' : 'user', text);
  const reply = bubble('assistant', '');
  reply.dataset.done = 'false';
  setState('generating');
  ui.stats.textContent = '';
  const started = performance.now();
  let firstMs: number | undefined;
  const onText = (piece: string) => {
    if (!piece) return;
    firstMs ??= performance.now() - started;
    if (reply.dataset.reading) {
      delete reply.dataset.reading;
      ui.stats.textContent = '';
    }
    reply.textContent += piece;
  };
  // A long prompt is read in steps; each one reports (and Stop takes effect between them).
  const onPromptProgress = ({ done, total }: { done: number; total: number }) => {
    if (firstMs !== undefined) return;
    reply.dataset.reading = `${done}/${total}`;
    reply.dataset.promptReports = String(Number(reply.dataset.promptReports ?? 0) + 1);
    ui.stats.textContent = `Reading the prompt: ${done.toLocaleString('en')} / ${total.toLocaleString('en')} tokens…`;
  };
  try {
    let usage;
    let timings;
    let finish;
    if (raw) {
      for await (const c of await engine.completions.create({ prompt: text, stream: true, onPromptProgress, ...sampling })) {
        onText(c.choices[0].text);
        if (c.tokens) reply.dataset.tokens = JSON.stringify(c.tokens);
        ({ usage, timings } = c);
        finish = c.choices[0].finish_reason;
      }
    } else {
      history.push({ role: 'user', content: text });
      for await (const c of await engine.chat.completions.create({ messages: history, stream: true, onPromptProgress, ...sampling })) {
        onText(c.choices[0].delta.content ?? '');
        ({ usage, timings } = c);
        finish = c.choices[0].finish_reason;
      }
      history.push({ role: 'assistant', content: reply.textContent ?? '' });
    }
    reply.dataset.finish = finish ?? '';
    delete reply.dataset.reading;
    // A stopped reply says so (and one stopped before its first word is not an empty bubble).
    if (finish === 'abort') reply.classList.add('stopped');
    if (usage && timings) {
      const s = ui.stats;
      s.dataset.prefillTokensPerS = timings.prefill_tokens_per_s.toFixed(2);
      s.dataset.decodeTokensPerS = timings.decode_tokens_per_s.toFixed(2);
      s.dataset.firstTokenMs = String(Math.round(firstMs ?? 0));
      const parts = [
        usage.prefilled_tokens < usage.prompt_tokens
          ? `prompt ${usage.prefilled_tokens} new of ${usage.prompt_tokens} tokens`
          : `prompt ${usage.prompt_tokens} tokens`,
      ];
      if (timings.prefill_tokens_per_s > 0) parts[0] += ` at ${timings.prefill_tokens_per_s.toFixed(1)} tok/s`;
      if (usage.completion_tokens > 0) {
        parts.push(`reply ${usage.completion_tokens} tokens${timings.decode_tokens_per_s > 0 ? ` at ${timings.decode_tokens_per_s.toFixed(1)} tok/s` : ''}`);
      }
      if (firstMs !== undefined) parts.push(`first token after ${(firstMs / 1e3).toFixed(2)} s`);
      if (finish === 'abort') parts.push('stopped');
      s.textContent = parts.join(' · ');
    }
    setState('ready');
  } catch (e) {
    reply.classList.add('failed');
    showError(e);
    const lost = e instanceof LilypadError && (e.code === 'device-lost' || e.code === 'unloaded');
    if (lost) engine = undefined; // Retry reloads the model
    setState(lost ? 'error' : 'ready');
  } finally {
    reply.dataset.done = 'true';
  }
}

async function checkWebGpu() {
  const gpu = (navigator as Navigator & { gpu?: GPU }).gpu;
  if (!gpu) {
    ui.gpu.textContent = 'This browser has no WebGPU. Use a recent Chrome or Edge (or Safari 26), with hardware acceleration on.';
    ui.gpu.dataset.ok = 'false';
    ui.load.disabled = true;
    return;
  }
  const adapter = await gpu.requestAdapter().catch(() => null);
  if (!adapter) {
    ui.gpu.textContent = 'WebGPU is present but offers no adapter: it may be disabled (chrome://gpu) or the GPU blocklisted.';
    ui.gpu.dataset.ok = 'false';
    ui.load.disabled = true;
    return;
  }
  const info = adapter.info;
  const limit = adapter.limits.maxStorageBufferBindingSize;
  ui.gpu.dataset.ok = 'true';
  const cpu = /swiftshader|llvmpipe|lavapipe/i.test(`${info.vendor} ${info.architecture} ${info.description}`) ||
    (adapter as GPUAdapter & { isFallbackAdapter?: boolean }).isFallbackAdapter === true;
  ui.gpu.dataset.cpu = String(cpu);
  ui.gpu.textContent = `WebGPU: ${info.vendor || 'adapter'} ${info.architecture || info.description || ''} · max storage binding ${mib(limit)}` +
    (limit < 128 * 2 ** 20 ? ' — below 128 MiB: larger models will not fit' : '') +
    (cpu ? ' — this is a CPU fallback, not a GPU: the 135M model answers at a few tokens per second, 4B models take minutes per reply' : '');
}

for (const p of PRESETS) ui.preset.append(new Option(p.label, p.id));
ui.preset.title = ui.preset.selectedOptions[0]?.text ?? '';
ui.preset.onchange = () => {
  ui.preset.title = ui.preset.selectedOptions[0]?.text ?? '';
  choosePreset();
};
choosePreset();
ui.file.onchange = () => {
  if (ui.file.files?.length) ui.preset.value = 'custom';
};
ui.load.onclick = () => void load();
ui.cancelLoad.onclick = () => (loading ? loading.abort() : engine?.abort());
ui.loraApply.onclick = () => void setLora(false);
ui.loraRemove.onclick = () => void setLora(true);
ui.retry.onclick = () => void load(lastSource);
ui.clear.onclick = clearConversation;
ui.stop.onclick = () => engine?.abort();
ui.composer.onsubmit = (e) => {
  e.preventDefault();
  void send();
};
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && document.body.dataset.state === 'generating') engine?.abort();
});
ui.input.onkeydown = (e) => {
  if (e.key === 'Enter' && !e.shiftKey && ui.mode.value === 'chat') {
    e.preventDefault();
    void send();
  }
};
setState('idle');
void checkWebGpu();
void refreshCached();
