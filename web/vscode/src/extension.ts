/**
 * The lilypad extension host: an activity-bar webview that runs the agent panel (web/src/agent)
 * with the wasm engine, a repository bridge to the open folder (vscode.workspace.fs, confined to
 * the workspace folder), and the agent's edits kept as pending changes that the user reviews in
 * VS Code's diff editor and applies or discards. Nothing the agent does is written to disk until
 * the user accepts it. When the view has no WebGPU, the native `lilypad agent-stdio` runs as a
 * child process instead (native.ts). The agent's shell commands stay in the view unless the user
 * opts into a real terminal, where each command needs the user's approval (terminal.ts).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { PRESETS, formatBytes, presetFor, presetLabel } from '../../src/ui/presets';
import { NativeAgent } from './native';
import { AgentTerminal } from './terminal';
import { type PendingChange, PendingChanges, SCHEME } from './pending';
import { type FromView, type ProposedChange, type ToView, type ViewSettings, type WorkspaceFile, isModelFile } from './protocol';

/** Where the pending proposals are kept between sessions (workspace state). */
const PENDING_KEY = 'lilypad.pending';

/** Workspaces larger than this are not mirrored into the view. */
const MAX_FILES = 5000;
const MAX_BYTES = 64 << 20;
const EXCLUDE = '{**/.git/**,**/node_modules/**,**/target/**,**/__pycache__/**,**/.venv/**}';

export function activate(context: vscode.ExtensionContext) {
  const pending = new PendingChanges();
  // Proposals outlive a window reload or a restart: kept in the workspace's state, checked
  // against the disk again when restored.
  const saved = context.workspaceState.get<ProposedChange[]>(PENDING_KEY, []);
  const restored = pending.set(saved).catch(() => {});
  const view = new AgentView(context, pending, restored);
  const native = new NativeAgent(pending);
  context.subscriptions.push(
    vscode.workspace.registerTextDocumentContentProvider(SCHEME, pending),
    vscode.window.registerWebviewViewProvider('lilypad.agent', view, { webviewOptions: { retainContextWhenHidden: true } }),
    vscode.commands.registerCommand('lilypad.solve', async (task?: string) => {
      task ??= await vscode.window.showInputBox({ prompt: 'What should the agent do?', ignoreFocusOut: true });
      if (!task) return;
      if (view.webgpu === false) return native.offer(task);
      await view.reveal();
      view.post({ type: 'solve', task });
    }),
    vscode.commands.registerCommand('lilypad.chat', async () => {
      const editor = vscode.window.activeTextEditor;
      const selection = editor && !editor.selection.isEmpty ? editor.document.getText(editor.selection) : '';
      await view.reveal();
      view.post({ type: 'chat', text: selection && `\`\`\`\n${selection}\n\`\`\`\n` });
    }),
    vscode.commands.registerCommand('lilypad.chooseModel', chooseModel),
    vscode.commands.registerCommand('lilypad.manageModels', () => view.manageModels()),
    vscode.commands.registerCommand('lilypad.showDiff', (path: string) => pending.showDiff(path)),
    vscode.commands.registerCommand('lilypad.accept', async (path: string) => view.afterApply(await pending.accept([path]))),
    vscode.commands.registerCommand('lilypad.discard', (path: string) => view.discard([path])),
    vscode.commands.registerCommand('lilypad.acceptAll', async () => view.afterApply(await pending.accept(pending.paths()))),
    vscode.commands.registerCommand('lilypad.discardAll', () => view.discard(pending.paths())),
    vscode.commands.registerCommand('lilypad.review', () => pending.review()),
    pending.onDidChangePending(() => {
      view.post({ type: 'pending', changes: pending.list() });
      void context.workspaceState.update(PENDING_KEY, pending.list().map(({ path, change, text }) => ({ path, change, text })));
    }),
  );
  // For tests and other extensions: the pending changes and the view's WebGPU state.
  return { pending, view, native };
}

export function deactivate() {}

