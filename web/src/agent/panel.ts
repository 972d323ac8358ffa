/**
 * The agent panel: import a project (zip or folder), give a task, watch the steps stream, browse
 * and edit files, see the patch, run the tests, download the patch, the project or the
 * trajectory. It renders into any element and reaches the outside only through its PanelHost
 * (models and saving files), so the playground page and the VS Code webview mount the same panel.
 */
import { ModelChooser, type ModelChooserOptions } from '../ui/model-chooser';
import { renderReply } from '../ui/thinking';
import { FileEditor, PatchView } from './editor';
import { testSummary } from './test-summary';
import type { EngineModelHost } from './models';
import type { PythonOptions } from './python';
import { type AgentEvent, AgentSession, type AgentSettings, type ModelHost, type Observation, type TerminalHost, type Trajectory } from './session';

export interface ModelChoice {
  id: string;
  label: string;
  /** What the choice needs: a model (the shared chooser), or scripted replies (a JSON array of strings). */
  input?: 'url' | 'script';
  /** Default for that input. */
  value?: string;
  /** The chooser's presets, free-field label and change hook, for `input: 'url'`. */
  chooser?: Omit<ModelChooserOptions, 'value'>;
}

export interface PanelHost {
  models: ModelChoice[];
  /** Makes (or reuses) the model for a run; `onStatus` shows loading progress. */
  createModel(choice: string, input: string, onStatus: (text: string) => void): Promise<ModelHost>;
  /** Hands a file to the user: a download in a page, a save dialog in an editor. */
  save(name: string, data: Uint8Array | string, type: string): void;
  /** Told after every redraw: an editor host mirrors the session's changes as pending edits. */
  changed?(session: AgentSession): void;
  /** A real terminal for the run's `Bash` calls (an editor's, opted into); none: the project's shell. */
  terminal?(): TerminalHost | undefined;
  /** How Python's worker starts (an editor's webview hands it its script). */
  python?: PythonOptions;
}

const TEMPLATE = `
<section class="agent-project">
  <h2>Project</h2>
  <label>Zip or .tar.gz <input class="agent-zip" type="file" accept=".zip,.tar.gz,.tgz,application/zip,application/gzip" /></label>
  <label>…or a folder <input class="agent-folder" type="file" webkitdirectory multiple /></label>
  <p class="agent-project-status" aria-live="polite">No project yet.</p>
  <div class="agent-files-pane">
    <ul class="agent-files" aria-label="Files"></ul>
    <div class="agent-editor-pane">
      <p class="agent-editor-name">Pick a file to see it here.</p>
      <div class="agent-editor" aria-label="Editor"></div>
    </div>
  </div>
  <div class="row">
    <button type="button" class="agent-run-tests" disabled>Run the tests</button>
    <button type="button" class="agent-undo" disabled>Undo</button>
    <button type="button" class="agent-download-patch" disabled>Download patch</button>
    <button type="button" class="agent-download-zip" disabled>Download project</button>
  </div>
  <div class="agent-test-result" hidden>
    <p class="agent-test-summary"></p>
    <p class="agent-test-stale" hidden>This output is from before the latest change: run the tests again.</p>
    <pre class="agent-test-output"></pre>
  </div>
</section>
<section class="agent-task">
  <h2>Task</h2>
  <label>Replies from <select class="agent-model"></select></label>
  <div class="agent-model-chooser"></div>
  <label class="agent-model-input-row">Replies (a JSON array of strings)
    <textarea class="agent-model-input" rows="2" spellcheck="false"></textarea></label>
  <p class="agent-model-status" aria-live="polite"></p>
  <label>Task <textarea class="agent-task-text" rows="4" placeholder="What should the agent do? (Ctrl+Enter runs it)"></textarea></label>
  <div class="grid">
    <label>steps <input class="agent-max-steps" type="number" min="1" value="30" /></label>
    <label>tokens per step <input class="agent-max-tokens" type="number" min="16" value="2048" /></label>
    <label>temperature <input class="agent-temperature" type="number" min="0" step="0.1" value="0.6" /></label>
    <label><input class="agent-thinking" type="checkbox" checked /> thinking</label>
  </div>
  <div class="row">
    <button type="button" class="agent-run" disabled>Run the agent</button>
    <button type="button" class="agent-stop" hidden>Stop</button>
    <button type="button" class="agent-download-trajectory" disabled>Download trajectory</button>
  </div>
  <p class="agent-run-status" aria-live="polite"></p>
  <ol class="agent-steps"></ol>
  <h3>Patch</h3>
  <div class="agent-patch"></div>
</section>`;

