/**
 * Downloads a model into a persistent store with HTTP Range requests, chunk by chunk, so that
 * no more than one network read sits in memory; an interrupted download resumes where it
 * stopped, and a complete one is reused as long as the server's validator (ETag,
 * Last-Modified, size) still matches. The store is OPFS in the browser (opfs.ts) and an
 * in-memory fake in the unit tests.
 */
import { LilypadError } from './errors';
import {
  type Validator, cacheKey, canResume, parseContentRange, planChunks, rangeHeader, sameVersion,
  validatorFrom,
} from './ranges';

/** The subset of FileSystemSyncAccessHandle the cache and the engine's reader use. */
export interface SyncFile {
  read(buffer: Uint8Array, options: { at: number }): number;
  write(buffer: Uint8Array, options: { at: number }): number;
  truncate(size: number): void;
  getSize(): number;
  flush(): void;
  close(): void;
}

/** A cached (or partly downloaded) model. */
export interface CachedModel extends Validator {
  url: string;
  key: string;
  /** Bytes stored from the start of the file. */
  bytes: number;
  complete: boolean;
  /** Milliseconds since the epoch of the last write. */
  updated: number;
}

export interface ModelStore {
  get(key: string): Promise<CachedModel | null>;
  put(entry: CachedModel): Promise<void>;
  list(): Promise<CachedModel[]>;
  remove(key: string): Promise<void>;
  /** The model file, created empty when missing; one open handle at a time. */
  open(key: string): Promise<SyncFile>;
  /** Bytes still free, when the store knows. */
  room?(): Promise<number | undefined>;
}

export interface DownloadProgress {
  phase: 'download';
  bytesDone: number;
  bytesTotal: number;
  fromCache: boolean;
  /** Where this download started (0 unless resumed). */
  resumedFrom: number;
}

export interface DownloadOptions {
  url: string;
  store: ModelStore;
  fetch?: typeof fetch;
  /** Bytes per Range request. */
  chunkBytes?: number;
  signal?: AbortSignal;
  onProgress?: (p: DownloadProgress) => void;
  /**
   * Called after each chunk until it returns true: checks the model's header as soon as it
   * has arrived, and throws when the file can never load, so a bad file fails early.
   */
  checkHeader?: (file: SyncFile, available: number, size: number) => boolean;
}

export interface Downloaded {
  file: SyncFile;
  entry: CachedModel;
  fromCache: boolean;
}

export const DEFAULT_CHUNK_BYTES = 16 << 20;

function httpError(url: string, res: Response): LilypadError {
  const what = `${url}: HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`;
  return res.status === 404
    ? new LilypadError('not-found', `the model was not found (${what})`)
    : new LilypadError('http', `the server refused the model download (${what})`);
}

/** The server's current size and validator for `url`: HEAD, or a one-byte GET without it. */
async function probe(url: string, fetchFn: typeof fetch, signal?: AbortSignal): Promise<Validator> {
  let res = await fetchFn(url, { method: 'HEAD', cache: 'no-store', signal });
  if (res.status === 405 || res.status === 501) {
    res = await fetchFn(url, { headers: { Range: 'bytes=0-0' }, cache: 'no-store', signal });
    await res.body?.cancel();
  }
  if (!res.ok) throw httpError(url, res);
  const v = validatorFrom(res.headers);
  if (!v) throw new LilypadError('http', `${url}: the server does not say how large the model is`);
  return v;
}

/** Streams a response body into `file` from `at`, reporting the position after each write. */
async function writeBody(
  res: Response, file: SyncFile, at: number, end: number, progress: (pos: number) => void,
): Promise<void> {
  if (!res.body) throw new LilypadError('http', 'the server sent no body');
  const reader = res.body.getReader();
  let pos = at;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    if (pos + value.byteLength > end) {
      await reader.cancel();
      throw new LilypadError('http', `the server sent more than the ${end - at} bytes asked for`);
    }
    file.write(value, { at: pos });
    pos += value.byteLength;
    progress(pos);
  }
}

