import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LilypadError } from '../../src/lib/errors';
import { loraFromFiles, readLoraFiles, resolveLora } from '../../src/lib/lora';

const PAGE = 'https://example.org/app/index.html';
const fixture = join(import.meta.dirname, '../../../tests/fixtures/lora/llama-tiny/adapter');

describe('resolveLora', () => {
  it('takes a folder URL, with or without its trailing slash, relative to the page', () => {
    const files = {
      config: { kind: 'url', url: 'https://hf.example/u/r/resolve/main/adapter_config.json' },
      weights: { kind: 'url', url: 'https://hf.example/u/r/resolve/main/adapter_model.safetensors' },
    };
    expect(resolveLora('https://hf.example/u/r/resolve/main/', PAGE)).toEqual(files);
    expect(resolveLora('https://hf.example/u/r/resolve/main', PAGE)).toEqual(files);
    expect(resolveLora(new URL('https://hf.example/u/r/resolve/main?x=1'), PAGE)).toEqual(files);
    expect(resolveLora('adapters/mine', PAGE).config).toEqual({ kind: 'url', url: 'https://example.org/app/adapters/mine/adapter_config.json' });
  });

  it('takes the two files as URLs, Files or Blobs', () => {
    const weights = new Blob([new Uint8Array(8)]);
    expect(resolveLora({ config: '../c.json', weights }, PAGE)).toEqual({
      config: { kind: 'url', url: 'https://example.org/c.json' },
      weights: { kind: 'blob', blob: weights },
    });
  });

  it('refuses a file given as the folder, and anything else', () => {
    const code = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        expect(e).toBeInstanceOf(LilypadError);
        return (e as LilypadError).code;
      }
      return 'none';
    };
    expect(code(() => resolveLora('https://x.example/a/adapter_config.json', PAGE))).toBe('bad-request');
    expect(code(() => resolveLora('https://x.example/a/adapter_model.safetensors', PAGE))).toBe('bad-request');
    expect(code(() => resolveLora({ config: 'c.json' } as never, PAGE))).toBe('bad-request');
    expect(code(() => resolveLora({ config: 'c.json', weights: 42 } as never, PAGE))).toBe('bad-request');
  });
});

describe('loraFromFiles', () => {
  it('finds the two files among picked ones, by name', () => {
    const config = new File(['{}'], 'adapter_config.json');
    const weights = new File(['x'], 'adapter_model.safetensors');
    const readme = new File(['#'], 'README.md');
    expect(loraFromFiles([readme, weights, config])).toEqual({ config, weights });
    expect(() => loraFromFiles([readme, config])).toThrow(/adapter_model\.safetensors/);
    expect(() => loraFromFiles([])).toThrow(/adapter_config\.json and adapter_model\.safetensors/);
  });
});

describe('readLoraFiles', () => {
  const config = readFileSync(join(fixture, 'adapter_config.json'));
  const weights = readFileSync(join(fixture, 'adapter_model.safetensors'));
  const served: Record<string, Buffer> = {
    'https://x.example/a/adapter_config.json': config,
    'https://x.example/a/adapter_model.safetensors': weights,
  };
  const fakeFetch = (async (url: string) => {
    if (url.includes('/broken/')) return new Response('no', { status: 500, statusText: 'Internal Server Error' });
    const body = served[url];
    return body ? new Response(new Uint8Array(body)) : new Response('missing', { status: 404, statusText: 'Not Found' });
  }) as unknown as typeof fetch;

  it('fetches a folder\'s two files whole', async () => {
    const got = await readLoraFiles(resolveLora('https://x.example/a', PAGE), { fetch: fakeFetch });
    expect(Buffer.from(got.config).equals(config)).toBe(true);
    expect(Buffer.from(got.weights).equals(weights)).toBe(true);
  });

  it('reads Files and Blobs', async () => {
    const got = await readLoraFiles(
      resolveLora({ config: new File([new Uint8Array(config)], 'adapter_config.json'), weights: new Blob([new Uint8Array(weights)]) }, PAGE),
      { fetch: fakeFetch },
    );
    expect(got.config.byteLength).toBe(config.byteLength);
    expect(Buffer.from(got.weights).equals(weights)).toBe(true);
  });

  it('reports a missing file and a refusing server with codes', async () => {
    const err = (lora: string) => readLoraFiles(resolveLora(lora, PAGE), { fetch: fakeFetch }).catch((e: LilypadError) => e);
    const missing = await err('https://x.example/elsewhere/');
    expect(missing).toBeInstanceOf(LilypadError);
    expect((missing as LilypadError).code).toBe('not-found');
    expect((missing as LilypadError).message).toMatch(/LoRA adapter's adapter_config\.json was not found/);
    expect(((await err('https://x.example/broken/')) as LilypadError).code).toBe('http');
  });
});