async function chooseModel() {
  const config = vscode.workspace.getConfiguration('lilypad');
  const current = config.get<string>('model') ?? '';
  // The presets the view can download (the same list as the view's chooser), with their sampling.
  const presets = PRESETS.filter((p) => !p.servedWithPage).map((p) => ({
    label: presetLabel(p),
    detail: p.note,
    description: p.url === current ? 'current' : undefined,
    id: p.id,
  }));
  const pick = await vscode.window.showQuickPick(
    [...presets, { label: 'A GGUF URL…', id: 'url' }, { label: 'A GGUF file on this machine…', id: 'file' }],
    { placeHolder: `Current model: ${current || 'none'}`, matchOnDetail: true },
  );
  if (!pick) return;
  const preset = PRESETS.find((p) => p.id === pick.id);
  let model: string | undefined;
  if (preset) model = preset.url;
  else if (pick.id === 'url') model = await vscode.window.showInputBox({ prompt: 'GGUF model URL', value: current });
  else model = (await vscode.window.showOpenDialog({ filters: { GGUF: ['gguf'] } }))?.[0]?.fsPath;
  if (model) await setModel(model);
}

/** Sets lilypad.model; a preset brings its sampling along (the view's chooser does the same). */
async function setModel(model: string) {
  const config = vscode.workspace.getConfiguration('lilypad');
  if (config.get<string>('model') === model) return;
  await config.update('model', model, vscode.ConfigurationTarget.Global);
  const sampling = presetFor(model)?.sampling;
  if (sampling) {
    await config.update('temperature', sampling.temperature, vscode.ConfigurationTarget.Global);
    await config.update('topP', sampling.top_p, vscode.ConfigurationTarget.Global);
    await config.update('topK', sampling.top_k, vscode.ConfigurationTarget.Global);
  }
}

/** The workspace folder the agent works on; every path from the view is resolved inside it. */
export function workspaceRoot(): vscode.Uri | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri;
}

/** Resolves a relative path inside the workspace folder, refusing anything that leaves it. */
export function resolveInWorkspace(path: string): vscode.Uri {
  const root = workspaceRoot();
  if (!root) throw new Error('no folder is open');
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.some((p) => p === '..') || path.startsWith('/') || path.includes('\\')) {
    throw new Error(`${path}: outside the workspace folder`);
  }
  return vscode.Uri.joinPath(root, ...parts);
}

/** The file a model setting names, if it names one. */
function modelFile(model: string): vscode.Uri | undefined {
  if (!isModelFile(model)) return undefined;
  return model.startsWith('file:') ? vscode.Uri.parse(model) : vscode.Uri.file(model);
}

function viewSettings(): ViewSettings {
  const config = vscode.workspace.getConfiguration('lilypad');
  return {
    model: (config.get<string>('model') ?? '').trim(),
    lora: (config.get<string>('lora') ?? '').trim(),
    draft: config.get<ViewSettings['draft']>('draft') ?? 'none',
    maxSteps: config.get<number>('maxSteps') ?? 30,
    thinking: config.get<boolean>('thinking') ?? true,
    temperature: config.get<number>('temperature') ?? 0.6,
    topP: config.get<number>('topP') ?? 0.95,
    topK: config.get<number>('topK') ?? 20,
    terminal: config.get<boolean>('terminal') ?? false,
  };
}

async function readWorkspace(): Promise<{ name: string; files: WorkspaceFile[] }> {
  const root = workspaceRoot();
  if (!root) return { name: 'workspace', files: [] };
  const folder = vscode.workspace.workspaceFolders![0];
  const uris = await vscode.workspace.findFiles(new vscode.RelativePattern(folder, '**/*'), EXCLUDE, MAX_FILES + 1);
  if (uris.length > MAX_FILES) throw new Error(`the folder has more than ${MAX_FILES} files`);
  let total = 0;
  const files: WorkspaceFile[] = [];
  for (const uri of uris) {
    const data = await vscode.workspace.fs.readFile(uri);
    total += data.byteLength;
    if (total > MAX_BYTES) throw new Error(`the folder holds more than ${MAX_BYTES >> 20} MiB`);
    const path = uri.path.slice(root.path.replace(/\/$/, '').length + 1);
    files.push({ path, data: Array.from(data) });
  }
  files.sort((a, b) => a.path.localeCompare(b.path));
  return { name: folder.name, files };
}

class AgentView implements vscode.WebviewViewProvider {
  private view?: vscode.WebviewView;
  /** What the view reported: undefined until it has looked. */
  webgpu?: boolean;
  private ready?: () => void;
  private readyPromise = new Promise<void>((r) => (this.ready = r));

