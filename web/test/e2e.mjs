#!/usr/bin/env node
// End to end in real headless Chromium (WebGPU on SwiftShader without a GPU): the built
// playground, served with Range support, loads SmolLM2-135M; its greedy answer to the Paris
// prompt must equal the native CLI's, token for token; a reload must take the model from the
// OPFS cache (the server's request log shows no model bytes sent); progress must have been
// reported; a 404, a truncated file and a garbage file must each show their error and leave
// the page usable, and Retry must recover from a failed download. LoRA: a tiny llama
// (tests/fixtures/lora/llama-tiny) loaded with its PEFT adapter must give the native CLI's
// greedy text with `--lora`, and after the adapter is removed, the text without it; an adapter
// for another model and a missing one must fail with their codes. What train-native writes:
// SmolLM2 with an adapter it trained must give the native CLI's greedy text with `--lora`
// (which must differ from the base model's), and the model `train-native export` merged the
// adapter into must give the CLI's greedy text for that file. As a user meets the page: the URL
// field shows only for "Another URL…", the default preset answers the README's question with
// the native CLI's greedy chat answer without touching the sampling form, and a long prompt shows
// its progress while it is read and stops within seconds when Stop is pressed (screenshots of
// those states go to $E2E_SCREENSHOTS). A context larger than the machine's memory (where
// SwiftShader's buffers live) is refused before anything is allocated, and the model loads again.
//
// Environment: LILYPAD_MODEL (the GGUF), LILYPAD_BIN (the native `lilypad` binary),
// LILYPAD_TRAINED (a folder holding a train-native run over LILYPAD_MODEL,
// runs/one-update/checkpoint/adapter, and its export, merged.gguf: scripts/test-web.sh makes
// them), CHROMIUM (default /usr/bin/chromium), E2E_RESULTS (a JSON file for the measured figures).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, openSync, readSync, rmSync, statSync, writeFileSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { startServer } from '../scripts/serve.mjs';
import { launchBrowser } from './browser.mjs';

const here = import.meta.dirname;
const MODEL = resolve(process.env.LILYPAD_MODEL ?? join(here, '../../models/SmolLM2-135M-Instruct.Q4_1.gguf'));
const BIN = process.env.LILYPAD_BIN;
const PROMPT = '<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n';
const MAX_TOKENS = 32;
const RENAME_PROMPT = `Rename the variable \`total\` to \`running_sum\` in this Python function and reply with the whole function.

\`\`\`python
def summarize(values):
    total = 0
    count = 0
    for value in values:
        if value is None:
            continue
        total += value
        count += 1
    if count == 0:
        return {"total": 0, "mean": None}
    return {"total": total, "mean": total / count}
\`\`\`
`;
const LORA = resolve(here, '../../tests/fixtures/lora');
const LORA_MODEL = join(LORA, 'llama-tiny/model/model.gguf');
const LORA_PROMPT = 'The quick brown fox';
const LORA_TOKENS = 24;
const LONG = 15 * 60_000;
const TRAINED = process.env.LILYPAD_TRAINED;
const TRAINED_ADAPTER = 'runs/one-update/checkpoint/adapter';
const TRAINED_PROMPT = '<|im_start|>user\nWhat is 18 + 28? Reply with the number only.<|im_end|>\n<|im_start|>assistant\n';
const TRAINED_TOKENS = 12;

assert.ok(BIN, 'set LILYPAD_BIN to the native lilypad binary');
assert.ok(TRAINED, 'set LILYPAD_TRAINED to a folder with a train-native adapter and export (scripts/test-web.sh)');
const results = { model: basename(MODEL), model_bytes: statSync(MODEL).size };
const SHOTS = process.env.E2E_SCREENSHOTS;
if (SHOTS) mkdirSync(SHOTS, { recursive: true });
const step = (what) => console.log(`e2e: ${what}`);

// --- The native answer, computed now (never a recorded string).
step('native greedy answer (lavapipe)');
const native = execFileSync(BIN, ['generate', '-m', MODEL, '-p', PROMPT, '--max-tokens', String(MAX_TOKENS), '--temperature', '0'], {
  encoding: 'utf8',
  stdio: ['ignore', 'pipe', 'pipe'],
});
const nativeText = native.replace(/\n$/, '');
const nativeIds = JSON.parse(
  execFileSync(BIN, ['tokenize', '-m', MODEL, '-t', nativeText, '--json', '--no-bos', '--no-parse-special'], { encoding: 'utf8' }),
).ids;
console.log(`  native: ${JSON.stringify(nativeText)} = ${JSON.stringify(nativeIds)}`);
results.native_text = nativeText;

