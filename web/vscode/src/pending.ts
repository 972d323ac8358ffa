/**
 * The agent's edits as pending changes: proposed contents served under the `lilypad-pending:`
 * scheme so VS Code's diff editor shows them next to the file on disk, and applied only when the
 * user accepts them, through a WorkspaceEdit (so Undo in the editor takes them back).
 */
import * as vscode from 'vscode';
import { resolveInWorkspace } from './extension';
import type { ProposedChange } from './protocol';

export const SCHEME = 'lilypad-pending';

export interface PendingChange extends ProposedChange {
  /** The file on disk when the change was proposed; null when it does not exist. */
  original: string | null;
}

async function readText(uri: vscode.Uri): Promise<string | null> {
  try {
    return new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
  } catch {
    return null;
  }
}

export class PendingChanges implements vscode.TextDocumentContentProvider {
  private changes = new Map<string, PendingChange>();
  private emitter = new vscode.EventEmitter<vscode.Uri>();
  private pendingEmitter = new vscode.EventEmitter<void>();
  readonly onDidChange = this.emitter.event;
  readonly onDidChangePending = this.pendingEmitter.event;

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.changes.get(uri.path.replace(/^\//, ''))?.text ?? '';
  }

  list(): PendingChange[] {
    return [...this.changes.values()];
  }

  paths(): string[] {
    return [...this.changes.keys()];
  }

  get(path: string): PendingChange | undefined {
    return this.changes.get(path);
  }

  /** Replaces the pending set with what the agent's workspace differs in from the disk. */
  async set(proposed: ProposedChange[]) {
    const next = new Map<string, PendingChange>();
    for (const c of proposed) {
      const original = await readText(resolveInWorkspace(c.path));
      // Already on disk (accepted earlier, or the same edit made by hand): nothing pending.
      if (original === c.text) continue;
      next.set(c.path, { ...c, original });
    }
    const same = next.size === this.changes.size &&
      [...next].every(([p, c]) => this.changes.get(p)?.text === c.text && this.changes.get(p)?.original === c.original);
    this.changes = next;
    for (const p of next.keys()) this.emitter.fire(this.pendingUri(p));
    if (!same) this.pendingEmitter.fire();
  }

  drop(paths: string[]) {
    for (const p of paths) this.changes.delete(p);
    this.pendingEmitter.fire();
  }

  pendingUri(path: string): vscode.Uri {
    return vscode.Uri.from({ scheme: SCHEME, path: `/${path}` });
  }

  async showDiff(path: string) {
    const c = this.changes.get(path);
    if (!c) return;
    const disk = resolveInWorkspace(path);
    const left = c.original === null ? vscode.Uri.from({ scheme: SCHEME, path: '/', query: 'empty' }) : disk;
    await vscode.commands.executeCommand('vscode.diff', left, this.pendingUri(path), `${path} (proposed by lilypad)`);
  }

  async review() {
    const pick = await vscode.window.showQuickPick(
      this.list().map((c) => ({ label: c.path, description: c.change })),
      { placeHolder: this.changes.size ? 'Show the diff of…' : 'No proposed changes' },
    );
    if (pick) await this.showDiff(pick.label);
  }

  /** Writes the chosen changes to the folder in one WorkspaceEdit and saves them; returns the paths applied. */
  async accept(paths: string[]): Promise<string[]> {
    const edit = new vscode.WorkspaceEdit();
    const applied: string[] = [];
    for (const path of paths) {
      const c = this.changes.get(path);
      if (!c) continue;
      const uri = resolveInWorkspace(path);
      if (c.change === 'deleted' || c.text === null) {
        edit.deleteFile(uri, { ignoreIfNotExists: true });
      } else if (c.original === null) {
        edit.createFile(uri, { overwrite: true, contents: new TextEncoder().encode(c.text) });
      } else {
        const doc = await vscode.workspace.openTextDocument(uri);
        edit.replace(uri, new vscode.Range(doc.positionAt(0), doc.positionAt(doc.getText().length)), c.text);
      }
      applied.push(path);
    }
    if (!applied.length) return [];
    if (!(await vscode.workspace.applyEdit(edit))) throw new Error('VS Code refused the edit');
    for (const path of applied) {
      const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === resolveInWorkspace(path).toString());
      if (doc?.isDirty) await doc.save();
      this.changes.delete(path);
    }
    this.pendingEmitter.fire();
    return applied;
  }
}
