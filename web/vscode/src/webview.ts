/**
 * The webview: web/src/agent's panel, mounted with a host for VS Code. The project is the open
 * folder (sent by the extension host), the agent's edits stay in the panel's in-memory workspace
 * and are mirrored to the host as pending changes, which the user accepts or discards there.
 */
import { type Engine, type LoraAdapter, createEngine, deleteCachedModel, listCachedModels } from '../../src/lib/index';
import { engineModel, progressText, scriptedModelFromJson } from '../../src/agent/models';
import { AgentPanel } from '../../src/agent/panel';
import { AgentSession } from '../../src/agent/session';
import { ChatView, stopOnEscape } from '../../src/ui/chat';
import { PRESETS, formatBytes } from '../../src/ui/presets';
import { probeWebGpu } from '../../src/ui/webgpu';
import { type FromView, type ProposedChange, type ToView, type ViewSettings, isModelFile } from './protocol';
import type { CommandResult } from './terminal';

declare function acquireVsCodeApi(): { postMessage(m: FromView): void };
declare global {
  interface Window {
    lilypadSettings: ViewSettings;
  }
}

(globalThis as unknown as { lilypadEnv: { BASE_URL: string } }).lilypadEnv = { BASE_URL: new URL('./', import.meta.url).href };
const vscode = acquireVsCodeApi();
let settings = window.lilypadSettings;
const post = (m: FromView) => vscode.postMessage(m);

/** `lora`: the lilypad.lora setting the engine's adapter came from ('' for none). */
let loaded: { model: string; lora: string; engine: Engine } | undefined;
let loading: { model: string; engine: Promise<Engine> } | undefined;
/**
 * The engine for `model` (a URL, or the path of a file on this machine), loaded once and shared by
 * the agent and the chat, with the LoRA adapter of the lilypad.lora setting. URLs are downloaded
 * into the view's cache, which outlives VS Code restarts; a file is read from the extension host
 * each time it is loaded. A changed adapter setting swaps the adapter on the loaded model.
 */
function engineFor(model: string, onStatus: (t: string) => void): Promise<Engine> {
  if (loaded?.model === model && loaded.lora === settings.lora.trim()) return Promise.resolve(loaded.engine);
  if (loading?.model === model) return loading.engine;
  const current = loaded;
  const load = (async () => {
    const lora = settings.lora.trim();
    if (current?.model === model) {
      if (current.lora !== lora) {
        onStatus(lora ? `Applying the LoRA adapter ${lora}` : 'Removing the LoRA adapter');
        await current.engine.setLora(await loraFor(lora, onStatus));
        current.lora = lora;
        document.body.dataset.lora = lora;
        onStatus(lora ? `LoRA adapter ${lora} applied` : 'LoRA adapter removed');
      }
      return current.engine;
    }
    await loaded?.engine.unload();
    loaded = undefined;
    document.body.dataset.model = 'loading';
    const adapter = await loraFor(lora, onStatus);
    const source = isModelFile(model) ? await readModelFile(model, onStatus) : model;
    await prepareWorker();
    const engine = await createEngine({
      model: source,
      ...(adapter && { lora: adapter }),
      ...(settings.draft !== 'none' && { draft: settings.draft }),
      startWorker,
      onProgress: (p) => {
        if (p.phase === 'ready') document.body.dataset.modelFromCache = String(p.fromCache);
        onStatus(progressText(p));
      },
    });
    loaded = { model, lora, engine };
    document.body.dataset.model = 'ready';
    document.body.dataset.lora = lora;
    return engine;
  })();
  loading = { model, engine: load };
  // A failed adapter swap leaves the loaded model usable.
  load.catch(() => !loaded && (document.body.dataset.model = 'error')).finally(() => {
    if (loading?.engine === load) loading = undefined;
  });
  return load;
}
/**
 * A model file on this machine, as a Blob: the extension host streams the file that the
 * lilypad.model setting names (and no other) in chunks.
 */
