/**
 * The agent page of the playground: the agent panel with two kinds of model, a GGUF loaded
 * into the browser engine (kept loaded between runs) or scripted replies.
 */
import { type Engine, createEngine } from '../lib/index';
import { engineModel, progressText, scriptedModelFromJson } from './models';
import { AgentPanel } from './panel';
import { AgentSession } from './session';
import { PRESETS } from '../ui/presets';

let loaded: { url: string; engine: Engine } | undefined;

async function engineFor(url: string, onStatus: (t: string) => void): Promise<Engine> {
  if (loaded?.url === url) return loaded.engine;
  await loaded?.engine.unload();
  loaded = undefined;
  const engine = await createEngine({
    model: url,
    onProgress: (p) => onStatus(progressText(p)),
  });
  loaded = { url, engine };
  return engine;
}

function save(name: string, data: Uint8Array | string, type: string) {
  const url = URL.createObjectURL(new Blob([data as BlobPart], { type }));
  const a = Object.assign(document.createElement('a'), { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

const panel = new AgentPanel(document.getElementById('agent')!, {
  models: [
    { id: 'engine', label: 'A GGUF model in this tab (WebGPU)', input: 'url', value: PRESETS[0].url, chooser: { base: location.href } },
    { id: 'scripted', label: 'Scripted replies (for demos and tests)', input: 'script', value: '[]' },
  ],
  async createModel(choice, input, onStatus) {
    if (choice === 'scripted') return scriptedModelFromJson(input);
    const engine = await engineFor(new URL(input.trim(), location.href).href, onStatus);
    return engineModel(engine, await engine.info());
  },
  save,
});

// For scripts and tests driving the page.
Object.assign(window, { lilypadAgent: { panel, AgentSession } });