  private terminal = new AgentTerminal();

  constructor(private context: vscode.ExtensionContext, private pending: PendingChanges, private restored: Promise<void>) {
    context.subscriptions.push(this.terminal);
  }

  async reveal() {
    await vscode.commands.executeCommand('lilypad.agent.focus');
    await this.readyPromise;
  }

  post(message: ToView) {
    void this.view?.webview.postMessage(message);
  }

  resolveWebviewView(view: vscode.WebviewView) {
    this.view = view;
    const dist = vscode.Uri.joinPath(this.context.extensionUri, 'dist');
    view.webview.options = { enableScripts: true, localResourceRoots: [dist] };
    const script = view.webview.asWebviewUri(vscode.Uri.joinPath(dist, 'webview.js'));
    const style = view.webview.asWebviewUri(vscode.Uri.joinPath(dist, 'webview.css'));
    const settings = viewSettings();
    this.context.subscriptions.push(vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration('lilypad')) this.post({ type: 'settings', settings: viewSettings() });
    }));
    view.webview.html = `<!doctype html>
<html lang="en"><head><meta charset="utf-8" />
<link rel="stylesheet" href="${style}" />
</head><body>
<div id="lilypad-gpu" aria-live="polite"></div>
<section id="lilypad-pending" hidden><h2>Proposed changes</h2>
<p>Nothing is written to the folder until you accept.</p>
<ul class="pending-list"></ul>
<div class="row"><button type="button" class="accept-all">Accept all</button> <button type="button" class="discard-all">Discard all</button></div>
</section>
<details id="lilypad-chat"><summary>Chat (the agent's model, no tools)</summary>
<div class="lilypad-chat-body"></div></details>
<main id="agent"></main>
<script>window.lilypadSettings = ${JSON.stringify(settings)};</script>
<script type="module" src="${script}"></script>
</body></html>`;
    view.webview.onDidReceiveMessage((m: FromView) => void this.onMessage(m).catch((e) => this.error(e)));
  }

  private modelList?: (models: Extract<FromView, { type: 'models' }>['models']) => void;

  /** The models cached in the view's storage: pick one to delete it. */
  async manageModels() {
    await this.reveal();
    const models = await new Promise<Extract<FromView, { type: 'models' }>['models']>((resolve) => {
      this.modelList = resolve;
      this.post({ type: 'listModels' });
    });
    const pick = await vscode.window.showQuickPick(
      models.map((m) => ({
        label: m.url,
        description: `${formatBytes(m.bytes)}${m.complete ? '' : ' (partial)'}`,
        detail: `stored ${new Date(m.updated).toLocaleString()}`,
      })),
      { placeHolder: models.length ? 'Choose a cached model to delete' : 'No cached models' },
    );
    if (!pick) return;
    const ok = await vscode.window.showWarningMessage(`Delete the cached copy of ${pick.label}?`, { modal: true }, 'Delete');
    if (ok) this.post({ type: 'deleteModel', url: pick.label });
  }

  private error(e: unknown) {
    void vscode.window.showErrorMessage(`lilypad: ${(e as Error).message ?? e}`);
  }

  private async onMessage(m: FromView) {
    switch (m.type) {
      case 'ready': {
        this.webgpu = m.webgpu;
        await this.restored;
        const workspace = await readWorkspace();
        this.post({ type: 'workspace', ...workspace, pending: this.pending.list() });
        this.post({ type: 'pending', changes: this.pending.list() });
        this.ready?.();
        if (!m.webgpu) void this.noWebGpu(m.reason);
        break;
      }
      case 'changes':
        await this.pending.set(m.changes);
        break;
      case 'showDiff':
        await this.pending.showDiff(m.path);
        break;
      case 'accept':
        this.afterApply(await this.pending.accept(m.paths));
        break;
      case 'discard':
        this.discard(m.paths);
        break;
      case 'save': {
        const target = await vscode.window.showSaveDialog({ defaultUri: workspaceRoot() && vscode.Uri.joinPath(workspaceRoot()!, m.name) });
        if (target) await vscode.workspace.fs.writeFile(target, typeof m.data === 'string' ? new TextEncoder().encode(m.data) : Uint8Array.from(m.data));
        break;
      }
      case 'models':
        this.modelList?.(m.models);
        this.modelList = undefined;
        break;
      case 'deleted':
        void vscode.window.showInformationMessage(`lilypad: deleted the cached copy of ${m.url}`);
        break;
      case 'native':
        await vscode.commands.executeCommand('lilypad.solve', m.task);
        break;
      case 'setModel':
        await setModel(m.model);
        break;
      case 'readModel':
        await this.sendModelFile(m.path);
        break;
      case 'readLora':
        await this.sendLoraFiles(m.path);
        break;
      case 'command': {
        const accept = async () => this.afterApply(await this.pending.accept(this.pending.paths()));
        try {
          const result = await this.terminal.run(m.command, m.timeoutMs, this.pending.paths().length, accept);
          this.post({ type: 'commandResult', id: m.id, result });
        } catch (e) {
          this.post({ type: 'commandResult', id: m.id, refused: String((e as Error).message ?? e) });
        }
        break;
      }
    }
  }

  /**
   * The configured model file, streamed to the view in chunks (which it gathers into a Blob):
   * the view can read no file of its own, and only the file the settings name is sent.
   */
  private async sendModelFile(path: string) {
    const configured = viewSettings().model;
    const file = modelFile(configured);
    try {
      if (!file || configured !== path) throw new Error(`${path} is not the model file in the lilypad.model setting`);
      const { size } = await fs.promises.stat(file.fsPath);
      if (size === 0) throw new Error(`${path} is empty`);
      let done = 0;
      for await (const chunk of fs.createReadStream(file.fsPath, { highWaterMark: 16 << 20 }) as AsyncIterable<Buffer>) {
        done += chunk.byteLength;
        const data = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
        // Waits for each chunk to be handed over, so a large file is not queued in memory at once.
        await this.view?.webview.postMessage({ type: 'modelChunk', path, data, done, size } satisfies ToView);
      }
      if (done !== size) throw new Error(`${path}: read ${done} of ${size} bytes`);
    } catch (e) {
      this.post({ type: 'modelError', path, message: String((e as Error).message ?? e) });
    }
  }

  /**
   * The LoRA adapter folder the lilypad.lora setting names, sent to the view: its
   * adapter_config.json and adapter_model.safetensors, whole (adapters are small), and no other
   * file.
   */
  private async sendLoraFiles(folder: string) {
    const configured = viewSettings().lora;
    const dir = modelFile(configured);
    try {
      if (!dir || configured !== folder) throw new Error(`${folder} is not the adapter folder in the lilypad.lora setting`);
      const read = async (name: string) => {
        const file = path.join(dir.fsPath, name);
        try {
          return new Uint8Array(await fs.promises.readFile(file));
        } catch (e) {
          const missing = (e as NodeJS.ErrnoException).code === 'ENOENT';
          throw new Error(missing ? `${folder} has no ${name} (a PEFT LoRA adapter folder has adapter_config.json and adapter_model.safetensors)` : `${file}: ${(e as Error).message}`);
        }
      };
      const [config, weights] = await Promise.all([read('adapter_config.json'), read('adapter_model.safetensors')]);
      await this.view?.webview.postMessage({ type: 'loraFiles', path: folder, config, weights } satisfies ToView);
    } catch (e) {
      this.post({ type: 'loraError', path: folder, message: String((e as Error).message ?? e) });
    }
  }

  private async noWebGpu(reason: string) {
    const mode = vscode.workspace.getConfiguration('lilypad').get<string>('nativeFallback');
    if (mode === 'never') return;
    const message = `lilypad: this view has no WebGPU (${reason}). The agent can run with the native lilypad binary instead.`;
    if (mode === 'always') void vscode.window.showInformationMessage(message);
    else void vscode.window.showWarningMessage(message, 'Use the native binary').then((a) => a && vscode.commands.executeCommand('lilypad.solve'));
  }

  /** After files were written: the view re-reads the folder, so its baseline is the disk again. */
  afterApply(applied: string[]) {
    if (applied.length) this.post({ type: 'applied', paths: applied });
  }

  /** Drops pending changes: the view puts the files back as they are on disk. */
  discard(paths: string[]) {
    const changes = paths.map((p) => this.pending.get(p)).filter((c): c is PendingChange => !!c);
    this.pending.drop(paths);
    this.post({ type: 'discard', changes });
  }
}
