/**
 * Python for the agent's shell, in a worker (python-worker.ts): Pyodide, served with the app
 * from /pyodide/ (never from a CDN), with pytest. The page never waits on a program: each run
 * is a message to the worker, answered with the program's output and the files it changed.
 * The worker stops a program at its time limit itself when it can (an interrupt, for Python
 * code); one it cannot stop in time (a long C call, a program that defeats the interrupt) is
 * ended by terminating the worker, and a fresh one starts for the next command.
 */
import type { FromPythonWorker, ToPythonWorker } from './python-worker';
import type { PythonHost, PythonResult } from './wasm/lilypad_agent_wasm.js';

type RunRequest = Parameters<PythonHost['run']>[0];

export interface PythonOptions {
  /** Where pyodide/ (the runtime and wheels/) is served; default: the page's base URL. */
  baseUrl?: string;
  /**
   * Starts the worker, for pages whose workers cannot load scripts from the page's origin
   * (editor webviews). The page then also fetches Pyodide's files and hands them over.
   */
  startWorker?: () => Worker | Promise<Worker>;
}

/** How long past a command's time limit the worker may take to stop the program itself. */
export const STOP_GRACE_MS = 1000;

/** Pyodide's files, as the worker asks for them (wheels are listed in wheels/wheels.json). */
const RUNTIME_FILES = ['pyodide.mjs', 'pyodide.asm.mjs', 'pyodide.asm.wasm', 'python_stdlib.zip', 'pyodide-lock.json'];

/** Starts the worker and waits until Python is ready; resolves to the agent's PythonHost. */
export async function loadPython(options: PythonOptions = {}): Promise<WorkerPython> {
  const python = new WorkerPython(options);
  await python.ready();
  return python;
}

/** One start of Python's worker: it is the one in use while `current` points to it. */
interface Start {
  worker?: Worker;
  ready: Promise<void>;
  /** Fails the start (no-op once it has settled). */
  fail: (e: Error) => void;
}

export class WorkerPython implements PythonHost {
  /** The Python version, e.g. "3.14.0" (known once ready). */
  version = '';
  /** Runs ended by terminating the worker. */
  restarts = 0;
  private current?: Start;
  /** Runs go to the worker one at a time, so each one's time limit counts from its own start. */
  private queue: Promise<unknown> = Promise.resolve();
  private nextId = 0;
  private pending = new Map<number, { resolve: (r: PythonResult) => void; reject: (e: Error) => void }>();
  private readonly indexURL: string;
  private assets?: Promise<Record<string, string>>;

  constructor(private readonly options: PythonOptions) {
    const base = new URL(options.baseUrl ?? import.meta.env.BASE_URL, location.href);
    this.indexURL = new URL('pyodide/', base).href;
  }

  /** Resolves when a worker with Python is up (starting one if none is). */
  ready(): Promise<void> {
    return (this.current ??= this.launch()).ready;
  }

  run(request: RunRequest): Promise<PythonResult> {
    const run = this.queue.then(() => this.runNow(request));
    this.queue = run.catch(() => {});
    return run;
  }

