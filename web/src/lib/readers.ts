/**
 * Synchronous ranged reads for the engine's GGUF reader (`ModelReader` in the wasm glue).
 * They run inside the worker, where blocking reads are allowed: the engine asks for the
 * header, then for one tensor at a time, and each read lands in wasm memory on its way to a
 * GPU buffer.
 */
import type { SyncFile } from './cache';
import { LilypadError } from './errors';

export interface ModelReader {
  readonly size: number;
  /** `undefined` when the range has not been downloaded yet. */
  readAt(offset: number, length: number): Uint8Array | undefined;
}

/** Small reads (the header's thousands of strings) are served from one block read ahead. */
const BLOCK = 1 << 20;

/** A stored (possibly partial) file: bytes past `available()` are not there yet. */
export function fileReader(file: SyncFile, size: number, available: () => number = () => size): ModelReader {
  let block = new Uint8Array(0);
  let blockAt = 0;
  const read = (offset: number, length: number) => {
    const buf = new Uint8Array(length);
    const n = file.read(buf, { at: offset });
    if (n !== length) {
      throw new LilypadError('read-failed', `the cached model is shorter than expected (${n} of ${length} bytes at ${offset})`);
    }
    return buf;
  };
  return {
    size,
    readAt(offset, length) {
      const end = offset + length;
      if (end > available()) return undefined;
      if (length >= BLOCK) return read(offset, length);
      if (offset < blockAt || end > blockAt + block.length) {
        blockAt = offset;
        block = read(offset, Math.min(BLOCK, available() - offset));
      }
      return block.slice(offset - blockAt, end - blockAt);
    },
  };
}

interface FileReaderSyncLike {
  readAsArrayBuffer(blob: Blob): ArrayBuffer;
}
declare const FileReaderSync: { new (): FileReaderSyncLike } | undefined;

/** A local `File` or `Blob`, read slice by slice. */
export function blobReader(blob: Blob): ModelReader {
  if (typeof FileReaderSync === 'undefined') {
    throw new LilypadError('internal', 'local files are read in a dedicated worker (FileReaderSync)');
  }
  const reader = new FileReaderSync();
  return {
    size: blob.size,
    readAt(offset, length) {
      try {
        return new Uint8Array(reader.readAsArrayBuffer(blob.slice(offset, offset + length)));
      } catch (e) {
        throw new LilypadError('read-failed', `the local file could not be read: ${(e as Error).message}`);
      }
    },
  };
}
