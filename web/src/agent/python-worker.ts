/**
 * The agent's Python worker: Pyodide runs here, off the page's thread, so a program the model
 * wrote never freezes the page, and one that will not stop can be ended by terminating this
 * worker (python.ts does that at the command's time limit).
 *
 * Messages: `{ type: 'load', indexURL, assets? }` answers `{ type: 'ready', version }` or
 * `{ type: 'failed', message }`; `{ type: 'run', id, request }` answers
 * `{ type: 'result', id, result }` or `{ type: 'error', id, message, fatal }`. `assets` maps file
 * names under indexURL to blob URLs the page made, for pages whose workers cannot fetch from
 * the page's origin (editor webviews).
 */
import { type PyodideRunner, type RunRequest, startPyodide } from './pyodide-runner';

export type ToPythonWorker =
  | { type: 'load'; indexURL: string; assets?: Record<string, string> }
  | { type: 'run'; id: number; request: RunRequest };

export type FromPythonWorker =
  | { type: 'ready'; version: string }
  | { type: 'failed'; message: string }
  | { type: 'result'; id: number; result: ReturnType<PyodideRunner['run']> }
  /** `fatal`: Pyodide failed, not the program (a PythonError is the program's). */
  | { type: 'error'; id: number; message: string; fatal: boolean };

const post = (m: FromPythonWorker, transfer: Transferable[] = []) => postMessage(m, { transfer });
let runner: Promise<PyodideRunner> | undefined;

/** Requests for Pyodide's files go to the page's copies (blob URLs) where it made them. */
function serveFrom(indexURL: string, assets: Record<string, string>) {
  const fetchFromNetwork = globalThis.fetch.bind(globalThis);
  globalThis.fetch = (input: RequestInfo | URL, init?: RequestInit) => {
    const url = input instanceof Request ? input.url : String(input);
    const asset = url.startsWith(indexURL) ? assets[url.slice(indexURL.length)] : undefined;
    return fetchFromNetwork(asset ?? input, init);
  };
}

async function load(indexURL: string, assets?: Record<string, string>): Promise<PyodideRunner> {
  if (assets) serveFrom(indexURL, assets);
  const script = assets?.['pyodide.mjs'] ?? `${indexURL}pyodide.mjs`;
  const { loadPyodide } = (await import(/* @vite-ignore */ script)) as typeof import('pyodide');
  // Pyodide imports its runtime itself unless it is given: from a blob, it could not.
  const createPyodideModule = assets?.['pyodide.asm.mjs']
    ? ((await import(/* @vite-ignore */ assets['pyodide.asm.mjs'])) as { default: never }).default
    : undefined;
  return startPyodide(indexURL, loadPyodide, createPyodideModule ? { createPyodideModule } : {});
}

/** The buffers a result's files own alone, moved to the page instead of copied. */
function buffers(result: ReturnType<PyodideRunner['run']>): Transferable[] {
  const own = new Set<ArrayBuffer>();
  for (const [, data] of result.changes) {
    if (data && data.byteOffset === 0 && data.byteLength === data.buffer.byteLength) own.add(data.buffer as ArrayBuffer);
  }
  return [...own];
}

self.onmessage = async (e: MessageEvent<ToPythonWorker>) => {
  const m = e.data;
  if (m.type === 'load') {
    runner = load(m.indexURL, m.assets);
    try {
      post({ type: 'ready', version: (await runner).version });
    } catch (err) {
      post({ type: 'failed', message: String((err as Error)?.message ?? err) });
    }
    return;
  }
  try {
    if (!runner) throw new Error('Python is not loaded');
    const result = (await runner).run(m.request);
    post({ type: 'result', id: m.id, result }, buffers(result));
  } catch (err) {
    const fatal = (err as Error)?.constructor?.name !== 'PythonError';
    post({ type: 'error', id: m.id, message: String((err as Error)?.message ?? err), fatal });
  }
};
