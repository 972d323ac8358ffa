/**
 * The native path, for views without WebGPU: the `lilypad agent-stdio` binary (the same shaders
 * on Vulkan, Metal or DX12) as a child process speaking JSON lines. It works on an in-memory
 * snapshot of the folder and answers with the changed files, which become pending changes like
 * the view's: nothing is written until the user accepts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import * as readline from 'node:readline';
import * as vscode from 'vscode';
import { workspaceRoot } from './extension';
import type { PendingChanges } from './pending';
import { isModelFile } from './protocol';
import type { Event, Request } from './stdio-wire';

/** One line of `lilypad agent-stdio`'s output (types generated from its Rust definitions). */
export type NativeEvent = Event;

export class NativeAgent {
  private output = vscode.window.createOutputChannel('lilypad (native)');
  private child?: ChildProcess;
  /** Every event of the last run, for tests and the log. */
  events: NativeEvent[] = [];

  constructor(private pending: PendingChanges) {}

  async offer(task: string) {
    const mode = vscode.workspace.getConfiguration('lilypad').get<string>('nativeFallback');
    if (mode === 'never') {
      void vscode.window.showErrorMessage('lilypad: this view has no WebGPU and the native fallback is off (lilypad.nativeFallback).');
      return;
    }
    if (mode === 'ask') {
      const go = await vscode.window.showWarningMessage(
        'lilypad: this view has no WebGPU. Run the agent with the native lilypad binary?', 'Run natively');
      if (!go) return;
    }
    await this.solve(task);
  }

  /** Runs one task to the end; resolves to the exit reason. */
  async solve(task: string): Promise<string> {
    const root = workspaceRoot();
    if (!root || root.scheme !== 'file') throw new Error('the native agent needs a folder on this machine');
    if (this.child) throw new Error('the native agent is already running');
    const config = vscode.workspace.getConfiguration('lilypad');
    const model = config.get<string>('model') ?? '';
    if (!model) throw new Error('choose a model first (lilypad: Choose model)');
    const lora = (config.get<string>('lora') ?? '').trim();
    const scripted = model.startsWith('scripted:');
    const draft = config.get<string>('draft') ?? 'none';
    // `lilypad agent-stdio` reads an adapter folder on this machine; a folder URL is for the
    // view's engine only: say so rather than pass it over silently.
    const loraFolder = lora && !scripted && isModelFile(lora) ? localPath(lora) : undefined;
    if (lora && !scripted && !loraFolder) {
      this.output.appendLine(`lilypad.lora (${lora}) is a URL: the native agent reads adapter folders on this machine, so it runs the base model`);
      void vscode.window.showWarningMessage('lilypad: the native agent reads LoRA adapters from folders on this machine; it runs the base model.');
    }
    const request: Request = {
      type: 'solve',
      task,
      model: scripted
        ? { scripted: model.slice('scripted:'.length) }
        : {
            gguf: {
              path: model,
              ...(loraFolder && { lora: loraFolder }),
              ...(draft !== 'none' && { draft }),
            },
          },
      repo: { folder: root.fsPath },
      settings: {
        max_steps: config.get<number>('maxSteps'),
        thinking: config.get<boolean>('thinking'),
        temperature: config.get<number>('temperature'),
        top_p: config.get<number>('topP'),
        top_k: config.get<number>('topK'),
      },
    };
    const binary = config.get<string>('nativeBinary') || 'lilypad';
    this.events = [];
    this.output.appendLine(`$ ${binary} agent-stdio  # ${task}`);
    const child = (this.child = spawn(binary, ['agent-stdio'], { stdio: ['pipe', 'pipe', 'pipe'] }));
    child.stdin!.write(`${JSON.stringify(request)}\n`);
    child.stderr!.on('data', (d: Buffer) => this.output.append(d.toString()));
    let exit = 'no answer';
    const lines = readline.createInterface({ input: child.stdout! });
    return vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: 'lilypad (native)', cancellable: true },
      (progress, token) => new Promise<string>((resolve, reject) => {
        token.onCancellationRequested(() => child.stdin!.write('{"type":"cancel"}\n'));
        child.on('error', (e) => {
          this.child = undefined;
          reject(new Error(`could not start ${binary}: ${e.message}`));
        });
        lines.on('line', (line) => {
          let e: NativeEvent;
          try {
            e = JSON.parse(line) as NativeEvent;
          } catch {
            return;
          }
          this.events.push(e);
          this.output.appendLine(line.length > 400 ? `${line.slice(0, 400)}…` : line);
          if (e.type === 'step_started') progress.report({ message: `step ${e.index + 1}` });
          if (e.type === 'load_progress') progress.report({ message: `loading ${e.tensor}` });
          if (e.type === 'error') exit = `error: ${e.message}`;
          if (e.type === 'done') {
            exit = e.exit?.reason ?? 'done';
            const changes = e.changes.map((c) => ({ path: c.path, change: c.change, text: c.text }));
            void this.pending.set(changes).then(async () => {
              if (!changes.length) return;
              const go = await vscode.window.showInformationMessage(
                `lilypad proposes changes to ${changes.length} file${changes.length === 1 ? '' : 's'}.`, 'Review');
              if (go) await vscode.commands.executeCommand('lilypad.review');
            });
          }
        });
        child.on('close', (code) => {
          this.child = undefined;
          this.output.appendLine(`exit ${code}: ${exit}`);
          if (code === 0) resolve(exit);
          else reject(new Error(`the native agent stopped (${exit})`));
        });
      }),
    );
  }
}

/** A `file:` URL or a path, as a path on this machine. */
function localPath(setting: string): string {
  return setting.startsWith('file:') ? vscode.Uri.parse(setting).fsPath : setting;
}
