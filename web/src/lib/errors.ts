/** Every failure the engine reports, with a stable `code` a page can branch on. */
export type ErrorCode =
  | 'no-webgpu' // no navigator.gpu, no adapter, or the device could not be created
  | 'device-lost'
  | 'out-of-memory'
  | 'too-large' // a buffer the model needs exceeds the adapter's limits
  | 'corrupt-model' // not a GGUF, truncated, or inconsistent tensors
  | 'unsupported-model' // an architecture, tensor type or tokenizer the engine lacks
  | 'not-found' // HTTP 404
  | 'http' // any other HTTP failure
  | 'network' // the connection failed or dropped; loading again resumes
  | 'read-failed' // a local file or cached copy could not be read
  | 'quota' // no room left in the browser's storage
  | 'bad-request'
  | 'context-full'
  | 'busy'
  | 'unloaded'
  | 'aborted'
  | 'internal';

export class LilypadError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string) {
    super(message);
    this.name = 'LilypadError';
    this.code = code;
  }
}

/** What crosses postMessage. */
export interface ErrorData {
  code: ErrorCode;
  message: string;
}

const CODES = new Set<string>([
  'no-webgpu', 'device-lost', 'out-of-memory', 'too-large', 'corrupt-model', 'unsupported-model',
  'not-found', 'http', 'network', 'read-failed', 'quota', 'bad-request', 'context-full', 'busy',
  'unloaded', 'aborted', 'internal',
]);

/** Anything thrown (a wasm error with `code`, a DOMException, a plain Error) as ErrorData. */
export function errorData(e: unknown): ErrorData {
  if (e && typeof e === 'object') {
    const { code, message, name } = e as { code?: unknown; message?: unknown; name?: unknown };
    const text = typeof message === 'string' ? message : String(e);
    if (typeof code === 'string' && CODES.has(code)) return { code: code as ErrorCode, message: text };
    if (name === 'AbortError') return { code: 'aborted', message: 'cancelled' };
    if (name === 'QuotaExceededError') {
      return { code: 'quota', message: `the browser's storage is full: ${text}` };
    }
    // fetch() rejects with a TypeError when the connection fails.
    if (name === 'TypeError' && /fetch|network/i.test(text)) return { code: 'network', message: text };
    return { code: 'internal', message: text };
  }
  return { code: 'internal', message: String(e) };
}

export function toError(data: ErrorData): LilypadError {
  return new LilypadError(data.code, data.message);
}
