import { describe, expect, it } from 'vitest';
import { LilypadError, errorData, toError } from '../../src/lib/errors';

describe('errorData', () => {
  it('keeps the code of engine errors across postMessage', () => {
    const sent = errorData(new LilypadError('corrupt-model', 'not a GGUF file'));
    expect(sent).toEqual({ code: 'corrupt-model', message: 'not a GGUF file' });
    const back = toError(structuredClone(sent));
    expect(back).toBeInstanceOf(LilypadError);
    expect(back.code).toBe('corrupt-model');
    // The wasm module throws plain objects with a code.
    expect(errorData({ code: 'too-large', message: 'binding' }).code).toBe('too-large');
  });

  it('maps browser failures to codes a page can branch on', () => {
    expect(errorData(new DOMException('stop', 'AbortError')).code).toBe('aborted');
    expect(errorData(new DOMException('full', 'QuotaExceededError')).code).toBe('quota');
    expect(errorData(new TypeError('Failed to fetch')).code).toBe('network');
    expect(errorData({ code: 'made-up', message: 'x' }).code).toBe('internal');
    expect(errorData(new Error('boom'))).toEqual({ code: 'internal', message: 'boom' });
    expect(errorData('plain string')).toEqual({ code: 'internal', message: 'plain string' });
  });
});
