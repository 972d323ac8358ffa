/**
 * The webview: web/src/agent's panel, mounted with a host for VS Code. The project is the open
 * folder (sent by the extension host), the agent's edits stay in the panel's in-memory workspace
 * and are mirrored to the host as pending changes, which the user accepts or discards there.
 */
import { type Engine, createEngine, deleteCachedModel, listCachedModels } from '../../src/lib/index';
import { engineModel, scriptedModel } from '../../src/agent/models';
import { AgentPanel } from '../../src/agent/panel';
import { AgentSession } from '../../src/agent/session';
import type { FromView, ProposedChange, ToView, ViewSettings } from './protocol';

declare function acquireVsCodeApi(): { postMessage(m: FromView): void };
declare global {
  interface Window {
    lilypadSettings: ViewSettings;
  }
}

(globalThis as unknown as { lilypadEnv: { BASE_URL: string } }).lilypadEnv = { BASE_URL: new URL('./', import.meta.url).href };
const vscode = acquireVsCodeApi();
const settings = window.lilypadSettings;
const post = (m: FromView) => vscode.postMessage(m);

let loaded: { url: string; engine: Engine } | undefined;
async function engineFor(url: string, onStatus: (t: string) => void): Promise<Engine> {
  if (loaded?.url === url) return loaded.engine;
  await loaded?.engine.unload();
  loaded = undefined;
  const engine = await createEngine({
    model: url,
    startWorker,
    onProgress: (p) => {
      if (p.phase === 'download') onStatus(`Downloading ${(p.bytesDone / 1e6).toFixed(0)} / ${(p.bytesTotal / 1e6).toFixed(0)} MB`);
      else if (p.phase === 'upload') onStatus(`Uploading weights ${p.tensorsDone} / ${p.tensorsTotal}`);
      else onStatus(`Ready in ${p.seconds.toFixed(1)} s${p.fromCache ? ' (from the cache)' : ''}`);
    },
  });
  loaded = { url, engine };
  return engine;
}

/**
 * The engine's worker: webview pages cannot start a worker from the extension's resource origin,
 * so a same-origin module blob imports it (its import.meta.url then finds the wasm beside it).
 */
function startWorker(): Worker {
  const url = new URL('engine-worker.js', import.meta.url).href;
  const blob = new Blob([`import ${JSON.stringify(url)};`], { type: 'text/javascript' });
  return new Worker(URL.createObjectURL(blob), { type: 'module', name: 'lilypad-engine' });
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
    { id: 'engine', label: 'A GGUF model in this view (WebGPU)', input: 'url', value: settings.model },
    { id: 'scripted', label: 'Scripted replies (for demos and tests)', input: 'script', value: '[]' },
  ],
  async createModel(choice, input, onStatus) {
    if (choice === 'scripted') {
      const replies = JSON.parse(input) as unknown;
      if (!Array.isArray(replies) || !replies.every((r) => typeof r === 'string')) {
        throw new Error('scripted replies must be a JSON array of strings');
      }
      return scriptedModel(replies);
    }
    const engine = await engineFor(input.trim(), onStatus);
    return engineModel(engine, await engine.info());
  },
  save(name, data) {
    post({ type: 'save', name, data: typeof data === 'string' ? data : Array.from(data) });
  },
  changed: mirror,
});
const q = <T extends HTMLElement>(s: string) => document.querySelector(s) as T;
function applySettings(s: ViewSettings) {
  q<HTMLInputElement>('.agent-max-steps').value = String(s.maxSteps);
  q<HTMLInputElement>('.agent-temperature').value = String(s.temperature);
  q<HTMLInputElement>('.agent-thinking').checked = s.thinking;
  if (q<HTMLSelectElement>('.agent-model').value === 'engine') q<HTMLTextAreaElement>('.agent-model-input').value = s.model;
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
      void panel.open(() => AgentSession.fromFiles(m.files.map((f) => ({ path: f.path, data: Uint8Array.from(f.data) })), m.name));
      break;
    case 'pending':
      showPending(m.changes);
      break;
    case 'discard':
      if (!panel.session) break;
      for (const c of m.changes) {
        if (c.original === null) panel.session.tool('Bash', { command: `rm -f '${c.path.replace(/'/g, `'\\''`)}'`, description: 'Discard' });
        else panel.session.writeText(c.path, c.original);
      }
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
    case 'focus':
      q<HTMLTextAreaElement>('.agent-task-text').focus();
      break;
    case 'settings':
      applySettings(m.settings);
      break;
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

async function probeWebGpu(): Promise<{ ok: boolean; reason: string }> {
  const gpu = (navigator as Navigator & { gpu?: GPU }).gpu;
  if (!gpu) return { ok: false, reason: 'navigator.gpu is missing' };
  try {
    const adapter = await gpu.requestAdapter();
    if (!adapter) return { ok: false, reason: 'no WebGPU adapter' };
    return { ok: true, reason: '' };
  } catch (e) {
    return { ok: false, reason: String((e as Error).message ?? e) };
  }
}

const gpu = await probeWebGpu();
const banner = q('#lilypad-gpu');
banner.dataset.webgpu = String(gpu.ok);
banner.textContent = gpu.ok ? '' : `No WebGPU in this view (${gpu.reason}): models run with the native lilypad binary; scripted replies still work here.`;
post({ type: 'ready', webgpu: gpu.ok, reason: gpu.reason });

Object.assign(window, { lilypadAgent: { panel, AgentSession } });