/** Opens `url` from the store, downloading (or resuming) it first when needed. */
export async function fetchModel(opts: DownloadOptions): Promise<Downloaded> {
  const { url, store, signal } = opts;
  const fetchFn = opts.fetch ?? globalThis.fetch.bind(globalThis);
  const key = await cacheKey(url);
  const cached = await store.get(key);

  let now: Validator;
  try {
    now = await probe(url, fetchFn, signal);
  } catch (e) {
    // Offline (or the server is down) but the whole file is here: use it.
    if (cached?.complete && !(e instanceof LilypadError) && (e as Error)?.name !== 'AbortError') {
      return { file: await store.open(key), entry: cached, fromCache: true };
    }
    throw e;
  }
  const report = (bytesDone: number, fromCache: boolean, resumedFrom: number) =>
    opts.onProgress?.({ phase: 'download', bytesDone, bytesTotal: now.size, fromCache, resumedFrom });

  if (cached?.complete && sameVersion(cached, now)) {
    const file = await store.open(key);
    if (file.getSize() === cached.size) {
      report(now.size, true, now.size);
      return { file, entry: cached, fromCache: true };
    }
    file.close(); // the stored bytes went missing: download again
  }

  const resumable = cached && !cached.complete && canResume(cached, now);
  const room = await store.room?.();
  const needed = now.size - (resumable ? cached.bytes : 0);
  if (room !== undefined && room < needed) {
    throw new LilypadError(
      'quota',
      `the model needs ${needed} bytes of browser storage but only ${room} are free; ` +
        'delete cached models or load it as a local file',
    );
  }

  const file = await store.open(key);
  try {
    let offset = resumable ? Math.min(cached.bytes, file.getSize()) : 0;
    if (offset === 0) file.truncate(0);
    const resumedFrom = offset;
    const entry: CachedModel = { ...now, url, key, bytes: offset, complete: false, updated: Date.now() };
    await store.put(entry);
    let headerChecked = !opts.checkHeader || (offset > 0 && opts.checkHeader(file, offset, now.size));
    report(offset, false, resumedFrom);

    const chunk = opts.chunkBytes ?? DEFAULT_CHUNK_BYTES;
    while (offset < now.size) {
      const [start, end] = planChunks(offset, now.size, chunk)[0];
      const res = await fetchFn(url, { headers: { Range: rangeHeader(start, end) }, cache: 'no-store', signal });
      if (!res.ok) throw httpError(url, res);
      let writeAt = start;
      let expectEnd = end;
      if (res.status === 206) {
        const got = parseContentRange(res.headers.get('content-range'));
        if (!got || got.start !== start || got.total !== now.size) {
          await res.body?.cancel();
          throw new LilypadError('http', `${url}: asked for ${rangeHeader(start, end)}, got ${res.headers.get('content-range')}`);
        }
        expectEnd = got.end + 1;
      } else {
        // A server without Range support sends the whole file: take it from the start.
        writeAt = 0;
        expectEnd = now.size;
      }
      let pos = writeAt;
      try {
        await writeBody(res, file, writeAt, expectEnd, (p) => {
          pos = p;
          report(p, false, resumedFrom);
        });
      } finally {
        // Whatever arrived is kept, so a retry resumes after it.
        file.flush();
        entry.bytes = pos;
        entry.updated = Date.now();
        await store.put(entry);
      }
      if (pos !== expectEnd) {
        throw new LilypadError(
          'network',
          `the download stopped at ${pos} of ${now.size} bytes; loading again resumes from there`,
        );
      }
      offset = pos;
      if (!headerChecked) headerChecked = opts.checkHeader!(file, offset, now.size);
    }
    entry.complete = true;
    await store.put(entry);
    return { file, entry, fromCache: false };
  } catch (e) {
    file.close();
    // A file that can never load is not worth keeping; a network failure is (to resume).
    const code = (e as { code?: string })?.code;
    if (code === 'corrupt-model' || code === 'unsupported-model') await store.remove(key);
    throw e;
  }
}
