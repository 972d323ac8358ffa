/**
 * Conversation openings (a system prompt with its tools, evaluated by the model) kept in the
 * Origin Private File System, `lilypad-prompt-states/<key>.lpstate`, so that the agent's first
 * step after a reload reads only what follows its opening. The engine asks synchronously: the
 * folder is listed when a model loads, and a state is read with FileReaderSync when the engine
 * wants it; a new state is written in the background. Keys name the model's weights (and
 * adapter) and the opening's tokens, so a state never meets another model.
 */
import type { SyncFile } from './cache';

const DIR = 'lilypad-prompt-states';
const SUFFIX = '.lpstate';
/** States kept, newest first (each is tens of MiB for a few thousand tokens). */
const KEEP = 4;

/** The engine's side of the store (the wasm `PromptStateStore`). */
export interface PromptStates {
  load(key: string): Uint8Array | undefined;
  save(key: string, state: Uint8Array): void;
}

/** Workers only, so TypeScript's DOM library omits it. */
declare const FileReaderSync: { new (): { readAsArrayBuffer(blob: Blob): ArrayBuffer } };

interface SyncHandleFile extends FileSystemFileHandle {
  createSyncAccessHandle(): Promise<SyncFile>;
  /** Renames the file in its folder (Chromium 110+, Safari 16.4+, Firefox 111+). */
  move(name: string): Promise<void>;
}

/** The store, or undefined where there is no OPFS (the opening is then computed each time). */
export async function openPromptStates(): Promise<PromptStates | undefined> {
  if (!navigator.storage?.getDirectory || typeof FileReaderSync === 'undefined') return undefined;
  const dir = await folder(true);
  if (!dir) return undefined;
  // Blobs, not bytes: a File from OPFS is read only when a state is asked for.
  const states = new Map<string, Blob>();
  for await (const [name, handle] of dir as unknown as AsyncIterable<[string, FileSystemHandle]>) {
    if (name.endsWith(SUFFIX) && handle.kind === 'file') {
      states.set(name.slice(0, -SUFFIX.length), await (handle as FileSystemFileHandle).getFile());
    }
  }
  let writing = Promise.resolve();
  return {
    load(key) {
      const blob = states.get(key);
      if (!blob) return undefined;
      try {
        return new Uint8Array(new FileReaderSync().readAsArrayBuffer(blob));
      } catch {
        // Deleted or evicted meanwhile: the opening is computed again.
        states.delete(key);
        return undefined;
      }
    },
    save(key, state) {
      const copy = state.slice();
      states.set(key, new Blob([copy]));
      writing = writing.then(() => write(dir, key, copy)).catch((e) => console.warn(`lilypad: the prompt state was not saved: ${e}`));
    },
  };
}

/** Writes a state under a temporary name, then names it, then keeps only the newest `KEEP`. */
async function write(dir: FileSystemDirectoryHandle, key: string, state: Uint8Array): Promise<void> {
  const part = `${key}.part`;
  const handle = (await dir.getFileHandle(part, { create: true })) as SyncHandleFile;
  const file = await handle.createSyncAccessHandle();
  try {
    file.truncate(0);
    let at = 0;
    while (at < state.length) at += file.write(state.subarray(at), { at });
    file.flush();
  } finally {
    file.close();
  }
  await handle.move(`${key}${SUFFIX}`);
  const kept: Array<{ name: string; modified: number }> = [];
  for await (const [name, h] of dir as unknown as AsyncIterable<[string, FileSystemHandle]>) {
    if (name.endsWith(SUFFIX) && h.kind === 'file') kept.push({ name, modified: (await (h as FileSystemFileHandle).getFile()).lastModified });
  }
  kept.sort((a, b) => b.modified - a.modified);
  for (const old of kept.slice(KEEP)) await dir.removeEntry(old.name).catch(() => {});
}

/** What the stored openings take: their count and bytes (none where there is no OPFS). */
export async function promptStatesUsage(): Promise<{ count: number; bytes: number }> {
  const dir = await folder(false);
  let count = 0;
  let bytes = 0;
  if (!dir) return { count, bytes };
  for await (const [name, h] of dir as unknown as AsyncIterable<[string, FileSystemHandle]>) {
    if (h.kind !== 'file') continue;
    if (name.endsWith(SUFFIX)) count++;
    bytes += (await (h as FileSystemFileHandle).getFile()).size;
  }
  return { count, bytes };
}

/** Deletes every stored opening (the next conversation computes its own again). */
export async function deletePromptStates(): Promise<void> {
  const root = navigator.storage?.getDirectory ? await navigator.storage.getDirectory() : undefined;
  await root?.removeEntry(DIR, { recursive: true }).catch((e: DOMException) => {
    if (e?.name !== 'NotFoundError') throw e;
  });
}

async function folder(create: boolean): Promise<FileSystemDirectoryHandle | undefined> {
  if (!navigator.storage?.getDirectory) return undefined;
  try {
    return await (await navigator.storage.getDirectory()).getDirectoryHandle(DIR, { create });
  } catch {
    return undefined;
  }
}
