import { describe, expect, it } from 'vitest';
import { type CachedModel, type ModelStore, type SyncFile, fetchModel } from '../../src/lib/cache';
import { LilypadError } from '../../src/lib/errors';
import { fileReader } from '../../src/lib/readers';

/** OPFS stand-in: files are growable byte arrays, one open handle per file. */
class MemoryStore implements ModelStore {
  meta = new Map<string, CachedModel>();
  files = new Map<string, Uint8Array>();
  open_ = new Set<string>();
  free?: number;

  async get(key: string) {
    const m = this.meta.get(key);
    return m ? { ...m } : null;
  }
  async put(entry: CachedModel) {
    this.meta.set(entry.key, { ...entry });
  }
  async list() {
    return [...this.meta.values()];
  }
  async remove(key: string) {
    if (this.open_.has(key)) throw new LilypadError('busy', 'in use');
    this.meta.delete(key);
    this.files.delete(key);
  }
  async room() {
    return this.free;
  }
  async open(key: string): Promise<SyncFile> {
    if (this.open_.has(key)) throw new Error(`${key} is already open`);
    this.open_.add(key);
    const store = this;
    const data = () => store.files.get(key) ?? new Uint8Array(0);
    return {
      read(buf, { at }) {
        const src = data().subarray(at, at + buf.length);
        buf.set(src);
        return src.length;
      },
      write(buf, { at }) {
        let d = data();
        if (at + buf.length > d.length) {
          const grown = new Uint8Array(at + buf.length);
          grown.set(d);
          d = grown;
        }
        d.set(buf, at);
        store.files.set(key, d);
        return buf.length;
      },
      truncate(size) {
        store.files.set(key, data().slice(0, size));
      },
      getSize: () => data().length,
      flush() {},
      close: () => store.open_.delete(key),
    };
  }
}

interface ServerOptions {
  etag?: string;
  ranges?: boolean;
  /** Drop the connection after this many body bytes (once). */
  dropAfter?: number;
  status?: number;
}

/** A fetch over `body` that honours Range like a static file server and logs each request. */
function server(body: Uint8Array, opts: ServerOptions = {}) {
  const log: string[] = [];
  let dropAfter = opts.dropAfter;
  const fetchFn = async (_url: RequestInfo | URL, init?: RequestInit) => {
    const method = init?.method ?? 'GET';
    const range = new Headers(init?.headers).get('range');
    log.push(`${method} ${range ?? ''}`.trim());
    const headers = new Headers({ etag: opts.etag ?? '"v1"' });
    if (opts.status) return new Response(null, { status: opts.status, statusText: 'Not Found' });
    if (method === 'HEAD') {
      headers.set('content-length', String(body.length));
      return new Response(null, { status: 200, headers });
    }
    let part = body;
    let status = 200;
    const m = range?.match(/^bytes=(\d+)-(\d+)$/);
    if (m && opts.ranges !== false) {
      const [a, b] = [Number(m[1]), Math.min(Number(m[2]), body.length - 1)];
      part = body.slice(a, b + 1);
      status = 206;
      headers.set('content-range', `bytes ${a}-${b}/${body.length}`);
    }
    const cut = dropAfter;
    dropAfter = undefined;
    // One piece per pull, so an error arrives after the pieces before it were read.
    let i = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(c) {
        if (cut !== undefined && i >= cut) c.error(new TypeError('network error'));
        else if (i >= part.length) c.close();
        else c.enqueue(part.slice(i, (i += 7)));
      },
    });
    return new Response(stream, { status, headers });
  };
  return { fetch: fetchFn as typeof fetch, log };
}

const bytes = (n: number) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + 7) & 255);
const URL_ = 'http://localhost/m.gguf';