step("native seeded sample with the agent's settings (top-k 20, top-p 0.95), and the same prompt's greedy text");
const SAMPLED_PROMPT = '<|im_start|>user\nWrite a short poem about a frog.<|im_end|>\n<|im_start|>assistant\n';
const SAMPLED = { temperature: 0.7, top_k: 20, top_p: 0.95, seed: 7, max_tokens: 16 };
const nativeGenerate = (...args) =>
  execFileSync(BIN, ['generate', '-m', MODEL, '-p', SAMPLED_PROMPT, '--max-tokens', String(SAMPLED.max_tokens), '-q', ...args], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  }).replace(/\n$/, '');
const nativeSampled = nativeGenerate('--temperature', String(SAMPLED.temperature), '--top-k', String(SAMPLED.top_k),
  '--top-p', String(SAMPLED.top_p), '--seed', String(SAMPLED.seed));
console.log(`  native: ${JSON.stringify(nativeSampled)}`);
assert.notEqual(nativeSampled, nativeGenerate('--temperature', '0'), 'the seeded sample must differ from the greedy text for this check to mean anything');
results.native_sampled = nativeSampled;

step("native greedy chat answer to the README's question");
const QUESTION = 'What is the capital of France?';
const nativeChat = execFileSync(BIN, ['chat', '-m', MODEL, '--temperature', '0', '--max-tokens', '256', '-q'], {
  encoding: 'utf8',
  input: `${QUESTION}\n`,
  stdio: ['pipe', 'pipe', 'pipe'],
}).trim();
console.log(`  native chat: ${JSON.stringify(nativeChat)}`);
results.native_chat = nativeChat;

step('native greedy text of the tiny llama, with and without its LoRA adapter');
const tinyGenerate = (...extra) =>
  execFileSync(BIN, ['generate', '-m', LORA_MODEL, '-p', LORA_PROMPT, '--max-tokens', String(LORA_TOKENS), '--temperature', '0', '-q', ...extra], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  }).replace(/\n$/, '');
const tinyBase = tinyGenerate();
const tinyLora = tinyGenerate('--lora', join(LORA, 'llama-tiny/adapter'));
console.log(`  base: ${JSON.stringify(tinyBase)}\n  lora: ${JSON.stringify(tinyLora)}`);
assert.notEqual(tinyLora, tinyBase, 'the adapter must change the greedy text for this check to mean anything');
results.lora = { native_base: tinyBase, native_lora: tinyLora };

step("native greedy text of SmolLM2 with train-native's adapter, and of the merged model");
const smolGenerate = (model, ...extra) =>
  execFileSync(BIN, ['generate', '-m', model, '-p', TRAINED_PROMPT, '--max-tokens', String(TRAINED_TOKENS), '--temperature', '0', '-q', ...extra], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  }).replace(/\n$/, '');
const trained = {
  native_base: smolGenerate(MODEL),
  native_lora: smolGenerate(MODEL, '--lora', join(TRAINED, TRAINED_ADAPTER)),
  native_merged: smolGenerate(join(TRAINED, 'merged.gguf')),
};
console.log(`  base: ${JSON.stringify(trained.native_base)}\n  lora: ${JSON.stringify(trained.native_lora)}\n  merged: ${JSON.stringify(trained.native_merged)}`);
assert.notEqual(trained.native_lora, trained.native_base, 'the trained adapter must change the greedy text for this check to mean anything');
results.trained = trained;

// --- Broken models and a flaky server.
const broken = mkdtempSync(join(tmpdir(), 'lilypad-e2e-'));
const head = Buffer.alloc(3 << 20);
const fd = openSync(MODEL, 'r');
readSync(fd, head, 0, head.length, 0);
closeSync(fd);
writeFileSync(join(broken, 'truncated.gguf'), head);
writeFileSync(join(broken, 'garbage.gguf'), Buffer.from('<!doctype html><title>Not a model</title>'.repeat(30000)));
let flakyFailures = 1;

const server = await startServer({
  models: dirname(MODEL),
  dist: join(here, '../dist'),
  extra: { '/broken/': broken, '/lora/': LORA, '/trained/': TRAINED },
  intercept(req, res, url) {
    // Fails once, then serves the real model: what Retry is for.
    if (url.pathname === '/flaky/model.gguf' && flakyFailures-- > 0) {
      res.writeHead(503, 'Service Unavailable').end();
      return true;
    }
    if (url.pathname === '/flaky/model.gguf') req.url = `/models/${basename(MODEL)}`;
    return false;
  },
});
const modelPath = `/models/${basename(MODEL)}`;
const modelRequests = () => server.log.filter((e) => e.path === modelPath);

