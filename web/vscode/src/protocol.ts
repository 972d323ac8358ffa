/** Messages between the extension host and the webview (both directions are JSON-clonable). */

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
  | { type: 'workspace'; name: string; files: WorkspaceFile[] }
  | { type: 'pending'; changes: Array<ProposedChange & { original: string | null }> }
  | { type: 'discard'; changes: Array<ProposedChange & { original: string | null }> }
  | { type: 'applied'; paths: string[] }
  | { type: 'solve'; task: string }
  | { type: 'focus' }
  | { type: 'settings'; settings: ViewSettings }
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
  | { type: 'models'; models: Array<{ url: string; bytes: number; complete: boolean; updated: number }> }
  | { type: 'deleted'; url: string };

/** The settings the view uses (the rest are the extension host's). */
export interface ViewSettings {
  model: string;
  maxSteps: number;
  thinking: boolean;
  temperature: number;
}
