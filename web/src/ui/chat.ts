/**
 * The chat shared by the playground and the VS Code view: messages streamed as they are
 * written (thinking folded away), "Reading the prompt: n / total tokens" while a long prompt is
 * read, Stop (or Escape) at any moment, stopped and failed replies marked as such, and only
 * measured figures in the stats line. The page supplies the engine and the request's options.
 */
import { type ChatCompletionRequest, type ChatMessage, type Engine, LilypadError, type PromptProgress, type Timings, type Usage } from '../lib/index';
import { renderReply, splitThinking } from './thinking';

export type ChatState = 'idle' | 'generating' | 'done' | 'stopped' | 'error';

export interface ChatViewOptions {
  /** The engine to ask; throwing refuses the question, and the stats line shows why. */
  engine(): Promise<Engine>;
  /** Sampling and template options for the next request. */
  options(): Omit<ChatCompletionRequest, 'messages' | 'stream'>;
  /** Offer a raw-prompt mode (no chat template), for trying a model's own format. */
  rawMode?: boolean;
  /** Told when a request starts and ends. */
  onState?(state: ChatState): void;
  /** Told of a failed request (the reply shows its message too). */
  onError?(error: unknown): void;
  /** Told when the user starts a new conversation. */
  onClear?(): void;
}

const TEMPLATE = `
<div class="chat-toolbar">
  <label class="chat-mode-row" hidden>Mode
    <select class="chat-mode">
      <option value="chat">Chat (the model's template)</option>
      <option value="raw">Raw prompt (no template)</option>
    </select>
  </label>
  <button type="button" class="chat-clear">New conversation</button>
</div>
<div class="chat-messages" aria-live="polite"></div>
<form class="chat-form">
  <textarea class="chat-input" rows="3" aria-label="Message"></textarea>
  <div class="chat-actions">
    <button type="submit" class="chat-send">Send</button>
    <button type="button" class="chat-stop" disabled title="Stop the reply (Escape)">Stop</button>
    <span class="chat-stats" aria-live="polite"></span>
  </div>
</form>`;

export class ChatView {
  private history: ChatMessage[] = [];
  private engine?: Engine;
  private enabled = true;
  private placeholder = 'Ask something (Enter sends, Shift+Enter for a new line).';
  readonly messages: HTMLElement;
  readonly input: HTMLTextAreaElement;
  readonly stats: HTMLElement;
  private mode: HTMLSelectElement;
  private send_: HTMLButtonElement;
  private stop_: HTMLButtonElement;

  constructor(readonly root: HTMLElement, private options: ChatViewOptions) {
    root.classList.add('chat');
    root.innerHTML = TEMPLATE;
    const $ = <T extends HTMLElement>(s: string) => root.querySelector(s) as T;
    this.messages = $('.chat-messages');
    this.input = $('.chat-input');
    this.stats = $('.chat-stats');
    this.mode = $('.chat-mode');
    this.send_ = $('.chat-send');
    this.stop_ = $('.chat-stop');
    $('.chat-mode-row').hidden = !options.rawMode;
    $<HTMLFormElement>('.chat-form').onsubmit = (e) => {
      e.preventDefault();
      void this.send();
    };
    this.input.onkeydown = (e) => {
      if (e.key === 'Enter' && !e.shiftKey && this.mode.value === 'chat') {
        e.preventDefault();
        void this.send();
      }
    };
    this.stop_.onclick = () => this.stop();
    $('.chat-clear').onclick = () => this.clear();
    root.dataset.state = 'idle';
    this.update();
  }

  get busy(): boolean {
    return this.root.dataset.state === 'generating';
  }

  /** Stops the reply in progress, also while the model is still reading the prompt. */
  stop() {
    if (this.busy) void this.engine?.abort();
  }

  /** Allows or refuses questions; `placeholder` says what to do first. */
  setEnabled(enabled: boolean, placeholder?: string) {
    this.enabled = enabled;
    if (placeholder) this.placeholder = placeholder;
    this.update();
  }

  /** Puts `text` in the input and focuses it. */
  open(text?: string) {
    if (text) this.input.value = text;
    this.input.focus();
  }

  /** Forgets the conversation. */
  clear() {
    if (this.busy) return;
    this.history = [];
    this.messages.replaceChildren();
    this.stats.textContent = '';
    this.options.onClear?.();
  }

  private setState(state: ChatState) {
    this.root.dataset.state = state;
    this.update();
    this.options.onState?.(state);
  }

  private update() {
    const busy = this.busy;
    this.input.disabled = !this.enabled || busy;
    this.input.placeholder = this.placeholder;
    this.send_.disabled = !this.enabled || busy;
    this.stop_.disabled = !busy;
  }

  private bubble(role: string, text: string): HTMLElement {
    const div = Object.assign(document.createElement('div'), { className: `chat-message ${role}`, textContent: text });
    this.follow(() => this.messages.append(div), true);
    return div;
  }

  /**
   * Runs `change`, then keeps the newest text in view: the messages scroll (not the page), and
   * only when the user was already at the bottom (or `always`), so reading back is not disturbed.
   */
  private follow(change: () => void, always = false) {
    const m = this.messages;
    const atBottom = m.scrollHeight - m.scrollTop - m.clientHeight < 48;
    change();
    if (atBottom || always) m.scrollTop = m.scrollHeight;
  }

