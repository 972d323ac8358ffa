/**
 * The model chooser shared by the playground, the agent page and the VS Code view: the presets
 * (each with its note), "Another URL…" with its field (shown for that choice only), and, where
 * the page can read one, a GGUF file from this computer. `root.dataset.value` is the choice.
 */
import { OTHER_URL, PRESETS, type Preset, presetFor, presetLabel } from './presets';

export interface ModelChooserOptions {
  /** The first choice: a preset's URL, another URL, or (VS Code) a path on this machine. */
  value?: string;
  /** Only presets that can be fetched from here (a webview has no page server). */
  presets?: Preset[];
  /** Offer a file input (a page can read a picked file; a webview reads paths through its host). */
  file?: boolean;
  /** The label of the free field. */
  otherLabel?: string;
  /** Resolves served paths, so that a value given as a full URL still finds its preset. */
  base?: string;
  /** Told after every change the user makes. */
  onChange?(chooser: ModelChooser): void;
}

export class ModelChooser {
  readonly select: HTMLSelectElement;
  readonly url: HTMLInputElement;
  readonly file?: HTMLInputElement;
  private note: HTMLElement;
  private urlRow: HTMLElement;
  private presets: Preset[];

  constructor(readonly root: HTMLElement, private options: ModelChooserOptions = {}) {
    this.presets = options.presets ?? PRESETS;
    root.classList.add('model-chooser');
    const el = <K extends keyof HTMLElementTagNameMap>(tag: K, className: string) => Object.assign(document.createElement(tag), { className });
    this.select = el('select', 'model-preset');
    for (const p of this.presets) this.select.add(new Option(presetLabel(p), p.id));
    this.select.add(new Option('Another URL…', OTHER_URL));
    this.note = el('p', 'model-preset-note');
    this.url = Object.assign(el('input', 'model-url'), { type: 'text', inputMode: 'url', spellcheck: false, placeholder: 'https://…/model.gguf' });
    this.urlRow = el('label', 'model-url-row');
    this.urlRow.append(options.otherLabel ?? 'URL', this.url);
    const presetRow = el('label', 'model-preset-row');
    presetRow.append('Model', this.select);
    root.replaceChildren(presetRow, this.note, this.urlRow);
    if (options.file) {
      this.file = Object.assign(el('input', 'model-file'), { type: 'file', accept: '.gguf' });
      const fileRow = el('label', 'model-file-row');
      fileRow.append('…or a GGUF file on this computer', this.file);
      root.append(fileRow);
      this.file.onchange = () => this.changed();
    }
    this.select.onchange = () => {
      if (this.file) this.file.value = '';
      this.changed();
    };
    // Typing shows the value; the change is told once the field is left (or Enter).
    this.url.oninput = () => this.show();
    this.url.onchange = () => this.changed();
    this.set(options.value ?? this.presets[0]?.url ?? '');
  }

  /** The chosen preset, if a preset is chosen. */
  get preset(): Preset | undefined {
    return this.presets.find((p) => p.id === this.select.value);
  }

  /** The model to load: a picked file, the preset's URL or the typed one (undefined: nothing yet). */
  source(): string | File | undefined {
    const file = this.file?.files?.[0];
    if (file) return file;
    return this.value() || undefined;
  }

  /** The chosen URL (or path), without a picked file. */
  value(): string {
    return this.preset?.url ?? this.url.value.trim();
  }

  /** Shows `value`: its preset when it is one, else "Another URL…" with it (or nothing) in the field. */
  set(value: string) {
    const preset = value ? presetFor(value, this.options.base) : undefined;
    // Nothing chosen yet (an empty setting) shows an empty free field, not a preset nobody chose.
    if (preset && this.presets.includes(preset)) {
      this.select.value = preset.id;
    } else {
      this.select.value = OTHER_URL;
      this.url.value = value;
    }
    this.show();
  }

  private show() {
    const other = this.select.value === OTHER_URL;
    this.urlRow.hidden = !other;
    this.select.title = this.select.selectedOptions[0]?.text ?? '';
    const file = this.file?.files?.[0];
    this.note.textContent = file ? `${file.name}: read from this computer, not copied.` : this.preset?.note ?? '';
    this.root.dataset.value = file ? `file:${file.name}` : this.value();
  }

  private changed() {
    this.show();
    this.options.onChange?.(this);
  }
}
