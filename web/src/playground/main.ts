/**
 * The playground: choose a model (preset, URL, local file or cached) and optionally a LoRA
 * adapter, watch it load, chat with streaming output and see prefill/decode speed. The page's
 * state is mirrored in `body[data-state]` and data attributes, which the end-to-end test reads.
 */
import {
  type CreateEngineOptions, type Engine, type LoraAdapter, type LoraInfo, type Progress, LilypadError, createEngine,
  deleteCachedModel, deletePromptStates, listCachedModels, loraFromFiles, promptStatesUsage,
} from '../lib/index';
import { ChatView, stopOnEscape } from '../ui/chat';
import { ModelChooser } from '../ui/model-chooser';
import { formatBytes } from '../ui/presets';
import { probeWebGpu } from '../ui/webgpu';

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const ui = {
  gpu: $('gpu-status'),
  loraUrl: $<HTMLInputElement>('lora-url'),
  loraFiles: $<HTMLInputElement>('lora-files'),
  loraApply: $<HTMLButtonElement>('lora-apply'),
  loraRemove: $<HTMLButtonElement>('lora-remove'),
  draft: $<HTMLSelectElement>('draft'),
  load: $<HTMLButtonElement>('load'),
  cancelLoad: $<HTMLButtonElement>('cancel-load'),
  progress: $<HTMLProgressElement>('load-progress'),
  status: $('load-status'),
  error: $('error'),
  errorCode: $('error-code'),
  errorMessage: $('error-message'),
  retry: $<HTMLButtonElement>('retry'),
  cached: $<HTMLUListElement>('cached'),
  promptStates: $('prompt-states'),
  deletePromptStates: $<HTMLButtonElement>('delete-prompt-states'),
  info: $('info'),
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

function setState(state: State) {
  document.body.dataset.state = state;
  const busy = state === 'loading' || state === 'generating';
  ui.load.disabled = busy;
  ui.cancelLoad.hidden = state !== 'loading';
  chat.setEnabled(!!engine && state !== 'loading', engine ? 'Ask something (Enter sends, Shift+Enter for a new line).' : 'Load a model, then ask something.');
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
    'bad-request': 'Nothing to load.',
    aborted: 'Stopped.',
  };
  return titles[code] ?? 'Error.';
}

const mib = formatBytes;

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

/** Puts the chosen preset's sampling into the form. */
function choosePreset() {
  const sampling = chooser.preset?.sampling;
  if (!sampling) return;
  ui.temperature.value = String(sampling.temperature);
  ui.topP.value = String(sampling.top_p);
  ui.topK.value = String(sampling.top_k);
}

/** The adapter in the LoRA fields: its two picked files, or its folder's URL. */
function chosenLora(): LoraAdapter | undefined {
  const files = ui.loraFiles.files;
  if (files?.length) return loraFromFiles(files);
  return ui.loraUrl.value.trim() || undefined;
}

async function load(source: string | File | undefined = chooser.source()) {
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
    const draft = (ui.draft.value || undefined) as CreateEngineOptions['draft'];
    engine = await createEngine({ model: source, lora, onProgress, signal: loading.signal, maxChunkBytes, draft });
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
    ['GPU memory', `${mib(model.gpu_weights_bytes)} weights, ${mib(model.gpu_kv_cache_bytes)} KV cache (${model.kv_cache}), ${mib(model.gpu_activation_bytes)} activations`],
    ['LoRA adapter', describeLora(lora)],
    ['Speculative decoding', model.draft ?? 'off'],
  ];
  ui.info.replaceChildren(
    ...rows.flatMap(([k, v]) => [Object.assign(document.createElement('dt'), { textContent: k }), Object.assign(document.createElement('dd'), { textContent: v })]),
  );
  ui.info.dataset.adapter = adapter.name;
  ui.info.dataset.lora = JSON.stringify(lora);
}

async function refreshCached() {
  void promptStatesUsage().then(({ count, bytes }) => {
    ui.promptStates.dataset.count = String(count);
    ui.promptStates.querySelector('span')!.textContent = count
      ? `Conversation openings kept for the next visit: ${count} (${mib(bytes)}). `
      : 'No conversation openings kept yet. ';
    ui.deletePromptStates.hidden = count === 0;
  });
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
    use.onclick = () => {
      chooser.set(m.url);
      void load(m.url);
    };
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

function clearConversation() {
  chat.clear();
}

const num = (input: HTMLInputElement) => Number(input.value);

async function checkWebGpu() {
  const gpu = await probeWebGpu();
  ui.gpu.textContent = gpu.text;
  ui.gpu.dataset.ok = String(gpu.ok);
  ui.gpu.dataset.cpu = String(gpu.cpu);
  if (!gpu.ok) ui.load.disabled = true;
}

const chooser = new ModelChooser($('model-chooser'), { file: true, base: location.href, onChange: choosePreset });
choosePreset();
const chat = new ChatView($('chat'), {
  rawMode: true,
  engine: async () => engine ?? Promise.reject(new Error('Load a model first.')),
  options: () => ({
    temperature: num(ui.temperature),
    top_p: num(ui.topP),
    top_k: num(ui.topK),
    max_tokens: num(ui.maxTokens),
    seed: num(ui.seed),
  }),
  onState: (state) => setState(state === 'generating' ? 'generating' : engine ? 'ready' : 'error'),
  onError(e) {
    showError(e);
    // A lost device or unloaded engine: Retry loads the model again.
    if (e instanceof LilypadError && (e.code === 'device-lost' || e.code === 'unloaded')) {
      engine = undefined;
      setState('error');
    }
  },
  onClear: () => void engine?.reset().catch(() => {}),
});
stopOnEscape(document, chat);
ui.load.onclick = () => void load();
ui.cancelLoad.onclick = () => (loading ? loading.abort() : engine?.abort());
ui.loraApply.onclick = () => void setLora(false);
ui.loraRemove.onclick = () => void setLora(true);
ui.retry.onclick = () => void load(lastSource);
ui.deletePromptStates.onclick = () => void deletePromptStates().catch(showError).finally(refreshCached);
setState('idle');
void checkWebGpu();
void refreshCached();