  /** Asks the input's text (or `text`); resolves when the reply has ended. */
  async send(text = this.input.value): Promise<void> {
    if (!this.enabled || this.busy || !text.trim()) return;
    const raw = this.mode.value === 'raw';
    // The question shows at once, also while the engine is still being loaded.
    this.input.value = '';
    const asked = this.bubble(raw ? 'prompt' : 'user', text);
    const reply = this.bubble('assistant', '');
    reply.dataset.done = 'false';
    renderReply(reply, '');
    this.stats.textContent = '';
    this.setState('generating');
    let engine: Engine;
    try {
      engine = this.engine = await this.options.engine();
    } catch (e) {
      // Refused or not loaded (no model yet, the agent busy, a load that failed): the
      // question goes back into the input, and the stats line says why.
      asked.remove();
      reply.remove();
      this.input.value = text;
      this.setState('error');
      this.stats.textContent = String((e as Error).message ?? e);
      return;
    }
    const started = performance.now();
    let firstMs: number | undefined;
    let written = '';
    const onText = (piece: string) => {
      if (!piece) return;
      firstMs ??= performance.now() - started;
      if (reply.dataset.reading) {
        delete reply.dataset.reading;
        this.stats.textContent = '';
      }
      written += piece;
      this.follow(() => renderReply(reply, written));
    };
    // A long prompt is read in steps; each one reports (and Stop takes effect between them).
    const onPromptProgress = ({ done, total }: PromptProgress) => {
      if (firstMs !== undefined) return;
      reply.dataset.reading = `${done}/${total}`;
      reply.dataset.promptReports = String(Number(reply.dataset.promptReports ?? 0) + 1);
      this.stats.textContent = `Reading the prompt: ${done.toLocaleString('en')} / ${total.toLocaleString('en')} tokens…`;
    };
    const request = { ...this.options.options(), stream: true as const, onPromptProgress };
    let usage: Usage | undefined;
    let timings: Timings | undefined;
    let finish: string | null = null;
    try {
      if (raw) {
        for await (const c of await engine.completions.create({ ...request, prompt: text })) {
          onText(c.choices[0].text);
          if (c.tokens) reply.dataset.tokens = JSON.stringify(c.tokens);
          ({ usage, timings } = c);
          finish = c.choices[0].finish_reason ?? finish;
        }
      } else {
        this.history.push({ role: 'user', content: text });
        for await (const c of await engine.chat.completions.create({ ...request, messages: this.history })) {
          onText(c.choices[0].delta.content ?? '');
          ({ usage, timings } = c);
          finish = c.choices[0].finish_reason ?? finish;
        }
        const { thinking, answer } = splitThinking(written);
        this.history.push({ role: 'assistant', content: answer, ...(thinking && { reasoning_content: thinking }) });
      }
      delete reply.dataset.reading;
      reply.dataset.finish = finish ?? '';
      // A stopped reply says so (and one stopped before its first word is not an empty bubble).
      if (finish === 'abort') this.follow(() => reply.classList.add('stopped'));
      if (usage && timings) this.showStats(usage, timings, firstMs, finish === 'abort');
      this.setState(finish === 'abort' ? 'stopped' : 'done');
    } catch (e) {
      if (!raw) this.history.pop();
      delete reply.dataset.reading;
      reply.classList.add('failed');
      const message = e instanceof LilypadError ? e.message : String((e as Error)?.message ?? e);
      this.follow(() => reply.append(Object.assign(document.createElement('div'), { className: 'chat-error', textContent: message })), true);
      this.stats.textContent = '';
      this.setState('error');
      this.options.onError?.(e);
    } finally {
      reply.dataset.done = 'true';
    }
  }

  /** Only what was measured: no rate for a phase that did not run. */
  private showStats(usage: Usage, timings: Timings, firstMs: number | undefined, stopped: boolean) {
    const s = this.stats;
    s.dataset.prefillTokensPerS = timings.prefill_tokens_per_s.toFixed(2);
    s.dataset.decodeTokensPerS = timings.decode_tokens_per_s.toFixed(2);
    s.dataset.firstTokenMs = String(Math.round(firstMs ?? 0));
    let prompt = usage.prefilled_tokens < usage.prompt_tokens
      ? `prompt ${usage.prefilled_tokens} new of ${usage.prompt_tokens} tokens`
      : `prompt ${usage.prompt_tokens} tokens`;
    if (timings.prefill_tokens_per_s > 0 && usage.prefilled_tokens > 0) prompt += ` at ${timings.prefill_tokens_per_s.toFixed(1)} tok/s`;
    const parts = [prompt];
    if (usage.completion_tokens > 0) {
      parts.push(`reply ${usage.completion_tokens} tokens${timings.decode_tokens_per_s > 0 ? ` at ${timings.decode_tokens_per_s.toFixed(1)} tok/s` : ''}`);
    }
    s.dataset.draftAccepted = String(timings.draft_accepted);
    if (timings.draft_accepted > 0) parts.push(`${timings.draft_accepted} drafted`);
    if (firstMs !== undefined) parts.push(`first token after ${(firstMs / 1e3).toFixed(2)} s`);
    if (stopped) parts.push('stopped');
    s.textContent = parts.join(' · ');
  }
}

/** Escape stops a reply in progress anywhere on the page (or in the view). */
export function stopOnEscape(target: HTMLElement | Document, chat: ChatView) {
  target.addEventListener('keydown', (e) => {
    if ((e as KeyboardEvent).key === 'Escape' && chat.busy) chat.stop();
  });
}