const browser = await launchBrowser(chromium);
const { page, pageLog } = browser;

const state = () => page.evaluate(() => document.body.dataset.state);
const shot = async (name) => SHOTS && page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
const errorShown = () =>
  page.evaluate(() => ({
    hidden: document.getElementById('error').hidden,
    code: document.getElementById('error').dataset.code,
    text: document.getElementById('error').textContent.trim(),
  }));

async function loadModel(choose) {
  await choose();
  const started = Date.now();
  await page.click('#load');
  await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state), null, { timeout: LONG });
  return { state: await state(), ms: Date.now() - started };
}

const preset = (id) => () => page.selectOption('.model-preset', id);
const url = (u) => async () => {
  await page.selectOption('.model-preset', 'custom');
  await page.fill('.model-url', u);
};

async function generate(prompt, { raw, maxTokens, sampling }) {
  await page.selectOption('.chat-mode', raw ? 'raw' : 'chat');
  await page.fill('#temperature', String(sampling?.temperature ?? 0));
  if (sampling) {
    await page.fill('#top-p', String(sampling.top_p));
    await page.fill('#top-k', String(sampling.top_k));
    await page.fill('#seed', String(sampling.seed));
  }
  await page.fill('#max-tokens', String(maxTokens));
  await page.fill('.chat-input', prompt);
  const before = await page.locator('.chat-message.assistant').count();
  await page.click('.chat-send');
  const reply = page.locator('.chat-message.assistant').nth(before);
  await page.waitForFunction((n) => document.querySelectorAll('.chat-message.assistant')[n]?.dataset.done === 'true', before, { timeout: LONG });
  const stats = await page.evaluate(() => ({ ...document.querySelector('.chat-stats').dataset }));
  return {
    text: await reply.textContent(),
    tokens: JSON.parse((await reply.getAttribute('data-tokens')) ?? 'null'),
    finish: await reply.getAttribute('data-finish'),
    stats,
  };
}

