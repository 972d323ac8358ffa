/**
 * LoRA adapters in PEFT's format (a folder with `adapter_config.json` and
 * `adapter_model.safetensors`, as Hugging Face trainers save them). The page names an adapter
 * (`resolveLora`: a folder URL, or its two files as URLs, Files or Blobs); the worker reads the
 * two files whole (`readLoraFiles`: adapters are megabytes, not gigabytes) and hands their bytes
 * to the engine, which maps them onto the model's GGUF tensors.
 */
import { LilypadError } from './errors';
import type { AdapterFileSource, LoraSource } from './protocol';

/** One file of an adapter: a URL (absolute, or relative to the page), or a local File / Blob. */
export type AdapterFile = string | URL | File | Blob;

/**
 * A LoRA adapter trained on the model's Hugging Face checkpoint: the URL of its folder (the
 * two files are fetched under it), or its two files.
 */
export type LoraAdapter = string | URL | { config: AdapterFile; weights: AdapterFile };

export const ADAPTER_CONFIG = 'adapter_config.json';
export const ADAPTER_WEIGHTS = 'adapter_model.safetensors';

const isUrl = (f: unknown): f is string | URL => typeof f === 'string' || f instanceof URL;

function fileSource(f: AdapterFile, base: string, what: string): AdapterFileSource {
  if (isUrl(f)) return { kind: 'url', url: new URL(f, base).href };
  if (f instanceof Blob) return { kind: 'blob', blob: f };
  throw new LilypadError('bad-request', `lora.${what}: a URL, a File or a Blob`);
}

/** What the worker is sent for `lora`; URLs are resolved against `base` (the page). */
export function resolveLora(lora: LoraAdapter, base: string = location.href): LoraSource {
  if (isUrl(lora)) {
    const folder = new URL(lora, base);
    const last = folder.pathname.split('/').pop() ?? '';
    if (/\.(json|safetensors|bin)$/i.test(last)) {
      throw new LilypadError(
        'bad-request',
        `lora: ${folder.href} names a file; give the adapter's folder, or { config, weights }`,
      );
    }
    if (!folder.pathname.endsWith('/')) folder.pathname += '/';
    folder.search = '';
    folder.hash = '';
    return {
      config: { kind: 'url', url: new URL(ADAPTER_CONFIG, folder).href },
      weights: { kind: 'url', url: new URL(ADAPTER_WEIGHTS, folder).href },
    };
  }
  if (!lora || typeof lora !== 'object' || !('config' in lora) || !('weights' in lora)) {
    throw new LilypadError('bad-request', 'lora: the URL of an adapter folder, or { config, weights }');
  }
  return { config: fileSource(lora.config, base, 'config'), weights: fileSource(lora.weights, base, 'weights') };
}

/**
 * The two files of an adapter among picked files (a folder picker's or a multiple-file
 * input's), found by name; throws a `bad-request` LilypadError when one is missing.
 */
export function loraFromFiles(files: Iterable<File>): { config: File; weights: File } {
  const list = [...files];
  const find = (name: string) => list.find((f) => f.name === name);
  const config = find(ADAPTER_CONFIG);
  const weights = find(ADAPTER_WEIGHTS);
  if (!config || !weights) {
    const missing = [!config && ADAPTER_CONFIG, !weights && ADAPTER_WEIGHTS].filter(Boolean).join(' and ');
    throw new LilypadError('bad-request', `a LoRA adapter needs ${missing} (PEFT's save_pretrained with safe_serialization)`);
  }
  return { config, weights };
}

/** Fetches or reads one adapter file whole. */
async function readFile(src: AdapterFileSource, name: string, fetchFn: typeof fetch, signal?: AbortSignal): Promise<Uint8Array> {
  if (src.kind === 'blob') {
    try {
      return new Uint8Array(await src.blob.arrayBuffer());
    } catch (e) {
      throw new LilypadError('read-failed', `the LoRA adapter's ${name} could not be read: ${(e as Error).message ?? e}`);
    }
  }
  const res = await fetchFn(src.url, { signal });
  if (!res.ok) {
    const what = `${src.url}: HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`;
    throw res.status === 404
      ? new LilypadError('not-found', `the LoRA adapter's ${name} was not found (${what})`)
      : new LilypadError('http', `the server refused the LoRA adapter's ${name} (${what})`);
  }
  return new Uint8Array(await res.arrayBuffer());
}

/** Both files' bytes (in the worker). */
export async function readLoraFiles(
  lora: LoraSource,
  { fetch: fetchFn = fetch, signal }: { fetch?: typeof fetch; signal?: AbortSignal } = {},
): Promise<{ config: Uint8Array; weights: Uint8Array }> {
  const [config, weights] = await Promise.all([
    readFile(lora.config, ADAPTER_CONFIG, fetchFn, signal),
    readFile(lora.weights, ADAPTER_WEIGHTS, fetchFn, signal),
  ]);
  return { config, weights };
}
