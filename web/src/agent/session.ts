/**
 * An agent session over one imported project: the workspace in wasm (files, tools, shell,
 * diff, undo), Python through Pyodide, and agent runs against any ModelHost. UI-free, so the
 * playground's panel and the VS Code webview drive the same object.
 */
import init, { AgentWorkspace, type ModelHost, type TerminalHost, toolSchemas } from './wasm/lilypad_agent_wasm.js';
import { type PythonOptions, type WorkerPython, loadPython } from './python';
import type { Sampling } from '../lib/wire';
import type { AgentConfig, AgentEvent, Observation, Trajectory } from './wire';

export type { ModelHost, PythonHost, TerminalHost } from './wasm/lilypad_agent_wasm.js';

let wasm: Promise<unknown> | undefined;
const ready = () => (wasm ??= init());

let python: Promise<WorkerPython> | undefined;
/** Python's worker is started once per page and shared by every session. */
export function sharedPython(options?: PythonOptions): Promise<WorkerPython> {
  python ??= loadPython(options).catch((e) => {
    python = undefined;
    throw e;
  });
  return python;
}

// The agent's events and records, generated from its Rust types.
export type { AgentConfig, AgentEvent, CallRecord, Exit, Observation, StepRecord, Trajectory } from './wire';
export type { ToolCall } from '../lib/wire';

/** AgentConfig's fields, all optional (defaults: FrogNano's evaluation settings). */
export type AgentSettings = Partial<Omit<AgentConfig, 'sampling'>> & { sampling?: Partial<Sampling> };

export interface ProjectFile {
  /** Relative path; a single top folder wrapping everything is unwrapped. */
  path: string;
  data: Uint8Array;
}

export class AgentSession {
  private running?: { stop: boolean };

  private constructor(readonly workspace: AgentWorkspace, readonly name: string) {}

  /** A zip or .tar.gz of the project. */
  static async fromArchive(data: Uint8Array, name = 'project'): Promise<AgentSession> {
    await ready();
    return new AgentSession(AgentWorkspace.fromArchive(data), name);
  }

  static async fromFiles(files: ProjectFile[], name = 'project'): Promise<AgentSession> {
    await ready();
    return new AgentSession(
      AgentWorkspace.fromFiles(files.map((f) => f.path), files.map((f) => f.data)),
      name,
    );
  }

  /** Files picked in a browser (`<input type=file webkitdirectory>` or a zip). */
  static async fromPicked(picked: FileList | File[]): Promise<AgentSession> {
    const list = [...picked];
    if (list.length === 1 && !list[0].webkitRelativePath) {
      const file = list[0];
      return AgentSession.fromArchive(new Uint8Array(await file.arrayBuffer()), file.name.replace(/\.(zip|tar\.gz|tgz)$/, ''));
    }
    const files = await Promise.all(
      list.map(async (f) => ({ path: f.webkitRelativePath || f.name, data: new Uint8Array(await f.arrayBuffer()) })),
    );
    const name = files[0]?.path.split('/')[0] || 'project';
    return AgentSession.fromFiles(files, name);
  }

  /** Lets the shell run python, python3 and pytest (loads Pyodide on first use). */
  async enablePython(options?: PythonOptions): Promise<WorkerPython> {
    const runner = await sharedPython(options);
    this.workspace.setPython(runner);
    this.python = runner;
    return runner;
  }

  /** The shell's Python, once enabled. */
  python?: WorkerPython;

  get root(): string {
    return this.workspace.root();
  }

  files(): string[] {
    return this.workspace.files();
  }

  readText(path: string): string {
    return new TextDecoder().decode(this.workspace.readFile(path));
  }

  writeText(path: string, text: string): void {
    this.workspace.writeFile(path, new TextEncoder().encode(text));
  }

  /** Files added, modified or deleted since the import. */
  changes(): Array<{ path: string; change: 'added' | 'modified' | 'deleted' }> {
    return this.workspace.changes();
  }

  /** All changes as a `git diff` patch. */
  patch(): string {
    return this.workspace.diff();
  }

  undo(): void {
    this.workspace.undo();
  }

  exportZip(): Uint8Array {
    return this.workspace.exportZip();
  }

  /** One tool call, exactly as the agent would make it (refused while the agent runs). */
  async tool(name: string, args: Record<string, unknown>): Promise<Observation> {
    return (await this.workspace.tool(name, args)) as Observation;
  }

  /** Runs the project's tests through the agent's Bash tool. */
  runTests(command = 'python -m pytest -q'): Promise<Observation> {
    return this.tool('Bash', { command, description: 'Run the tests' });
  }

  get isRunning(): boolean {
    return this.running !== undefined;
  }

  /** Runs the agent; resolves to the finished trajectory. stop() ends it after the current token. */
  async run(
    task: string,
    model: ModelHost,
    settings: AgentSettings = {},
    onEvent: (e: AgentEvent) => void = () => {},
    terminal?: TerminalHost,
  ): Promise<Trajectory> {
    if (this.running) throw new Error('the agent is already running');
    const run = (this.running = { stop: false });
    try {
      return (await this.workspace.run(task, settings, model, (event: AgentEvent) => {
        onEvent(event);
        return !run.stop;
      }, terminal)) as Trajectory;
    } finally {
      this.running = undefined;
    }
  }

  stop(): void {
    if (this.running) this.running.stop = true;
  }
}

/** FrogNano's tool schemas as the model sees them. */
export async function agentTools(): Promise<unknown[]> {
  await ready();
  return toolSchemas();
}
