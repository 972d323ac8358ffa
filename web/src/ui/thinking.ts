/**
 * A reply's thinking and its answer, as the agent core splits them (crates/agent/src/reply.rs):
 * with thinking on, the prompt already ends in `<think>`, so the reply may start inside it and
 * only its `</think>` tells where the answer begins.
 */
export interface SplitReply {
  /** The thinking, trimmed; undefined when the reply shows none (yet). */
  thinking?: string;
  /** The reply's `</think>` has arrived (false while it still thinks). */
  thought: boolean;
  answer: string;
}

export function splitThinking(text: string): SplitReply {
  const close = text.indexOf('</think>');
  if (close >= 0) {
    const head = text.slice(0, close);
    const open = head.indexOf('<think>');
    return { thinking: (open >= 0 ? head.slice(open + 7) : head).trim(), thought: true, answer: text.slice(close + 8).replace(/^\s+/, '') };
  }
  const open = text.indexOf('<think>');
  if (open >= 0 && text.slice(0, open).trim() === '') return { thinking: text.slice(open + 7).trim(), thought: false, answer: '' };
  return { thought: false, answer: text };
}

/** Fills `el` with the reply: thinking in a <details> (open while it streams), then the answer. */
export function renderReply(el: HTMLElement, text: string) {
  const { thinking, thought, answer } = splitThinking(text);
  let details = el.querySelector<HTMLDetailsElement>(':scope > details.thinking');
  let body = el.querySelector<HTMLElement>(':scope > .answer');
  if (!body) {
    body = Object.assign(document.createElement('div'), { className: 'answer' });
    el.append(body);
  }
  if (thinking !== undefined) {
    if (!details) {
      details = Object.assign(document.createElement('details'), { className: 'thinking', open: true });
      details.append(document.createElement('summary'), Object.assign(document.createElement('div'), { className: 'thinking-text' }));
      el.insertBefore(details, body);
    }
    // Folded once the answer begins; the user may open it again.
    if (thought && details.dataset.thought !== 'true') details.open = false;
    details.dataset.thought = String(thought);
    const words = thinking.split(/\s+/).filter(Boolean).length;
    details.querySelector('summary')!.textContent = thought ? `Thought (${words.toLocaleString('en')} words)` : 'Thinking…';
    details.querySelector('.thinking-text')!.textContent = thinking;
  } else {
    details?.remove();
  }
  body.textContent = answer;
}