let fileRead: { path: string; parts: Uint8Array[]; resolve: (b: Blob) => void; reject: (e: Error) => void; onStatus: (t: string) => void } | undefined;
function readModelFile(path: string, onStatus: (t: string) => void): Promise<Blob> {
  if (settings.model !== path) {
    return Promise.reject(new Error(`${path}: set it as the model (lilypad: Choose model) so that the view may read it`));
  }
  fileRead?.reject(new Error('another model file was chosen'));
  return new Promise((resolve, reject) => {
    fileRead = { path, parts: [], resolve, reject, onStatus };
    onStatus(`Reading ${path}`);
    post({ type: 'readModel', path });
  });
}
function onModelChunk(m: Extract<ToView, { type: 'modelChunk' }>) {
  if (fileRead?.path !== m.path) return;
  fileRead.parts.push(m.data);
  fileRead.onStatus(`Reading the model file: ${formatBytes(m.done)} of ${formatBytes(m.size)}`);
  if (m.done === m.size) {
    fileRead.resolve(new Blob(fileRead.parts as BlobPart[]));
    fileRead = undefined;
  }
}
/**
 * The adapter for the lilypad.lora setting: a URL as it is (the engine's worker fetches its two
 * files), a folder on this machine as its two files, read by the extension host.
 */
let loraRead: { path: string; resolve: (files: { config: Blob; weights: Blob }) => void; reject: (e: Error) => void } | undefined;
function loraFor(lora: string, onStatus: (t: string) => void): Promise<LoraAdapter | null> {
  if (!lora) return Promise.resolve(null);
  if (!isModelFile(lora)) return Promise.resolve(lora);
  loraRead?.reject(new Error('another LoRA adapter was chosen'));
  return new Promise((resolve, reject) => {
    loraRead = { path: lora, resolve, reject };
    onStatus(`Reading the LoRA adapter ${lora}`);
    post({ type: 'readLora', path: lora });
  });
}
const modelStatus = (text: string) => (q('.agent-model-status').textContent = text);

/**
 * The engine worker's script and wasm. A webview's files are served through its service worker,
 * which answers the page but not the page's workers (their requests never complete): the page
 * fetches both, starts the worker from a same-origin blob and hands it the compiled module.
 */
let workerAssets: Promise<{ script: string; wasm: WebAssembly.Module }> | undefined;
function fetchWorkerAssets() {
  workerAssets ??= (async () => {
    const get = async (name: string) => {
      const res = await fetch(new URL(name, import.meta.url));
      if (!res.ok) throw new Error(`${name}: ${res.status} ${res.statusText}`);
      return res;
    };
    const [script, wasm] = await Promise.all([
      get('engine-worker.js').then((r) => r.blob()).then((b) => URL.createObjectURL(new Blob([b], { type: 'text/javascript' }))),
      get('lilypad_wasm_bg.wasm').then((r) => r.arrayBuffer()).then((b) => WebAssembly.compile(b)),
    ]);
    return { script, wasm };
  })();
  workerAssets.catch(() => (workerAssets = undefined));
  return workerAssets;
}
let startWorker: () => Worker;
async function prepareWorker() {
  const { script, wasm } = await fetchWorkerAssets();
  startWorker = () => {
    const worker = new Worker(script, { type: 'module', name: 'lilypad-engine' });
    worker.postMessage({ type: 'wasm', module: wasm });
    return worker;
  };
}

/** Python's worker, started from a same-origin blob of its script (fetched once). */
let pythonScript: Promise<string> | undefined;
async function startPythonWorker(): Promise<Worker> {
  pythonScript ??= (async () => {
    const res = await fetch(new URL('python-worker.js', import.meta.url));
    if (!res.ok) throw new Error(`python-worker.js: ${res.status} ${res.statusText}`);
    return URL.createObjectURL(new Blob([await res.blob()], { type: 'text/javascript' }));
  })();
  pythonScript.catch(() => (pythonScript = undefined));
  return new Worker(await pythonScript, { type: 'module', name: 'lilypad-python' });
}