export class AgentPanel {
  session?: AgentSession;
  /** The model chooser of the choice with `input: 'url'`, if there is one. */
  readonly chooser?: ModelChooser;
  trajectory?: Trajectory;
  private editor: FileEditor;
  private patchView: PatchView;
  private pendingWrite?: ReturnType<typeof setTimeout>;

  constructor(readonly root: HTMLElement, private host: PanelHost) {
    root.classList.add('agent-panel');
    root.innerHTML = TEMPLATE;
    root.dataset.state = 'empty';
    this.editor = new FileEditor(this.$('.agent-editor'), (path, text) => this.userEdit(path, text));
    this.patchView = new PatchView(this.$('.agent-patch'));
    const select = this.$<HTMLSelectElement>('.agent-model');
    for (const m of host.models) select.add(new Option(m.label, m.id));
    const engine = host.models.find((m) => m.input === 'url');
    if (engine) this.chooser = new ModelChooser(this.$('.agent-model-chooser'), { ...engine.chooser, value: engine.value });
    select.onchange = () => this.showModelInput();
    this.showModelInput();

    const pick = (input: HTMLInputElement) => () => {
      if (input.files?.length) void this.open(() => AgentSession.fromPicked(input.files!));
    };
    this.$<HTMLInputElement>('.agent-zip').onchange = pick(this.$('.agent-zip'));
    this.$<HTMLInputElement>('.agent-folder').onchange = pick(this.$('.agent-folder'));
    this.$('.agent-run-tests').onclick = () => this.runTests();
    this.$('.agent-undo').onclick = () => this.guard(() => {
      this.session!.undo();
      this.refresh();
    });
    this.$('.agent-download-patch').onclick = () => this.host.save(`${this.session!.name}.patch`, this.session!.patch(), 'text/x-diff');
    this.$('.agent-download-zip').onclick = () => this.host.save(`${this.session!.name}.zip`, this.session!.exportZip(), 'application/zip');
    this.$('.agent-download-trajectory').onclick = () =>
      this.host.save('trajectory.json', `${JSON.stringify(this.trajectory, null, 2)}\n`, 'application/json');
    this.$('.agent-run').onclick = () => void this.run();
    this.$('.agent-stop').onclick = () => this.stop();
    // Ctrl+Enter (⌘+Enter) in the task runs the agent; Escape stops a run, as the Stop button does.
    this.$('.agent-task-text').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        void this.run();
      }
    });
    root.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && this.session?.isRunning) this.stop();
    });
  }

  /** The model of the run in progress. */
  private model?: Partial<EngineModelHost>;

  /** Ends the run: at once, also while the model is still reading a step's prompt. */
  stop() {
    if (!this.session?.isRunning) return;
    this.session.stop();
    this.model?.abort?.();
    this.setStatus('.agent-run-status', 'Stopping…');
  }

  private $<T extends HTMLElement = HTMLElement>(selector: string): T {
    return this.root.querySelector(selector) as T;
  }

  private showModelInput() {
    const choice = this.host.models.find((m) => m.id === this.$<HTMLSelectElement>('.agent-model').value);
    this.$('.agent-model-chooser').hidden = choice?.input !== 'url';
    this.$('.agent-model-input-row').hidden = choice?.input !== 'script';
    if (choice?.input === 'script') this.$<HTMLTextAreaElement>('.agent-model-input').value = choice.value ?? '';
  }

  private setStatus(selector: string, text: string, error = false) {
    const el = this.$(selector);
    el.textContent = text;
    el.classList.toggle('error', error);
  }

  private guard(f: () => void) {
    try {
      f();
    } catch (e) {
      this.setStatus('.agent-project-status', String((e as Error).message ?? e), true);
    }
  }

  /** Opens a project (from a picker, or from code: `panel.open(() => AgentSession.fromArchive(bytes))`). */
  async open(make: () => Promise<AgentSession>): Promise<void> {
    if (this.session?.isRunning) return;
    this.root.dataset.state = 'loading';
    this.setStatus('.agent-project-status', 'Importing…');
    try {
      this.session = await make();
      this.trajectory = undefined;
      this.$('.agent-steps').replaceChildren();
      this.editor.clear();
      this.setStatus('.agent-project-status', `${this.session.files().length} files; loading Python…`);
      this.refresh();
      const python = await this.session.enablePython(this.host.python);
      this.setStatus('.agent-project-status', `${this.session.name}: ${this.session.files().length} files at ${this.session.root}; Python ${python.version} with pytest`);
      this.root.dataset.state = 'ready';
    } catch (e) {
      this.root.dataset.state = this.session ? 'ready' : 'empty';
      this.setStatus('.agent-project-status', `Import failed: ${(e as Error).message ?? e}`, true);
    }
    this.refresh();
  }

  /** Redraws the file list, the open file and the patch from the workspace. */
  refresh() {
    const s = this.session;
    const running = !!s?.isRunning;
    for (const b of ['.agent-run-tests', '.agent-undo']) this.$<HTMLButtonElement>(b).disabled = !s || running;
    this.$<HTMLButtonElement>('.agent-run').disabled = !s || running;
    this.$<HTMLButtonElement>('.agent-download-zip').disabled = !s;
    this.$('.agent-stop').hidden = !running;
    this.$<HTMLButtonElement>('.agent-download-trajectory').disabled = !this.trajectory;
    if (!s) return;
    const patch = s.patch();
    this.$<HTMLButtonElement>('.agent-download-patch').disabled = patch === '';
    this.patchView.show(patch);
    const changed = new Map(s.changes().map((c) => [c.path, c.change]));
    const list = this.$('.agent-files');
    list.replaceChildren(
      ...s.files().map((path) => {
        const li = document.createElement('li');
        const button = document.createElement('button');
        button.type = 'button';
        button.textContent = path;
        button.dataset.path = path;
        if (changed.has(path)) button.dataset.change = changed.get(path);
        if (path === this.editor.current) button.setAttribute('aria-current', 'true');
        button.onclick = () => this.showFile(path);
        li.append(button);
        return li;
      }),
    );
    const current = this.editor.current;
    if (current && s.files().includes(current)) this.showFile(current);
    else if (current) {
      this.editor.clear();
      this.$('.agent-editor-name').textContent = `${current} was deleted.`;
    }
    // Test output from before the latest change says so: it no longer describes the files.
    const result = this.$('.agent-test-result');
    if (this.testedPatch !== undefined) {
      result.dataset.stale = String(patch !== this.testedPatch);
      this.$('.agent-test-stale').hidden = patch === this.testedPatch;
    }
    this.host.changed?.(s);
  }

  showFile(path: string) {
    if (!this.session) return;
    const change = this.session.changes().find((c) => c.path === path)?.change;
    const name = this.$('.agent-editor-name');
    name.textContent = path;
    name.dataset.change = change ?? '';
    name.dataset.readOnly = String(this.session.isRunning);
    this.editor.show(path, this.session.readText(path), this.session.isRunning);
    for (const b of this.root.querySelectorAll<HTMLButtonElement>('.agent-files button')) {
      b.toggleAttribute('aria-current', b.dataset.path === path);
    }
  }

  private userEdit(path: string, text: string) {
    clearTimeout(this.pendingWrite);
    this.pendingWrite = setTimeout(() => this.guard(() => {
      this.session?.writeText(path, text);
      this.refresh();
    }), 300);
  }

  /** The patch when the tests last ran from the button: the output is stale once it changes. */
  private testedPatch?: string;

  async runTests() {
    if (!this.session) return;
    const result = this.$('.agent-test-result');
    const out = this.$('.agent-test-output');
    const button = this.$<HTMLButtonElement>('.agent-run-tests');
    button.disabled = true;
    // While Python works in its worker the page stays live: say what it is doing.
    this.root.dataset.tests = 'running';
    result.hidden = false;
    this.$('.agent-test-summary').textContent = 'Running the tests…';
    let run: Observation;
    try {
      run = await this.session.runTests();
    } catch (e) {
      run = { content: String((e as Error)?.message ?? e), is_error: true };
    } finally {
      delete this.root.dataset.tests;
      button.disabled = !this.session || this.session.isRunning;
    }
    this.testedPatch = this.session.patch();
    result.hidden = false;
    result.dataset.passed = String(!run.is_error);
    out.textContent = run.content;
    out.dataset.passed = String(!run.is_error);
    // pytest's last line says it all ("1 failed, 10 passed in 0.12s"); long output keeps it in view.
    this.$('.agent-test-summary').textContent = testSummary(run.content, !run.is_error);
    out.scrollTop = out.scrollHeight;
    this.refresh();
  }

  private settings(): AgentSettings {
    const num = (s: string) => Number(this.$<HTMLInputElement>(s).value);
    return {
      max_steps: num('.agent-max-steps'),
      max_tokens_per_step: num('.agent-max-tokens'),
      enable_thinking: this.$<HTMLInputElement>('.agent-thinking').checked,
      sampling: { temperature: num('.agent-temperature') },
    };
  }

  /** Runs the agent on the task in the form; resolves when it has finished. */
  async run(): Promise<Trajectory | undefined> {
    const s = this.session;
    const task = this.$<HTMLTextAreaElement>('.agent-task-text').value.trim();
    if (!s || s.isRunning) return;
    if (!task) {
      this.setStatus('.agent-run-status', 'Give the agent a task first.', true);
      return;
    }
    const choice = this.$<HTMLSelectElement>('.agent-model').value;
    const input = this.host.models.find((m) => m.id === choice)?.input === 'url'
      ? this.chooser?.value() ?? ''
      : this.$<HTMLTextAreaElement>('.agent-model-input').value;
    this.root.dataset.state = 'running';
    delete this.root.dataset.exit;
    this.$('.agent-steps').replaceChildren();
    this.setStatus('.agent-run-status', 'Preparing the model…');
    let model: ModelHost;
    try {
      model = await this.host.createModel(choice, input, (t) => this.setStatus('.agent-model-status', t));
    } catch (e) {
      this.root.dataset.state = 'error';
      this.setStatus('.agent-run-status', `The model could not be loaded: ${(e as Error).message ?? e}`, true);
      return;
    }
    this.setStatus('.agent-run-status', `Running with ${model.name}…`);
    this.model = model as Partial<EngineModelHost>;
    if ('abort' in model) this.model.onPromptProgress = (p) => this.promptProgress(p.done, p.total);
    const run = s.run(task, model, this.settings(), (e) => this.onEvent(e), this.host.terminal?.());
    this.refresh();
    try {
      this.trajectory = await run;
      const exit = this.trajectory.exit;
      this.root.dataset.exit = exit?.reason ?? '';
      const steps = this.trajectory.steps.length;
      this.setStatus('.agent-run-status', `Finished after ${steps} step${steps === 1 ? '' : 's'}: ${exit?.reason.replace(/_/g, ' ')}${exit && 'detail' in exit ? ` (${exit.detail})` : ''}`);
      this.root.dataset.state = 'done';
    } catch (e) {
      this.root.dataset.state = 'error';
      this.setStatus('.agent-run-status', `The run failed: ${(e as Error).message ?? e}`, true);
    } finally {
      if (this.model) this.model.onPromptProgress = undefined;
      this.model = undefined;
    }
    this.refresh();
    return this.trajectory;
  }

  private currentStep?: { item: HTMLElement; output: HTMLElement; calls: HTMLElement; reading?: HTMLElement; raw: string };

  /** The step's prompt being read: minutes for a long one on a slow adapter. */
  private promptProgress(done: number, total: number) {
    const step = this.currentStep;
    if (!step || step.output.textContent) return;
    step.reading ??= step.item.insertBefore(Object.assign(document.createElement('p'), { className: 'agent-step-reading' }), step.output);
    step.reading.textContent = `Reading the prompt: ${done.toLocaleString('en')} / ${total.toLocaleString('en')} tokens`;
    step.item.dataset.promptDone = String(done);
    step.item.dataset.promptTotal = String(total);
  }

  private onEvent(e: AgentEvent) {
    switch (e.type) {
      case 'step': {
        const li = document.createElement('li');
        li.className = 'agent-step';
        li.dataset.index = String(e.index);
        const output = document.createElement('div');
        output.className = 'agent-step-output';
        const calls = document.createElement('ul');
        calls.className = 'agent-step-calls';
        li.append(output, calls);
        this.$('.agent-steps').append(li);
        this.currentStep = { item: li, output, calls, raw: '' };
        break;
      }
      case 'text': {
        const step = this.currentStep;
        if (!step) break;
        step.reading?.remove();
        // Tool calls are shown once, as the calls below the text: their markup is left out here
        // (also while one is still streaming in).
        step.raw += e.text;
        // Thinking is folded away once the reply goes on past it.
        renderReply(step.output, step.raw.replace(/<tool_call>[\s\S]*?(<\/tool_call>|$)/g, '').replace(/\n{3,}/g, '\n\n').trimEnd());
        step.output.dataset.raw = String(step.raw.length);
        break;
      }
      case 'tool': {
        const li = document.createElement('li');
        li.className = 'agent-call';
        const name = Object.assign(document.createElement('strong'), { className: 'agent-call-name', textContent: e.call.name });
        // Arguments as the model meant them: strings with real line breaks, not JSON escapes.
        const args = document.createElement('dl');
        args.className = 'agent-call-args';
        for (const [key, value] of Object.entries(e.call.arguments ?? {})) {
          const dd = document.createElement('dd');
          dd.append(Object.assign(document.createElement('pre'), { textContent: typeof value === 'string' ? value : JSON.stringify(value, null, 2) }));
          args.append(Object.assign(document.createElement('dt'), { textContent: key }), dd);
        }
        li.append(name, args);
        this.currentStep?.calls.append(li);
        break;
      }
      case 'observation': {
        const calls = this.currentStep?.calls;
        let li = calls?.lastElementChild as HTMLElement | null;
        if (!li || li.querySelector('details') || !e.record.call) {
          li = document.createElement('li');
          li.className = 'agent-call';
          calls?.append(li);
        }
        const details = document.createElement('details');
        details.dataset.error = String(e.record.is_error);
        const summary = document.createElement('summary');
        summary.textContent = `${e.record.is_error ? 'error' : 'result'}, ${e.record.observation.length} characters`;
        const pre = document.createElement('pre');
        pre.textContent = e.record.observation;
        details.append(summary, pre);
        li.append(details);
        this.refresh();
        break;
      }
      case 'trajectory': {
        this.trajectory = e.trajectory;
        const step = e.trajectory.steps.at(-1);
        const li = step && this.$(`.agent-step[data-index="${step.index}"]`);
        if (step && li && !li.querySelector('.agent-step-stats')) {
          // Only what was measured: scripted replies have no prompt and no timings.
          const rate = (tokens: number, ms: number) => `${((tokens * 1e3) / ms).toFixed(1)} tok/s`;
          const parts = [];
          if (step.prompt_tokens > 0) {
            const read = step.prefilled_tokens < step.prompt_tokens ? `${step.prefilled_tokens} new of ${step.prompt_tokens}` : `${step.prompt_tokens}`;
            parts.push(`prompt ${read} tokens${step.prefill_ms > 0 && step.prefilled_tokens > 0 ? ` at ${rate(step.prefilled_tokens, step.prefill_ms)}` : ''}`);
          }
          if (step.decode_ms > 0) parts.push(`reply ${step.generated_tokens} tokens at ${rate(step.generated_tokens, step.decode_ms)}`);
          if (step.finish === 'aborted') parts.push('stopped');
          if (parts.length) {
            const stats = document.createElement('p');
            stats.className = 'agent-step-stats';
            stats.textContent = parts.join(' · ');
            li.append(stats);
          }
        }
        this.refresh();
        break;
      }
    }
  }
}

