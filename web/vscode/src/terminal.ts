/**
 * The agent's `Bash` in a real terminal, for users who opt in (`lilypad.terminal`). Every command
 * is shown in a modal dialog and runs only when the user allows it; it runs in the workspace
 * folder as it is on disk, its output appears in a "lilypad" terminal and goes back to the agent.
 * Without the setting, `Bash` stays in the view's shell over its copy of the folder.
 */
import { spawn } from 'node:child_process';
import * as vscode from 'vscode';

/** What the agent's TerminalHost receives (crates/agent-wasm: TerminalHost). */
export interface CommandResult {
  output: string;
  exit_code: number | null;
  timed_out: boolean;
}

/** Output kept for the agent: its start and its end (the agent cuts it further). */
const KEEP_CHARS = 1 << 20;

export class AgentTerminal implements vscode.Disposable {
  private terminal?: vscode.Terminal;
  private write = new vscode.EventEmitter<string>();
  private opened?: Promise<void>;

  /**
   * Asks the user, then runs `command`. Rejects with the reason the model is told when the user
   * says no. `pending` is how many proposed changes are not on disk yet; `acceptPending` writes
   * them first when the user chooses that.
   */
  async run(command: string, timeoutMs: number, pending: number, acceptPending: () => Promise<void>): Promise<CommandResult> {
    const root = vscode.workspace.workspaceFolders?.[0]?.uri;
    if (!root || root.scheme !== 'file') throw new Error('The terminal needs a folder on this machine; the command did not run.');
    const detail = pending
      ? `It runs in ${root.fsPath}. ${pending} proposed change${pending === 1 ? ' is' : 's are'} not on disk yet: the command sees the files as they are on disk.`
      : `It runs in ${root.fsPath}.`;
    const actions = pending ? ['Run', 'Accept changes and run'] : ['Run'];
    const choice = await vscode.window.showWarningMessage(`lilypad wants to run a command in a terminal:\n\n${command}`, { modal: true, detail }, ...actions);
    if (!choice) throw new Error('The user did not allow this command to run.');
    if (choice !== 'Run') await acceptPending();
    await this.show();
    this.print(`\x1b[1m$ ${command}\x1b[0m\r\n`);
    const result = await execute(command, root.fsPath, timeoutMs, (text) => this.print(text.replace(/\r?\n/g, '\r\n')));
    this.print(result.timed_out ? `\x1b[33m[stopped after ${timeoutMs} ms]\x1b[0m\r\n` : `\x1b[2m[exit code ${result.exit_code}]\x1b[0m\r\n`);
    return result;
  }

  private print(text: string) {
    this.write.fire(text);
  }

  private show(): Promise<void> {
    if (!this.terminal || this.terminal.exitStatus) {
      let open!: () => void;
      this.opened = new Promise((r) => (open = r));
      this.terminal = vscode.window.createTerminal({
        name: 'lilypad',
        pty: {
          onDidWrite: this.write.event,
          open: () => open(),
          close: () => (this.terminal = undefined),
        },
      });
    }
    this.terminal.show(true);
    return this.opened!;
  }

  dispose() {
    this.terminal?.dispose();
    this.write.dispose();
  }
}

/** Runs `command` through the system shell; on timeout its whole process group is stopped. */
function execute(command: string, cwd: string, timeoutMs: number, onOutput: (text: string) => void): Promise<CommandResult> {
  return new Promise((resolve) => {
    const group = process.platform !== 'win32';
    const child = spawn(command, { cwd, shell: true, detached: group, stdio: ['ignore', 'pipe', 'pipe'] });
    let head = '';
    let tail = '';
    let dropped = 0;
    const take = (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      onOutput(text);
      if (head.length < KEEP_CHARS) head += text;
      else {
        tail += text;
        if (tail.length > KEEP_CHARS) {
          dropped += tail.length - KEEP_CHARS;
          tail = tail.slice(-KEEP_CHARS);
        }
      }
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        if (group && child.pid) process.kill(-child.pid, 'SIGKILL');
        else child.kill('SIGKILL');
      } catch {}
    }, timeoutMs);
    const done = (code: number | null, error?: Error) => {
      clearTimeout(timer);
      const gap = dropped ? `\n[… ${dropped} characters …]\n` : '';
      const output = error ? `${error.message}\n` : head + gap + tail;
      resolve({ output, exit_code: timedOut ? null : code ?? (error ? 127 : null), timed_out: timedOut });
    };
    child.on('error', (e) => done(null, e));
    child.on('close', (code) => done(code));
  });
}
