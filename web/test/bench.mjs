#!/usr/bin/env node
// Browser speed on this machine: the built playground in headless Chromium (WebGPU; SwiftShader
// without a GPU) loads a model cold (downloaded from the local server) and again from the OPFS
// cache, and generates greedily from a fixed raw prompt. Prints prefill and decode tokens/s,
// model load time and time to first token (load + prefill) for each load, as JSON.
//
//   node test/bench.mjs [--model ../models/SmolLM2-135M-Instruct.Q4_1.gguf] [--tokens 64]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { startServer } from '../scripts/serve.mjs';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: join(import.meta.dirname, '../../models/SmolLM2-135M-Instruct.Q4_1.gguf') },
    tokens: { type: 'string', default: '64' },
  },
});
const MODEL = resolve(values.model);
// A prompt whose greedy answer runs past the token limit, so decode is timed over all of it.
export const BENCH_PROMPT = '<|im_start|>user\nWrite a long story about a frog who lives in a pond.<|im_end|>\n<|im_start|>assistant\n';
const LONG = 15 * 60_000;

const server = await startServer({ models: dirname(MODEL), dist: join(import.meta.dirname, '../dist') });
const profile = mkdtempSync(join(tmpdir(), 'lilypad-bench-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--enable-unsafe-webgpu', '--no-sandbox', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = context.pages()[0] ?? (await context.newPage());

async function run() {
  await page.goto(`${server.url}/`);
  await page.waitForFunction(() => document.getElementById('gpu-status').dataset.ok !== undefined, null, { timeout: 60_000 });
  await page.fill('#model-url', '');
  await page.selectOption('#preset', 'custom');
  await page.fill('#model-url', `${server.url}/models/${basename(MODEL)}`);
  const started = Date.now();
  await page.click('#load');
  await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state), null, { timeout: LONG });
  const loadMs = Date.now() - started;
  if ((await page.evaluate(() => document.body.dataset.state)) !== 'ready') throw new Error(await page.textContent('#error'));
  await page.selectOption('#mode', 'raw');
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', values.tokens);
  await page.fill('#input', BENCH_PROMPT);
  await page.click('#send');
  await page.waitForFunction(() => document.querySelector('.message.assistant')?.dataset.done === 'true', null, { timeout: LONG });
  const stats = await page.evaluate(() => ({ ...document.getElementById('stats').dataset }));
  const tokens = JSON.parse((await page.locator('.message.assistant').first().getAttribute('data-tokens')) ?? '[]');
  return {
    load_ms: loadMs,
    first_token_ms: loadMs + Number(stats.firstTokenMs),
    generated_tokens: tokens.length,
    prefill_tokens_per_s: Number(stats.prefillTokensPerS),
    decode_tokens_per_s: Number(stats.decodeTokensPerS),
  };
}

try {
  const adapter = await (async () => { await page.goto(`${server.url}/`); return page.evaluate(async () => (await navigator.gpu.requestAdapter())?.info.architecture); })();
  const cold = await run();
  const cached = await run();
  const modelGets = server.log.filter((e) => e.path.endsWith(basename(MODEL)) && e.method === 'GET');
  console.log(JSON.stringify({ adapter, model: basename(MODEL), cold, cached, model_get_requests: modelGets.length }, null, 2));
} finally {
  await context.close();
  await server.close();
  rmSync(profile, { recursive: true, force: true });
}