describe('fetchModel', () => {
  it('downloads in ranges, then serves the cached copy with one HEAD', async () => {
    const body = bytes(100);
    const store = new MemoryStore();
    const s = server(body);
    const seen: number[] = [];
    const got = await fetchModel({ url: URL_, store, fetch: s.fetch, chunkBytes: 40, onProgress: (p) => seen.push(p.bytesDone) });
    expect(got.fromCache).toBe(false);
    expect(s.log).toEqual(['HEAD', 'GET bytes=0-39', 'GET bytes=40-79', 'GET bytes=80-99']);
    expect(store.files.get(got.entry.key)).toEqual(body);
    expect(got.entry).toMatchObject({ complete: true, bytes: 100, size: 100, etag: '"v1"', url: URL_ });
    expect(seen.at(-1)).toBe(100);
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    got.file.close();

    s.log.length = 0;
    const again = await fetchModel({ url: URL_, store, fetch: s.fetch, chunkBytes: 40 });
    expect(again.fromCache).toBe(true);
    expect(s.log).toEqual(['HEAD']);
    const r = fileReader(again.file, 100);
    expect(r.readAt(95, 5)).toEqual(body.slice(95));
  });

  it('resumes an interrupted download where it stopped', async () => {
    const body = bytes(100);
    const store = new MemoryStore();
    const s = server(body, { dropAfter: 21 });
    const err = await fetchModel({ url: URL_, store, fetch: s.fetch, chunkBytes: 40 }).catch((e) => e);
    expect(err).toBeInstanceOf(TypeError);
    const [entry] = await store.list();
    expect(entry).toMatchObject({ complete: false, bytes: 21 });
    expect(store.open_.size).toBe(0);

    s.log.length = 0;
    const got = await fetchModel({ url: URL_, store, fetch: s.fetch, chunkBytes: 40 });
    expect(s.log).toEqual(['HEAD', 'GET bytes=21-60', 'GET bytes=61-99']);
    expect(store.files.get(got.entry.key)).toEqual(body);
  });

  it('starts over when the file changed on the server', async () => {
    const store = new MemoryStore();
    const old = server(bytes(100), { dropAfter: 30 });
    await fetchModel({ url: URL_, store, fetch: old.fetch, chunkBytes: 40 }).catch(() => {});
    const body = bytes(100).reverse();
    const changed = server(body, { etag: '"v2"' });
    const got = await fetchModel({ url: URL_, store, fetch: changed.fetch, chunkBytes: 40 });
    expect(changed.log[1]).toBe('GET bytes=0-39');
    expect(store.files.get(got.entry.key)).toEqual(body);
    got.file.close();
    // A complete copy of an outdated version is replaced too.
    const newer = server(bytes(100), { etag: '"v3"' });
    const again = await fetchModel({ url: URL_, store, fetch: newer.fetch, chunkBytes: 40 });
    expect(again.fromCache).toBe(false);
    expect(store.files.get(again.entry.key)).toEqual(bytes(100));
  });

  it('takes a whole-file answer from a server without Range support', async () => {
    const body = bytes(100);
    const store = new MemoryStore();
    const s = server(body, { ranges: false });
    const got = await fetchModel({ url: URL_, store, fetch: s.fetch, chunkBytes: 40 });
    expect(s.log).toEqual(['HEAD', 'GET bytes=0-39']);
    expect(store.files.get(got.entry.key)).toEqual(body);
  });

  it('reports 404, a full disk and a bad header as typed errors, keeping nothing bad', async () => {
    const store = new MemoryStore();
    const missing = await fetchModel({ url: URL_, store, fetch: server(bytes(1), { status: 404 }).fetch }).catch((e) => e);
    expect(missing).toMatchObject({ code: 'not-found' });
    expect(missing.message).toContain('404');

    store.free = 50;
    const full = await fetchModel({ url: URL_, store, fetch: server(bytes(100)).fetch }).catch((e) => e);
    expect(full).toMatchObject({ code: 'quota' });
    store.free = undefined;

    const checked: number[] = [];
    const checkHeader = (_f: SyncFile, available: number) => {
      checked.push(available);
      if (available >= 40) throw new LilypadError('corrupt-model', 'not a GGUF file');
      return false;
    };
    const s = server(bytes(100));
    const bad = await fetchModel({ url: URL_, store, fetch: s.fetch, chunkBytes: 40, checkHeader }).catch((e) => e);
    expect(bad).toMatchObject({ code: 'corrupt-model' });
    // It failed after the first chunk, not after the whole file, and left no cache entry.
    expect(s.log).toEqual(['HEAD', 'GET bytes=0-39']);
    expect(await store.list()).toEqual([]);
  });

  it('uses a complete copy when the server cannot be reached', async () => {
    const store = new MemoryStore();
    const s = server(bytes(100));
    (await fetchModel({ url: URL_, store, fetch: s.fetch })).file.close();
    const offline = (async () => {
      throw new TypeError('Failed to fetch');
    }) as typeof fetch;
    const got = await fetchModel({ url: URL_, store, fetch: offline });
    expect(got.fromCache).toBe(true);
  });
});

describe('fileReader', () => {
  it('serves small reads from a block and refuses bytes not downloaded yet', () => {
    const store = new MemoryStore();
    return store.open('k').then((f) => {
      f.write(bytes(100), { at: 0 });
      let available = 50;
      const r = fileReader(f, 100, () => available);
      expect(r.readAt(10, 5)).toEqual(bytes(100).slice(10, 15));
      expect(r.readAt(45, 10)).toBeUndefined();
      available = 100;
      expect(r.readAt(45, 10)).toEqual(bytes(100).slice(45, 55));
    });
  });
});