  private async runNow(request: RunRequest): Promise<PythonResult> {
    // The worker that answered ready, as long as it is still the one in use (a restart in
    // between starts another, which is waited for in turn).
    let start: Start;
    do {
      start = this.current ??= this.launch();
      await start.ready;
    } while (start !== this.current);
    const worker = start.worker!;
    const id = this.nextId++;
    const answer = new Promise<PythonResult>((resolve, reject) => this.pending.set(id, { resolve, reject }));
    // The request's arrays are copies made for it: their buffers move to the worker.
    const arrays = [request.stdin, ...request.files.map(([, data]) => data)];
    const transfer = new Set(arrays.filter((a) => a.byteOffset === 0 && a.byteLength === a.buffer.byteLength).map((a) => a.buffer as ArrayBuffer));
    worker.postMessage({ type: 'run', id, request } satisfies ToPythonWorker, { transfer: [...transfer] });
    const limit = request.timeout_ms;
    if (limit === undefined) return answer;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<PythonResult>((resolve) => {
      timer = setTimeout(() => {
        this.pending.delete(id);
        this.restart();
        resolve({
          exitCode: 124,
          output: [
            {
              stream: 'stderr',
              text: `${request.argv[0]}: stopped at the command's time limit (Python was restarted; files it wrote were not kept)\n`,
            },
          ],
          changes: [],
        });
      }, limit + STOP_GRACE_MS);
    });
    try {
      return await Promise.race([answer, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Ends the worker (and whatever it runs, or its start) and starts a fresh one. */
  restart() {
    const old = this.current;
    this.current = undefined;
    if (old) {
      old.worker?.terminate();
      old.fail(new Error('Python was restarted'));
    }
    this.restarts++;
    for (const { reject } of this.pending.values()) reject(new Error('Python was restarted'));
    this.pending.clear();
    // Loading takes seconds: start now, so the next command finds it ready.
    this.ready().catch(() => {});
  }

  /**
   * Starts a worker. Its events count only while it is the current one; a start that fails
   * is dropped (the next run tries again and hears why), never retried on its own.
   */
  private launch(): Start {
    let succeed!: () => void;
    let fail!: (e: Error) => void;
    const ready = new Promise<void>((resolve, reject) => {
      succeed = resolve;
      fail = reject;
    });
    const start: Start = { ready, fail };
    let up = false;
    const isCurrent = () => this.current === start;
    ready.then(
      () => (up = true),
      () => {
        if (!isCurrent()) return;
        this.current = undefined;
        start.worker?.terminate();
      },
    );
    (async () => {
      const worker =
        (await this.options.startWorker?.()) ??
        new Worker(new URL('./python-worker.ts', import.meta.url), { type: 'module', name: 'lilypad-python' });
      if (!isCurrent()) return worker.terminate();
      start.worker = worker;
      worker.onmessage = (e: MessageEvent<FromPythonWorker>) => {
        if (!isCurrent()) return;
        const m = e.data;
        switch (m.type) {
          case 'ready':
            this.version = m.version;
            succeed();
            break;
          case 'failed':
            fail(new Error(`Python did not start: ${m.message}`));
            break;
          case 'result':
            this.pending.get(m.id)?.resolve(m.result);
            this.pending.delete(m.id);
            break;
          case 'error':
            this.pending.get(m.id)?.reject(new Error(m.message));
            this.pending.delete(m.id);
            // Pyodide itself failed (not the program): it may be unusable now.
            if (m.fatal) this.restart();
            break;
        }
      };
      worker.onerror = (e) => {
        if (!isCurrent()) return;
        const error = new Error(`Python's worker failed: ${e.message}`);
        fail(error);
        for (const { reject } of this.pending.values()) reject(error);
        this.pending.clear();
        // A worker that was up gets a successor; one that never started is left for the
        // next run to try again.
        if (up) this.restart();
      };
      const assets = this.options.startWorker ? await (this.assets ??= this.fetchAssets()) : undefined;
      worker.postMessage({ type: 'load', indexURL: this.indexURL, assets } satisfies ToPythonWorker);
    })().catch((e) => fail(e instanceof Error ? e : new Error(String(e))));
    return start;
  }

  /** Pyodide's files fetched by the page, as blob URLs the worker can read (kept for restarts). */
  private async fetchAssets(): Promise<Record<string, string>> {
    const get = async (name: string) => {
      const res = await fetch(new URL(name, this.indexURL));
      if (!res.ok) throw new Error(`pyodide: ${name}: HTTP ${res.status}`);
      const type = name.endsWith('.mjs') ? 'text/javascript' : (res.headers.get('content-type') ?? '');
      return [name, URL.createObjectURL(new Blob([await res.arrayBuffer()], { type }))] as const;
    };
    const wheels = (await (await fetch(new URL('wheels/wheels.json', this.indexURL))).json()) as string[];
    const names = [...RUNTIME_FILES, 'wheels/wheels.json', ...wheels.map((w) => `wheels/${w}`)];
    return Object.fromEntries(await Promise.all(names.map(get)));
  }
}
