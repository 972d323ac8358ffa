/**
 * The language models an agent run can use, as the agent's ModelHost: the browser engine's
 * chat sessions (the conversation's state stays in the engine between steps, so each step
 * evaluates only its new tokens) or a scripted list of replies (tests, demos, replays).
 */
import type { ChatMessage, Engine, EngineInfo, Progress, PromptProgress } from '../lib/index';
import type { ModelHost } from './wasm/lilypad_agent_wasm.js';
import type { Message } from '../lib/wire';
import { formatBytes } from '../ui/presets';

type ModelRequest = Parameters<ModelHost['complete']>[0];
type ModelReply = Awaited<ReturnType<ModelHost['complete']>>;

/** The agent's messages (tool calls with parsed arguments) as OpenAI's. */
export function toChatMessages(messages: Message[]): ChatMessage[] {
  return messages.map((m) => {
    const out: ChatMessage = { role: m.role, content: m.content };
    if (m.reasoning_content) out.reasoning_content = m.reasoning_content;
    if (m.name) out.name = m.name;
    if (m.tool_calls?.length) {
      out.tool_calls = m.tool_calls.map((c) => ({
        type: 'function',
        function: { name: c.name, arguments: JSON.stringify(c.arguments ?? {}) },
      }));
    }
    return out;
  });
}

/** A model the panel can stop at any moment and hear reading its prompt. */
export interface EngineModelHost extends ModelHost {
  /** Stops the request in flight, also while the model reads its prompt. */
  abort(): void;
  /** Told how far the model has read each step's prompt (set by the panel). */
  onPromptProgress?: (p: PromptProgress) => void;
}

/** A model loaded in the browser engine (createEngine); `info` is its `engine.info()`. */
export function engineModel(engine: Engine, info: EngineInfo): EngineModelHost {
  const host: EngineModelHost = {
    name: info.model.name,
    contextLength: info.model.context,
    abort: () => engine.abort(),
    async complete(req: ModelRequest, onText: (text: string) => boolean): Promise<ModelReply> {
      const stream = await engine.chat.completions.create({
        onPromptProgress: (p) => host.onPromptProgress?.(p),
        messages: toChatMessages(req.messages),
        tools: req.tools,
        stream: true,
        max_tokens: req.max_tokens,
        temperature: req.sampling.temperature,
        top_p: req.sampling.top_p,
        top_k: req.sampling.top_k,
        seed: req.sampling.seed,
        presence_penalty: req.sampling.presence_penalty,
        repeat_penalty: req.sampling.repeat_penalty,
        enable_thinking: req.enable_thinking,
      });
      let text = '';
      let stopped = false;
      let last: { finish_reason: string | null; usage?: { prompt_tokens: number; completion_tokens: number; prefilled_tokens: number }; timings?: { prefill_ms: number; decode_ms: number } } | undefined;
      for await (const chunk of stream) {
        const piece = chunk.choices[0]?.delta.content ?? '';
        if (piece) {
          text += piece;
          if (!stopped && !onText(piece)) {
            stopped = true;
            engine.abort();
          }
        }
        last = { finish_reason: chunk.choices[0]?.finish_reason ?? null, usage: chunk.usage, timings: chunk.timings };
      }
      const finish = last?.finish_reason === 'length' ? 'length' : last?.finish_reason === 'abort' || stopped ? 'aborted' : 'stop';
      return {
        text,
        finish,
        prompt_tokens: last?.usage?.prompt_tokens ?? 0,
        prefilled_tokens: last?.usage?.prefilled_tokens ?? 0,
        generated_tokens: last?.usage?.completion_tokens ?? 0,
        prefill_ms: last?.timings?.prefill_ms ?? 0,
        decode_ms: last?.timings?.decode_ms ?? 0,
      };
    },
  };
  return host;
}

/** The panel's "scripted" choice: replies typed as a JSON array of strings. */
export function scriptedModelFromJson(json: string): ModelHost {
  const replies = JSON.parse(json) as unknown;
  if (!Array.isArray(replies) || !replies.every((r) => typeof r === 'string')) {
    throw new Error('scripted replies must be a JSON array of strings');
  }
  return scriptedModel(replies);
}

/** A model's load progress as one status line. */
export function progressText(p: Progress): string {
  if (p.phase === 'download') return `Downloading ${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)}`;
  if (p.phase === 'upload') return `Uploading weights ${p.tensorsDone} / ${p.tensorsTotal}`;
  return `Ready in ${p.seconds.toFixed(1)} s${p.fromCache ? ' (from the cache)' : ''}`;
}

/** Replies with `replies` in order, streamed word by word; fails when they run out. */
export function scriptedModel(replies: string[], name = 'scripted'): ModelHost {
  const queue = [...replies];
  return {
    name,
    contextLength: Number.MAX_SAFE_INTEGER,
    async complete(_req: ModelRequest, onText: (text: string) => boolean): Promise<ModelReply> {
      const reply = queue.shift();
      if (reply === undefined) throw new Error('the script has no more replies');
      let finish: ModelReply['finish'] = 'stop';
      let sent = '';
      for (const piece of reply.split(/(?<= )/)) {
        await Promise.resolve();
        sent += piece;
        if (!onText(piece)) {
          finish = 'aborted';
          break;
        }
      }
      const words = sent.split(/\s+/).filter(Boolean).length;
      return { text: sent, finish, prompt_tokens: 0, prefilled_tokens: 0, generated_tokens: words, prefill_ms: 0, decode_ms: 0 };
    },
  };
}
