import { describe, expect, it } from 'vitest';
import {
  cacheKey, canResume, parseContentRange, planChunks, rangeHeader, sameVersion, validatorFrom,
} from '../../src/lib/ranges';

describe('ranges', () => {
  it('parses Content-Range and rejects nonsense', () => {
    expect(parseContentRange('bytes 0-99/1000')).toEqual({ start: 0, end: 99, total: 1000 });
    expect(parseContentRange('bytes 900-999/1000')).toEqual({ start: 900, end: 999, total: 1000 });
    expect(parseContentRange('bytes */1000')).toBeNull();
    expect(parseContentRange('bytes 10-5/1000')).toBeNull();
    expect(parseContentRange('bytes 0-1000/1000')).toBeNull();
    expect(parseContentRange(null)).toBeNull();
  });

  it('plans inclusive Range headers over exclusive chunks', () => {
    expect(planChunks(0, 10, 4)).toEqual([[0, 4], [4, 8], [8, 10]]);
    expect(planChunks(8, 10, 4)).toEqual([[8, 10]]);
    expect(planChunks(10, 10, 4)).toEqual([]);
    expect(rangeHeader(4, 8)).toBe('bytes=4-7');
    expect(() => planChunks(0, 10, 0)).toThrow();
  });

  it('reads validators, preferring the LFS ETag', () => {
    const h = new Headers({ 'content-length': '42', etag: 'W/"abc"', 'last-modified': 'Tue, 01 Dec 2026 00:00:00 GMT' });
    expect(validatorFrom(h)).toEqual({ size: 42, etag: '"abc"', lastModified: 'Tue, 01 Dec 2026 00:00:00 GMT' });
    const hf = new Headers({ 'content-range': 'bytes 0-0/5000', etag: '"redirect"', 'x-linked-etag': '"sha256"' });
    expect(validatorFrom(hf)).toEqual({ size: 5000, etag: '"sha256"' });
    expect(validatorFrom(new Headers())).toBeNull();
  });

  it('compares versions by the strongest validator both sides have', () => {
    const a = { size: 10, etag: '"x"', lastModified: 'A' };
    expect(sameVersion(a, { size: 10, etag: '"x"', lastModified: 'B' })).toBe(true);
    expect(sameVersion(a, { size: 10, etag: '"y"', lastModified: 'A' })).toBe(false);
    expect(sameVersion(a, { size: 11, etag: '"x"' })).toBe(false);
    expect(sameVersion({ size: 10, lastModified: 'A' }, { size: 10, lastModified: 'B' })).toBe(false);
    // Without any validator a partial download is not resumed (it may be another file now).
    expect(sameVersion({ size: 10 }, { size: 10 })).toBe(true);
    expect(canResume({ size: 10 }, { size: 10 })).toBe(false);
    expect(canResume(a, { size: 10, etag: '"x"' })).toBe(true);
  });

  it('keys the cache by a hash of the URL', async () => {
    const a = await cacheKey('http://localhost/models/a.gguf');
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(await cacheKey('http://localhost/models/a.gguf')).toBe(a);
    expect(await cacheKey('http://localhost/models/b.gguf')).not.toBe(a);
  });
});