/** Sets a file of the view's copy; null deletes it. */
function putText(session: AgentSession, path: string, text: string | null) {
  if (text === null) {
    session
      .tool('Bash', { command: `rm -f '${path.replace(/'/g, `'\\''`)}'`, description: 'Remove' })
      .catch((e) => console.warn(`removing ${path}: ${(e as Error).message ?? e}`));
  }
  else session.writeText(path, text);
}

/** Last changes sent, so the host hears only about differences. */
let lastSent = '';
function mirror(session: AgentSession) {
  const changes: ProposedChange[] = session.changes().map((c) => ({
    path: c.path,
    change: c.change,
    text: c.change === 'deleted' ? null : session.readText(c.path),
  }));
  const json = JSON.stringify(changes);
  if (json === lastSent) return;
  lastSent = json;
  post({ type: 'changes', changes });
}

const panel = new AgentPanel(document.getElementById('agent')!, {
  models: [
    {
      id: 'engine',
      label: 'A GGUF model in this view (WebGPU)',
      input: 'url',
      // `scripted:` settings are the native fallback's; the view's chooser shows models only.
      value: settings.model.startsWith('scripted:') ? '' : settings.model,
      // The view has no page server: presets it can download, any URL, or a file on this machine.
      chooser: {
        presets: PRESETS.filter((p) => !p.servedWithPage),
        otherLabel: 'URL, or the path of a GGUF file on this machine',
        // The lilypad.model setting follows the chooser, so the chat and the native fallback agree.
        onChange: (c) => c.value() && post({ type: 'setModel', model: c.value() }),
      },
    },
    { id: 'scripted', label: 'Scripted replies (for demos and tests)', input: 'script', value: '[]' },
  ],
  // The view's workers cannot fetch its files: Python's worker starts from a blob of its
  // script, and the page fetches Pyodide's files for it.
  python: { startWorker: startPythonWorker },
  async createModel(choice, input, onStatus) {
    if (choice === 'scripted') return scriptedModelFromJson(input);
    const engine = await engineFor(input.trim(), onStatus);
    return engineModel(engine, await engine.info());
  },
  save(name, data) {
    post({ type: 'save', name, data: typeof data === 'string' ? data : Array.from(data) });
  },
  changed: mirror,
  terminal: () => (settings.terminal ? { run: runInTerminal } : undefined),
});

/** The agent's Bash in the editor's terminal (opted in): the extension host asks the user first. */
let commandIds = 0;
const commands = new Map<number, { resolve: (r: CommandResult) => void; reject: (e: Error) => void }>();
function runInTerminal(request: { command: string; timeout_ms: number }): Promise<CommandResult> {
  const id = ++commandIds;
  return new Promise((resolve, reject) => {
    commands.set(id, { resolve, reject });
    post({ type: 'command', id, command: request.command, timeoutMs: request.timeout_ms });
  });
}
const q = <T extends HTMLElement>(s: string) => document.querySelector(s) as T;
function applySettings(s: ViewSettings) {
  q<HTMLInputElement>('.agent-max-steps').value = String(s.maxSteps);
  q<HTMLInputElement>('.agent-temperature').value = String(s.temperature);
  q<HTMLInputElement>('.agent-thinking').checked = s.thinking;
  if (!s.model.startsWith('scripted:')) panel.chooser?.set(s.model);
  document.body.dataset.modelSetting = s.model;
  document.body.dataset.terminal = String(s.terminal);
  document.body.dataset.loraSetting = s.lora;
}
applySettings(settings);
// The project is the open folder: the panel's pickers are not needed here.
for (const s of ['.agent-zip', '.agent-folder']) q(s).closest('label')!.style.display = 'none';

function showPending(changes: Array<ProposedChange & { original: string | null }>) {
  const section = q('#lilypad-pending');
  section.hidden = changes.length === 0;
  section.dataset.count = String(changes.length);
  q('.pending-list').replaceChildren(
    ...changes.map((c) => {
      const li = document.createElement('li');
      li.dataset.path = c.path;
      const name = document.createElement('button');
      name.type = 'button';
      name.className = 'pending-diff';
      name.textContent = `${c.path} (${c.change})`;
      name.onclick = () => post({ type: 'showDiff', path: c.path });
      const accept = Object.assign(document.createElement('button'), { type: 'button', className: 'pending-accept', textContent: 'Accept' });
      accept.onclick = () => post({ type: 'accept', paths: [c.path] });
      const discard = Object.assign(document.createElement('button'), { type: 'button', className: 'pending-discard', textContent: 'Discard' });
      discard.onclick = () => post({ type: 'discard', paths: [c.path] });
      li.append(name, ' ', accept, ' ', discard);
      return li;
    }),
  );
}
q('.accept-all').onclick = () => post({ type: 'accept', paths: [...document.querySelectorAll<HTMLElement>('.pending-list li')].map((l) => l.dataset.path!) });
q('.discard-all').onclick = () => post({ type: 'discard', paths: [...document.querySelectorAll<HTMLElement>('.pending-list li')].map((l) => l.dataset.path!) });

window.addEventListener('message', (event: MessageEvent<ToView>) => {
  const m = event.data;
  switch (m.type) {
    case 'workspace':
      lastSent = '';
      void panel.open(async () => {
        const session = await AgentSession.fromFiles(m.files.map((f) => ({ path: f.path, data: Uint8Array.from(f.data) })), m.name);
        // Proposals still pending from before this view was (re)loaded belong to its copy again;
        // otherwise the first mirror would tell the host that there are none.
        for (const c of m.pending) putText(session, c.path, c.text);
        return session;
      });
      break;
    case 'pending':
      showPending(m.changes);
      break;
    case 'discard':
      if (!panel.session) break;
      for (const c of m.changes) putText(panel.session, c.path, c.original);
      panel.refresh();
      break;
    case 'applied':
      panel.refresh();
      break;
    case 'solve':
      q<HTMLTextAreaElement>('.agent-task-text').value = m.task;
      if (!gpu.ok) post({ type: 'native', task: m.task });
      else void panel.run();
      break;
    case 'settings':
      settings = m.settings;
      applySettings(m.settings);
      // A new adapter goes on the loaded model now, not at the next question.
      if (loaded && loaded.lora !== settings.lora.trim()) {
        void engineFor(loaded.model, modelStatus).catch((e) => modelStatus(String((e as Error).message ?? e)));
      }
      break;
    case 'chat':
      openChat(m.text);
      break;
    case 'modelChunk':
      onModelChunk(m);
      break;
    case 'loraFiles':
      if (loraRead?.path !== m.path) break;
      loraRead.resolve({ config: new Blob([m.config as BlobPart]), weights: new Blob([m.weights as BlobPart]) });
      loraRead = undefined;
      break;
    case 'loraError':
      if (loraRead?.path !== m.path) break;
      loraRead.reject(new Error(m.message));
      loraRead = undefined;
      break;
    case 'modelError':
      if (fileRead?.path === m.path) fileRead.reject(new Error(m.message));
      fileRead = undefined;
      break;
    case 'commandResult': {
      const waiting = commands.get(m.id);
      commands.delete(m.id);
      if (m.result) waiting?.resolve(m.result);
      else waiting?.reject(new Error(m.refused ?? 'the command did not run'));
      break;
    }
    case 'listModels':
      void listCachedModels()
        .catch(() => [])
        .then((models) => post({ type: 'models', models: models.map(({ url, bytes, complete, updated }) => ({ url, bytes, complete, updated })) }));
      break;
    case 'deleteModel':
      void deleteCachedModel(m.url).then(() => post({ type: 'deleted', url: m.url }));
      break;
  }
});

/**
 * Chat with the agent's model, without tools: the "lilypad: Chat" command opens it, with the
 * editor's selection quoted when there is one.
 */
const chatBox = q<HTMLDetailsElement>('#lilypad-chat');
const chat = new ChatView(q('#lilypad-chat .lilypad-chat-body'), {
  async engine() {
    if (panel.session?.isRunning) throw new Error('The agent is running: ask when it has finished.');
    if (!gpu.ok) throw new Error('Chat needs WebGPU in this view.');
    const model = settings.model.trim();
    if (!model || model.startsWith('scripted:')) throw new Error('Choose a model first (lilypad: Choose model).');
    return engineFor(model, modelStatus);
  },
  options: () => ({
    max_tokens: 1024,
    temperature: settings.temperature,
    top_p: settings.topP,
    top_k: settings.topK,
    enable_thinking: settings.thinking,
  }),
});
stopOnEscape(chatBox, chat);
const openChat = (text?: string) => {
  chatBox.open = true;
  chat.open(text);
};

const gpu = await probeWebGpu();
const banner = q('#lilypad-gpu');
banner.dataset.webgpu = String(gpu.ok);
banner.dataset.cpu = String(gpu.cpu);
// A GPU needs no banner; a CPU fallback is named (it is slow), and without WebGPU the native binary runs the models.
banner.textContent = !gpu.ok
  ? `No WebGPU in this view (${gpu.reason}): models run with the native lilypad binary; scripted replies still work here.`
  : gpu.cpu ? gpu.text : '';
post({ type: 'ready', webgpu: gpu.ok, reason: gpu.reason });

// A configured model that is already in the view's cache is loaded right away, so the first
// run or question after a restart does not wait for it.
if (gpu.ok && /^https?:/.test(settings.model)) {
  const url = settings.model.trim();
  void listCachedModels()
    .then(async (models) => {
      if (models.some((m) => m.url === url && m.complete)) await engineFor(url, modelStatus);
    })
    .catch((e) => modelStatus(String((e as Error).message ?? e)));
}

Object.assign(window, { lilypadAgent: { panel, AgentSession } });
