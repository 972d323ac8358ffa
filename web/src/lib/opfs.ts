/**
 * The model cache in the Origin Private File System: `lilypad-models/<key>.gguf` holds the
 * bytes, `<key>.json` what was stored (URL, validator, bytes so far). Listing and deleting
 * work from any page or worker; downloading needs the synchronous access handles that only
 * dedicated workers have.
 */
import type { CachedModel, ModelStore, SyncFile } from './cache';
import { LilypadError } from './errors';

const DIR = 'lilypad-models';

/** Sync access handles are dedicated-worker only, so TypeScript's DOM library omits them. */
interface SyncHandleFile extends FileSystemFileHandle {
  createSyncAccessHandle(): Promise<SyncFile>;
}

async function folder(): Promise<FileSystemDirectoryHandle> {
  if (!navigator.storage?.getDirectory) {
    throw new LilypadError('read-failed', 'this browser has no Origin Private File System to cache models in');
  }
  const root = await navigator.storage.getDirectory();
  return root.getDirectoryHandle(DIR, { create: true });
}

const isNotFound = (e: unknown) => (e as DOMException)?.name === 'NotFoundError';

async function readJson(dir: FileSystemDirectoryHandle, name: string): Promise<CachedModel | null> {
  try {
    const file = await (await dir.getFileHandle(name)).getFile();
    return JSON.parse(await file.text()) as CachedModel;
  } catch (e) {
    if (isNotFound(e) || e instanceof SyntaxError) return null;
    throw e;
  }
}

async function writeText(dir: FileSystemDirectoryHandle, name: string, text: string): Promise<void> {
  const handle = await dir.getFileHandle(name, { create: true });
  if ('createWritable' in handle) {
    const w = await handle.createWritable();
    await w.write(text);
    await w.close();
    return;
  }
  // Safari has no createWritable for OPFS; its workers have sync handles.
  const sync = await (handle as SyncHandleFile).createSyncAccessHandle();
  try {
    const bytes = new TextEncoder().encode(text);
    sync.truncate(0);
    sync.write(bytes, { at: 0 });
    sync.flush();
  } finally {
    sync.close();
  }
}

export const opfsStore: ModelStore = {
  async get(key) {
    return readJson(await folder(), `${key}.json`);
  },
  async put(entry) {
    await writeText(await folder(), `${entry.key}.json`, JSON.stringify(entry));
  },
  async list() {
    const dir = await folder();
    const out: CachedModel[] = [];
    for await (const name of (dir as unknown as { keys(): AsyncIterable<string> }).keys()) {
      if (!name.endsWith('.json')) continue;
      const entry = await readJson(dir, name);
      if (entry) out.push(entry);
    }
    return out.sort((a, b) => b.updated - a.updated);
  },
  async remove(key) {
    const dir = await folder();
    for (const name of [`${key}.gguf`, `${key}.json`]) {
      try {
        await dir.removeEntry(name);
      } catch (e) {
        if (isNotFound(e)) continue;
        if ((e as DOMException)?.name === 'NoModificationAllowedError') {
          throw new LilypadError('busy', 'the model is in use; unload it before deleting it');
        }
        throw e;
      }
    }
  },
  async open(key) {
    const handle = await (await folder()).getFileHandle(`${key}.gguf`, { create: true });
    return (handle as SyncHandleFile).createSyncAccessHandle();
  },
  async room() {
    const { quota, usage } = (await navigator.storage.estimate?.()) ?? {};
    return quota !== undefined && usage !== undefined ? quota - usage : undefined;
  },
};
