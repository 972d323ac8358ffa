/** Messages between the extension host and the webview (JSON-clonable, and byte arrays). */
import type { CommandResult } from './terminal';

/**
 * Whether a model setting names a file on this machine (an absolute or `file:` path), not a URL.
 * The same rule tells a LoRA folder on this machine from a folder URL (`lilypad.lora`).
 */
export function isModelFile(model: string): boolean {
  return model.startsWith('/') || /^[A-Za-z]:[\\/]/.test(model) || model.startsWith('file:');
}


export interface WorkspaceFile {
  /** Relative to the workspace folder, '/'-separated. */
  path: string;
  data: number[];
}

/** A file as the agent left it, relative to the workspace folder. */
export interface ProposedChange {
  path: string;
  change: 'added' | 'modified' | 'deleted';
  /** The proposed contents; null for a deletion. */
  text: string | null;
}

export type ToView =
  | { type: 'workspace'; name: string; files: WorkspaceFile[]; pending: ProposedChange[] }
  | { type: 'pending'; changes: Array<ProposedChange & { original: string | null }> }
  | { type: 'discard'; changes: Array<ProposedChange & { original: string | null }> }
  | { type: 'applied'; paths: string[] }
  | { type: 'solve'; task: string }
  | { type: 'chat'; text?: string }
  | { type: 'settings'; settings: ViewSettings }
  | { type: 'commandResult'; id: number; result?: CommandResult; refused?: string }
  | { type: 'modelChunk'; path: string; data: Uint8Array; done: number; size: number }
  | { type: 'modelError'; path: string; message: string }
  | { type: 'loraFiles'; path: string; config: Uint8Array; weights: Uint8Array }
  | { type: 'loraError'; path: string; message: string }
  | { type: 'listModels' }
  | { type: 'deleteModel'; url: string };

export type FromView =
  | { type: 'ready'; webgpu: boolean; reason: string }
  | { type: 'changes'; changes: ProposedChange[] }
  | { type: 'showDiff'; path: string }
  | { type: 'accept'; paths: string[] }
  | { type: 'discard'; paths: string[] }
  | { type: 'save'; name: string; data: string | number[] }
  | { type: 'native'; task: string }
  | { type: 'readModel'; path: string }
  | { type: 'readLora'; path: string }
  | { type: 'command'; id: number; command: string; timeoutMs: number }
  | { type: 'models'; models: Array<{ url: string; bytes: number; complete: boolean; updated: number }> }
  | { type: 'deleted'; url: string }
  /** The model chosen in the view: becomes the lilypad.model setting. */
  | { type: 'setModel'; model: string };

/** The settings the view uses (the rest are the extension host's). */
export interface ViewSettings {
  /** As configured: a URL, a file path or `scripted:…`. */
  model: string;
  /** As configured: a PEFT LoRA adapter's folder, a URL or a path on this machine; '' for none. */
  lora: string;
  /** Speculative decoding's draft (the lilypad.draft setting). */
  draft: 'none' | 'lookup' | 'mtp';
  maxSteps: number;
  thinking: boolean;
  temperature: number;
  topP: number;
  topK: number;
  /** The agent's Bash runs in a real terminal, each command approved by the user. */
  terminal: boolean;
}