try {
  await page.goto(`${server.url}/`);
  await page.waitForFunction(() => document.getElementById('gpu-status').dataset.ok !== undefined, null, { timeout: 60_000 });
  const gpu = await page.textContent('#gpu-status');
  console.log(`  ${gpu}`);
  assert.equal(await page.getAttribute('#gpu-status', 'data-ok'), 'true', gpu);
  assert.equal(await page.getAttribute('#gpu-status', 'data-cpu'), 'true', 'SwiftShader is named a CPU fallback');

  step('the URL field shows only for "Another URL…"');
  assert.equal(await page.isVisible('.model-url-row'), false);
  await page.selectOption('.model-preset', 'custom');
  assert.equal(await page.isVisible('.model-url-row'), true);
  await page.selectOption('.model-preset', 'smollm2-135m');
  assert.equal(await page.isVisible('.model-url-row'), false);
  assert.equal(await page.inputValue('#temperature'), '0', 'the 135M preset samples greedily');
  await shot('idle');

  step('LoRA: the tiny llama with its adapter from a folder URL');
  const tinyPath = '/lora/llama-tiny/model/model.gguf';
  const withLora = (lora) => async () => {
    await url(`${server.url}${tinyPath}`)();
    await page.evaluate(() => (document.getElementById('lora-panel').open = true));
    await page.fill('#lora-url', lora);
  };
  const loraShown = async () => JSON.parse(await page.getAttribute('#info', 'data-lora'));
  const tinyGreedy = () => generate(LORA_PROMPT, { raw: true, maxTokens: LORA_TOKENS });
  async function setLora(button, lora = '') {
    await page.fill('#lora-url', lora);
    const started = Date.now();
    await page.click(button);
    await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: LONG });
    return Date.now() - started;
  }
  const tinyLoad = await loadModel(withLora(`${server.url}/lora/llama-tiny/adapter/`));
  assert.equal(tinyLoad.state, 'ready', JSON.stringify(await errorShown()));
  assert.deepEqual(await loraShown(), { rank: 4, alpha: 8, scale: 2, linears: 21, base_model: 'llama-tiny' });
  const adapted = await tinyGreedy();
  console.log(`  with the adapter (loaded in ${tinyLoad.ms} ms): ${JSON.stringify(adapted.text)} = ${JSON.stringify(adapted.tokens)}`);
  assert.equal(adapted.text, tinyLora);
  results.lora.load_ms = tinyLoad.ms;
  results.lora.browser_lora = adapted.text;
  results.lora.browser_lora_tokens = adapted.tokens;

  step('LoRA: engine.setLora(null) removes it');
  const removeMs = await setLora('#lora-remove');
  assert.equal((await errorShown()).hidden, true, JSON.stringify(await errorShown()));
  assert.equal(await loraShown(), null);
  const plain = await tinyGreedy();
  console.log(`  without (removed in ${removeMs} ms): ${JSON.stringify(plain.text)}`);
  assert.equal(plain.text, tinyBase);
  results.lora.browser_base = plain.text;
  results.lora.remove_ms = removeMs;

  step('LoRA: engine.setLora(folder) puts it back');
  const applyMs = await setLora('#lora-apply', `${server.url}/lora/llama-tiny/adapter`);
  assert.equal((await errorShown()).hidden, true, JSON.stringify(await errorShown()));
  assert.equal((await loraShown())?.linears, 21);
  const reapplied = await tinyGreedy();
  console.log(`  with it again (applied in ${applyMs} ms): ${JSON.stringify(reapplied.text)}`);
  assert.equal(reapplied.text, tinyLora);
  results.lora.apply_ms = applyMs;

  step("LoRA: another model's adapter is refused and changes nothing");
  await setLora('#lora-apply', `${server.url}/lora/qwen3-tiny/adapter/`);
  const refused = await errorShown();
  console.log(`  ${refused.code}: ${refused.text}`);
  assert.equal(refused.hidden, false);
  assert.equal(refused.code, 'bad-request', refused.text);
  assert.match(refused.text, /LoRA adapter/);
  assert.equal((await loraShown())?.base_model, 'llama-tiny');
  assert.equal((await tinyGreedy()).text, tinyLora);

  step('LoRA: a missing adapter fails before the model is downloaded');
  server.log.length = 0;
  const missing = await loadModel(withLora(`${server.url}/lora/nowhere/`));
  assert.equal(missing.state, 'error');
  assert.equal((await errorShown()).code, 'not-found', JSON.stringify(await errorShown()));
  assert.deepEqual(server.log.filter((e) => e.path === tinyPath), [], 'no model request');
  await page.fill('#lora-url', '');

  step('cold load: download with Range requests, upload to the GPU');
  const cold = await loadModel(preset('smollm2-135m'));
  assert.equal(cold.state, 'ready', JSON.stringify(await errorShown()));
  const phases = await page.evaluate(() => document.body.dataset.phases);
  const events = Number(await page.evaluate(() => document.body.dataset.progressEvents));
  assert.match(phases, /download/);
  assert.match(phases, /upload/);
  assert.match(phases, /ready/);
  assert.ok(events > 10, `only ${events} progress events`);
  const coldLog = modelRequests();
  const gets = coldLog.filter((e) => e.method === 'GET');
  assert.ok(gets.length > 0 && gets.every((e) => e.status === 206 && e.range), JSON.stringify(coldLog));
  assert.equal(gets.reduce((n, e) => n + e.bytes, 0), results.model_bytes);
  results.adapter = await page.getAttribute('#info', 'data-adapter');
  results.cold_load_ms = cold.ms;
  results.cold_range_requests = gets.length;
  console.log(`  ready in ${cold.ms} ms; ${events} progress events; ${gets.length} range requests`);

  step('greedy answer in the browser');
  const answer = await generate(PROMPT, { raw: true, maxTokens: MAX_TOKENS });
  console.log(`  browser: ${JSON.stringify(answer.text)} = ${JSON.stringify(answer.tokens)}`);
  assert.equal(answer.text, nativeText);
  assert.deepEqual(answer.tokens, nativeIds);
  results.browser = answer.stats;
  results.cold_first_token_ms = cold.ms + Number(answer.stats.firstTokenMs);

  step("seeded sampling in the browser: the agent's settings draw native's tokens");
  const sampled = await generate(SAMPLED_PROMPT, { raw: true, maxTokens: SAMPLED.max_tokens, sampling: SAMPLED });
  console.log(`  browser: ${JSON.stringify(sampled.text)}`);
  assert.equal(sampled.text, nativeSampled);

  step('reload: the model comes from the OPFS cache');
  server.log.length = 0;
  await page.reload();
  await page.waitForFunction(() => document.getElementById('gpu-status').dataset.ok !== undefined);
  const warm = await loadModel(preset('smollm2-135m'));
  assert.equal(warm.state, 'ready', JSON.stringify(await errorShown()));
  assert.match(await page.evaluate(() => document.body.dataset.phases), /cache/);
  const warmLog = modelRequests();
  assert.deepEqual(warmLog.map((e) => e.method), ['HEAD'], JSON.stringify(warmLog));
  assert.equal(warmLog.reduce((n, e) => n + e.bytes, 0), 0);
  await shot('ready');

  step("the default preset answers the README's question as the native CLI does");
  assert.equal(await page.inputValue('#temperature'), '0');
  await page.selectOption('.chat-mode', 'chat');
  await page.fill('.chat-input', QUESTION);
  const asked = await page.locator('.chat-message.assistant').count();
  await page.press('.chat-input', 'Enter');
  await page.waitForFunction((n) => document.querySelectorAll('.chat-message.assistant')[n]?.dataset.done === 'true', asked, { timeout: LONG });
  const chatAnswer = (await page.locator('.chat-message.assistant').nth(asked).textContent()).trim();
  console.log(`  browser chat: ${JSON.stringify(chatAnswer)}`);
  assert.equal(chatAnswer, nativeChat);
  results.browser_chat = chatAnswer;
  await shot('answered');
  await page.emulateMedia({ colorScheme: 'dark' });
  await shot('answered-dark');
  await page.emulateMedia({ colorScheme: 'light' });

  step('a long prompt: progress while it is read, Stop (Escape) within seconds');
  await page.click('.chat-clear');
  await page.selectOption('.chat-mode', 'raw');
  await page.fill('#max-tokens', '8');
  await page.fill('.chat-input', 'The quick brown fox jumps over the lazy dog. '.repeat(60));
  const longReply = await page.locator('.chat-message.assistant').count();
  const sentAt = Date.now();
  await page.click('.chat-send');
  await page.waitForFunction((n) => Number(document.querySelectorAll('.chat-message.assistant')[n]?.dataset.promptReports ?? 0) >= 2, longReply, { timeout: LONG });
  const readingMs = Date.now() - sentAt;
  const reading = await page.evaluate((n) => ({
    stats: document.querySelector('.chat-stats').textContent,
    progress: document.querySelectorAll('.chat-message.assistant')[n].dataset.reading,
  }), longReply);
  console.log(`  after ${readingMs} ms: ${reading.stats} (${reading.progress})`);
  assert.match(reading.stats, /^Reading the prompt: [\d,]+ \/ [\d,]+ tokens/);
  const [readDone, readTotal] = reading.progress.split('/').map(Number);
  assert.ok(readDone > 0 && readDone < readTotal, reading.progress);
  await shot('reading-prompt');
  const stopAt = Date.now();
  await page.keyboard.press('Escape');
  await page.waitForFunction((n) => document.querySelectorAll('.chat-message.assistant')[n]?.dataset.done === 'true', longReply, { timeout: LONG });
  const stopMs = Date.now() - stopAt;
  const stopped = await page.evaluate((n) => {
    const r = document.querySelectorAll('.chat-message.assistant')[n];
    return { finish: r.dataset.finish, stopped: r.classList.contains('stopped'), text: r.textContent, state: document.body.dataset.state, stats: document.querySelector('.chat-stats').textContent };
  }, longReply);
  console.log(`  stopped in ${stopMs} ms: ${stopped.stats}`);
  assert.equal(stopped.finish, 'abort');
  assert.ok(stopped.stopped, 'the reply is marked as stopped');
  assert.equal(stopped.text, '', 'no token before the prompt was read');
  assert.equal(stopped.state, 'ready');
  assert.ok(stopMs < 15_000, `Stop took ${stopMs} ms`);
  results.prompt_stop = { reports_after_ms: readingMs, progress: reading.progress, stop_ms: stopMs };
  await shot('stopped');

  const again = await generate(PROMPT, { raw: true, maxTokens: MAX_TOKENS });
  assert.deepEqual(again.tokens, nativeIds);
  results.cached_load_ms = warm.ms;
  results.cached_first_token_ms = warm.ms + Number(again.stats.firstTokenMs);
  results.browser_cached = again.stats;
  const cachedList = await page.locator('#cached li[data-url]').count();
  assert.ok(cachedList >= 1, 'the cached model is listed');

  step('weights split across buffers, as under a 128 MiB binding limit');
  // 8 MiB buffers split the 30 MB Q8_0 embedding / output head (49152 rows) into four.
  await page.goto(`${server.url}/?maxChunkBytes=${8 << 20}`);
  await page.waitForFunction(() => document.getElementById('gpu-status').dataset.ok !== undefined);
  const split = await loadModel(preset('smollm2-135m'));
  assert.equal(split.state, 'ready', JSON.stringify(await errorShown()));
  const splitAnswer = await generate(PROMPT, { raw: true, maxTokens: MAX_TOKENS });
  assert.deepEqual(splitAnswer.tokens, nativeIds);

  step("train-native's adapter on SmolLM2, from a folder URL");
  await page.goto(`${server.url}/`);
  await page.waitForFunction(() => document.getElementById('gpu-status').dataset.ok !== undefined);
  const trainedLoad = await loadModel(async () => {
    await url(`${server.url}${modelPath}`)();
    await page.evaluate(() => (document.getElementById('lora-panel').open = true));
    await page.fill('#lora-url', `${server.url}/trained/${TRAINED_ADAPTER}/`);
  });
  assert.equal(trainedLoad.state, 'ready', JSON.stringify(await errorShown()));
  const trainedInfo = await loraShown();
  console.log(`  ${JSON.stringify(trainedInfo)}, loaded in ${trainedLoad.ms} ms`);
  assert.equal(trainedInfo.rank, 4);
  assert.equal(trainedInfo.linears, 210);
  const smolGreedy = () => generate(TRAINED_PROMPT, { raw: true, maxTokens: TRAINED_TOKENS });
  const trainedText = (await smolGreedy()).text;
  console.log(`  with the adapter: ${JSON.stringify(trainedText)}`);
  assert.equal(trainedText, trained.native_lora);
  results.trained.browser_lora = trainedText;

  step("the model train-native export merged the adapter into");
  await page.fill('#lora-url', '');
  const mergedLoad = await loadModel(url(`${server.url}/trained/merged.gguf`));
  assert.equal(mergedLoad.state, 'ready', JSON.stringify(await errorShown()));
  assert.equal(await loraShown(), null);
  const mergedText = (await smolGreedy()).text;
  console.log(`  merged (loaded in ${mergedLoad.ms} ms): ${JSON.stringify(mergedText)}`);
  assert.equal(mergedText, trained.native_merged);
  results.trained.browser_merged = mergedText;

  step('errors: 404, truncated file, garbage file');
  for (const [path, code] of [
    ['/models/missing.gguf', 'not-found'],
    ['/broken/truncated.gguf', 'corrupt-model'],
    ['/broken/garbage.gguf', 'corrupt-model'],
  ]) {
    const r = await loadModel(url(`${server.url}${path}`));
    const shown = await errorShown();
    assert.equal(r.state, 'error', path);
    assert.equal(shown.hidden, false);
    assert.equal(shown.code, code, `${path}: ${shown.text}`);
    console.log(`  ${path}: ${shown.text}`);
  }

  step('Retry after a failed download');
  const flaky = await loadModel(url(`${server.url}/flaky/model.gguf`));
  assert.equal(flaky.state, 'error');
  assert.equal((await errorShown()).code, 'http');
  await page.click('#retry');
  await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state), null, { timeout: LONG });
  assert.equal(await state(), 'ready', JSON.stringify(await errorShown()));
  assert.equal((await errorShown()).hidden, true);
  const chat = await generate('Hello!', { raw: false, maxTokens: 4 });
  assert.ok(chat.text.length > 0, 'the chat answers after a retry');
  step("a conversation's opening is kept in OPFS: after a reload only the rest of the prompt is read");
  // A system message no earlier run has used, so the first request computes its opening.
  const opening = { role: 'system', content: `You are a concise assistant for a geography quiz. Answer in one short sentence, without any preamble, and never ask a question back. Session ${Date.now()}.` };
  const ask = () => page.evaluate(async (messages) => {
    const r = await globalThis.lilypadEngine().chat.completions.create({ messages, temperature: 0, max_tokens: 8 });
    return { text: r.choices[0].message.content, usage: r.usage };
  }, [opening, { role: 'user', content: QUESTION }]);
  const openDebugPage = async () => {
    await page.goto(`${server.url}/?debug`);
    await page.waitForFunction(() => document.getElementById('gpu-status').dataset.ok !== undefined);
    assert.equal((await loadModel(preset('smollm2-135m'))).state, 'ready', JSON.stringify(await errorShown()));
  };
  await openDebugPage();
  const computed = await ask();
  assert.equal(computed.usage.prefilled_tokens, computed.usage.prompt_tokens, JSON.stringify(computed.usage));
  const stored = await page.evaluate(async () => {
    const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('lilypad-prompt-states');
    // The state is written in the background: wait until it has its name.
    for (let i = 0; i < 100; i++) {
      const names = [];
      for await (const [name] of dir) names.push(name);
      if (names.some((n) => n.endsWith('.lpstate'))) return names;
      await new Promise((r) => setTimeout(r, 100));
    }
    return [];
  });
  assert.ok(stored.some((n) => n.endsWith('.lpstate')), JSON.stringify(stored));
  await openDebugPage();
  const restored = await ask();
  console.log(`  first: ${computed.usage.prefilled_tokens} of ${computed.usage.prompt_tokens} tokens read; after a reload: ${restored.usage.prefilled_tokens} of ${restored.usage.prompt_tokens} (${stored.length} file(s) in OPFS)`);
  assert.equal(restored.usage.prompt_tokens, computed.usage.prompt_tokens);
  assert.ok(restored.usage.prefilled_tokens < restored.usage.prompt_tokens / 2, JSON.stringify(restored.usage));
  assert.equal(restored.text, computed.text, 'the same greedy answer from the stored opening');
  results.prompt_state = { prompt_tokens: computed.usage.prompt_tokens, read_after_reload: restored.usage.prefilled_tokens };
  // The page says what the kept openings take, and deletes them.
  await page.waitForFunction(() => Number(document.getElementById('prompt-states').dataset.count) >= 1);
  console.log(`  ${await page.textContent('#prompt-states')}`);
  await page.click('#delete-prompt-states');
  await page.waitForFunction(() => document.getElementById('prompt-states').dataset.count === '0');
  assert.equal(await page.isVisible('#delete-prompt-states'), false);

  step("a context larger than the machine's memory is refused before anything is allocated, then the model loads again");
  // SwiftShader's buffers live in the machine's memory: past it, the browser's GPU process was
  // killed and the device lost after half a minute. The context asks for twice what the
  // browser says the machine has: SmolLM2's f16 KV cache takes 30 layers × K and V × 192 × 2
  // bytes per position, and each layer's K or V must still fit a 1 GiB binding (2.7M
  // positions); a machine past 30 GiB is refused by that binding instead.
  const refusal = await page.evaluate(async ({ modelUrl, prompt }) => {
    const engine = globalThis.lilypadEngine();
    const perPosition = 30 * 2 * 192 * 2;
    const wanted = Math.ceil((2 * navigator.deviceMemory * 2 ** 30) / perPosition);
    const out = { deviceMemory: navigator.deviceMemory, context: Math.min(wanted, 2_700_000), byMemory: wanted <= 2_700_000 };
    const started = Date.now();
    try {
      await engine.load({ kind: 'url', url: modelUrl }, { context: out.context });
      out.loaded = true;
    } catch (e) {
      Object.assign(out, { code: e.code, message: e.message, ms: Date.now() - started });
    }
    await engine.load({ kind: 'url', url: modelUrl }, {});
    const c = await engine.completions.create({ prompt, max_tokens: 8, temperature: 0 });
    out.text = c.choices[0].text;
    return out;
  }, { modelUrl: `${server.url}${modelPath}`, prompt: PROMPT });
  console.log(`  context ${refusal.context} refused in ${refusal.ms} ms (navigator.deviceMemory ${refusal.deviceMemory} GiB): ${refusal.message}`);
  assert.equal(refusal.code, 'too-large', JSON.stringify(refusal));
  assert.ok(refusal.message.includes(`at context ${refusal.context}`), refusal.message);
  if (refusal.byMemory) assert.match(refusal.message, / allows [\d.]+ GiB \(the machine's memory\)/, refusal.message);
  assert.ok(!refusal.message.includes('the adapter  '), `the adapter is named: ${refusal.message}`);
  assert.ok(refusal.ms < 10_000, `refused before any upload: ${refusal.ms} ms`);
  assert.ok(nativeText.startsWith(refusal.text) && refusal.text.length > 0, `${JSON.stringify(refusal.text)} begins ${JSON.stringify(nativeText)}`);
  results.too_large = { ms: refusal.ms, message: refusal.message };

  step('speculative decoding: prompt-lookup drafts give the same text, in fewer steps');
  // An edit of code in the prompt, which the answer copies: what lookup drafts are for.
  const spec = await page.evaluate(async ({ modelUrl, prompt }) => {
    const engine = globalThis.lilypadEngine();
    const run = async (draft) => {
      await engine.load({ kind: 'url', url: modelUrl }, draft ? { draft } : {});
      const info = await engine.info();
      const c = await engine.chat.completions.create({
        messages: [{ role: 'user', content: prompt }],
        max_tokens: 100,
        temperature: 0,
      });
      return {
        draft: info.model.draft ?? null,
        text: c.choices[0].message.content,
        tokens: c.usage.completion_tokens,
        tokensPerS: c.timings.decode_tokens_per_s,
        draftAccepted: c.timings.draft_accepted,
      };
    };
    return { plain: await run(undefined), lookup: await run('lookup:4') };
  }, { modelUrl: `${server.url}${modelPath}`, prompt: RENAME_PROMPT });
  console.log(`  plain ${spec.plain.tokensPerS.toFixed(1)} tok/s, lookup:4 ${spec.lookup.tokensPerS.toFixed(1)} tok/s (${(spec.lookup.tokensPerS / spec.plain.tokensPerS).toFixed(2)}x), ${spec.lookup.tokens} tokens of which ${spec.lookup.draftAccepted} drafted`);
  assert.equal(spec.plain.draftAccepted, 0);
  assert.ok(spec.lookup.draftAccepted > 0, JSON.stringify(spec.lookup));
  assert.equal(spec.plain.draft, null);
  assert.equal(spec.lookup.draft, 'lookup:4');
  assert.equal(spec.lookup.text, spec.plain.text, 'the drafts change the speed, not the text');
  assert.ok(spec.plain.tokens > 20, JSON.stringify(spec.plain));
  results.speculative = {
    plain_tokens_per_s: spec.plain.tokensPerS,
    lookup_tokens_per_s: spec.lookup.tokensPerS,
    tokens: spec.lookup.tokens,
    draft_accepted: spec.lookup.draftAccepted,
  };
  // The playground's own control: the draft chosen before Load, shown in the model's info and
  // counted in the reply's stats.
  await page.goto(`${server.url}/?debug`);
  await page.waitForFunction(() => document.getElementById('gpu-status').dataset.ok !== undefined);
  await page.selectOption('#draft', 'lookup');
  assert.equal((await loadModel(preset('smollm2-135m'))).state, 'ready', JSON.stringify(await errorShown()));
  assert.ok((await page.textContent('#info')).includes('Speculative decodinglookup:4'), await page.textContent('#info'));
  const drafted = await generate(RENAME_PROMPT, { raw: false, maxTokens: 60 });
  assert.ok(Number(drafted.stats.draftAccepted) > 0, JSON.stringify(drafted.stats));
  assert.ok(spec.plain.text.startsWith(drafted.text.trim().slice(0, 40)), `${JSON.stringify(drafted.text)} vs ${JSON.stringify(spec.plain.text)}`);
  console.log(`  the playground with "prompt lookup": ${drafted.stats.draftAccepted} drafted tokens kept in a reply of at most 60`);

  step('a GPU device lost mid-generation, then the model loaded again');
  await page.goto(`${server.url}/?debug`);
  await page.waitForFunction(() => document.getElementById('gpu-status').dataset.ok !== undefined);
  assert.equal((await loadModel(preset('smollm2-135m'))).state, 'ready', JSON.stringify(await errorShown()));
  await page.selectOption('.chat-mode', 'raw');
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', '64');
  await page.fill('.chat-input', PROMPT);
  const replies = await page.locator('.chat-message.assistant').count();
  await page.click('.chat-send');
  // Lost once the first words are on screen, as a driver reset would strike.
  await page.waitForFunction((n) => (document.querySelectorAll('.chat-message.assistant')[n]?.textContent ?? '').length > 0, replies, { timeout: LONG });
  await page.evaluate(() => globalThis.lilypadEngine().destroyDevice());
  await page.waitForFunction((n) => document.querySelectorAll('.chat-message.assistant')[n]?.dataset.done === 'true', replies, { timeout: LONG });
  const lostShown = await errorShown();
  console.log(`  ${lostShown.code}: ${lostShown.text}`);
  assert.equal(lostShown.code, 'device-lost', lostShown.text);
  assert.equal(await state(), 'error');
  await page.click('#retry');
  await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state), null, { timeout: LONG });
  assert.equal(await state(), 'ready', JSON.stringify(await errorShown()));
  const recovered = await generate(PROMPT, { raw: true, maxTokens: MAX_TOKENS });
  assert.deepEqual(recovered.tokens, nativeIds, 'the same greedy answer on the new device');

  assert.equal(pageLog.filter((l) => l.startsWith('[pageerror]')).length, 0, pageLog.join('\n'));
  console.log('e2e: all checks passed');
} catch (e) {
  console.error(`e2e: FAILED\n${pageLog.slice(-40).join('\n')}`);
  throw e;
} finally {
  if (process.env.E2E_RESULTS) writeFileSync(process.env.E2E_RESULTS, `${JSON.stringify(results, null, 2)}\n`);
  await browser.close();
  await server.close();
  rmSync(broken, { recursive: true, force: true });
}
