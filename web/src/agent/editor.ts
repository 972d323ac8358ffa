/** CodeMirror 6 views for the agent panel: a code editor for project files, a read-only patch view. */
import { python } from '@codemirror/lang-python';
import { EditorState, type Extension, RangeSetBuilder } from '@codemirror/state';
import { oneDark } from '@codemirror/theme-one-dark';
import { Decoration, type DecorationSet, ViewPlugin, type ViewUpdate } from '@codemirror/view';
import { EditorView, basicSetup } from 'codemirror';

function language(path: string): Extension[] {
  return path.endsWith('.py') ? [python()] : [];
}

/**
 * Dark when the page is: VS Code marks its webviews' body (`vscode-dark`, `vscode-high-contrast`),
 * a browser tab follows the system's scheme.
 */
function pageIsDark(): boolean {
  const body = document.body.classList;
  if (body.contains('vscode-light') || body.contains('vscode-high-contrast-light')) return false;
  if (body.contains('vscode-dark') || body.contains('vscode-high-contrast')) return true;
  return matchMedia('(prefers-color-scheme: dark)').matches;
}

/** The code colors for the page's scheme (CodeMirror's own default is light only). */
function theme(): Extension[] {
  return pageIsDark() ? [oneDark] : [];
}

/** An editor showing one file at a time; `onEdit` receives the text after each user edit. */
export class FileEditor {
  readonly view: EditorView;
  private path?: string;

  constructor(parent: HTMLElement, private onEdit: (path: string, text: string) => void) {
    this.view = new EditorView({ parent, state: EditorState.create({ doc: '' }) });
  }

  get current(): string | undefined {
    return this.path;
  }

  /** Shows `text` as `path`; the cursor is kept when the same file is shown again. */
  show(path: string, text: string, readOnly = false) {
    if (path === this.path && text === this.view.state.doc.toString()) return;
    const same = path === this.path;
    const selection = same ? this.view.state.selection : undefined;
    this.path = path;
    this.view.setState(
      EditorState.create({
        doc: text,
        selection: selection && selection.main.head <= text.length ? selection : undefined,
        extensions: [
          basicSetup,
          theme(),
          // Long lines wrap: the panel is often narrow (an editor's side bar).
          EditorView.lineWrapping,
          language(path),
          EditorState.readOnly.of(readOnly),
          EditorView.updateListener.of((u) => {
            if (u.docChanged && u.transactions.some((t) => t.isUserEvent('input') || t.isUserEvent('delete') || t.isUserEvent('undo') || t.isUserEvent('redo'))) {
              this.onEdit(path, u.state.doc.toString());
            }
          }),
        ],
      }),
    );
  }

  clear() {
    this.path = undefined;
    this.view.setState(EditorState.create({ doc: '' }));
  }
}

/** Lines of a unified patch, colored by kind. */
const patchTheme = EditorView.baseTheme({
  // Translucent, so that they read on a light or a dark page.
  '.cm-patch-add': { backgroundColor: 'rgba(46, 160, 67, 0.18)' },
  '.cm-patch-del': { backgroundColor: 'rgba(248, 81, 73, 0.18)' },
  '&light .cm-patch-hunk': { color: '#6639ba' },
  '&dark .cm-patch-hunk': { color: '#c297ff' },
  '.cm-patch-file': { fontWeight: 'bold' },
});

const patchLines = ViewPlugin.fromClass(
  class {
    decorations: DecorationSet;
    constructor(view: EditorView) {
      this.decorations = build(view);
    }
    update(u: ViewUpdate) {
      if (u.docChanged || u.viewportChanged) this.decorations = build(u.view);
    }
  },
  { decorations: (v) => v.decorations },
);

function build(view: EditorView): DecorationSet {
  const b = new RangeSetBuilder<Decoration>();
  for (const { from, to } of view.visibleRanges) {
    for (let pos = from; pos <= to; ) {
      const line = view.state.doc.lineAt(pos);
      const t = line.text;
      const cls = t.startsWith('diff --git') || t.startsWith('+++') || t.startsWith('---')
        ? 'cm-patch-file'
        : t.startsWith('@@') ? 'cm-patch-hunk' : t.startsWith('+') ? 'cm-patch-add' : t.startsWith('-') ? 'cm-patch-del' : '';
      if (cls) b.add(line.from, line.from, Decoration.line({ class: cls }));
      pos = line.to + 1;
    }
  }
  return b.finish();
}

/** A read-only view of a patch. */
export class PatchView {
  readonly view: EditorView;

  constructor(parent: HTMLElement) {
    this.view = new EditorView({ parent, state: EditorState.create({ doc: '' }) });
  }

  show(patch: string) {
    if (patch === this.view.state.doc.toString()) return;
    this.view.setState(
      EditorState.create({
        doc: patch,
        extensions: [EditorState.readOnly.of(true), EditorView.editable.of(false), patchTheme, patchLines, EditorView.lineWrapping,
          EditorView.theme({}, { dark: pageIsDark() })],
      }),
    );
  }
}
