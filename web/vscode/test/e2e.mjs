#!/usr/bin/env node
// The VS Code extension end to end in a real VS Code: code-server on localhost, driven by
// headless Chromium with WebGPU. The built lilypad.vsix is installed and a copy of
// examples/leap-year is the workspace.
//
// 1. A scripted model fixes the bug through the view and the repository bridge: the view mirrors
//    the folder, the fix is a pending change with the file on disk untouched, Discard drops it,
//    the diff editor opens on it, and after "Accept" the disk holds the fix and the tests pass.
// 2. The real terminal (the lilypad.terminal setting, ticked in the Settings editor): each of the
//    agent's commands waits for the user's answer in a dialog; an allowed one runs on the disk
//    (pytest passes), a refused one does not run and the model reads the refusal.
// 3. With a real model (LILYPAD_MODEL, SmolLM2): "lilypad: Choose model" sets its URL (a server
//    on another origin, as Hugging Face would serve it), "lilypad: Chat" downloads it and answers,
//    "lilypad: Solve a task" runs a few agent steps in the view's WebGPU engine and the trajectory
//    appears there. code-server is restarted: the view loads the model from its cache (the server
//    sees no model bytes) and gives the same greedy answer; so does the model as a file on disk.
//    A LoRA adapter (the lilypad.lora setting, a folder on disk): the tiny llama of
//    tests/fixtures/lora as a file, asked without its adapter, with it (the setting reaches the
//    view, the host sends the folder's two files and the adapter goes on the loaded model) and
//    after it is removed again; the adapter changes the greedy answer and removing it restores it.
// 4. The native path: a window whose pages have no navigator.gpu; the view says so, "lilypad:
//    Solve a task" runs `lilypad agent-stdio` with scripted replies, the fix is pending with the
//    disk untouched, and accepting it from the view makes the tests pass.
//
// Environment: LILYPAD_MODEL (the GGUF; part 3 is skipped without it unless
// LILYPAD_REQUIRE_MODEL=1), LILYPAD_E2E_STEPS (agent steps in part 3, default 2; 0 skips the run),
// LILYPAD_BIN (the native binary; part 4 is skipped when it is missing, unless
// LILYPAD_REQUIRE_NATIVE=1), CODE_SERVER (the code-server binary; default: on PATH), CHROMIUM
// (default /usr/bin/chromium), PYTHON (a python with pytest; default $LILYPAD_CACHE/py-tests/bin/python).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { startServer } from '../../scripts/serve.mjs';
import { launchBrowser } from '../../test/browser.mjs';

const here = import.meta.dirname;
const examples = resolve(here, '../../../examples');
const loraFixture = resolve(here, '../../../tests/fixtures/lora/llama-tiny');
const VSIX = resolve(here, '../lilypad.vsix');
const CODE_SERVER = process.env.CODE_SERVER ?? 'code-server';
const cache = process.env.LILYPAD_CACHE ?? join(homedir(), '.cache/lilypad');
const PYTHON = process.env.PYTHON ?? (existsSync(join(cache, 'py-tests/bin/python')) ? join(cache, 'py-tests/bin/python') : 'python3');
const PORT = Number(process.env.CODE_SERVER_PORT ?? 18000 + Math.floor(Math.random() * 1000));
const step = (what) => console.log(`vscode-e2e: ${what}`);
// Screenshots of the main states (the whole window: editor, view and chat) go to $E2E_SCREENSHOTS.
const SHOTS = process.env.E2E_SCREENSHOTS;
if (SHOTS) mkdirSync(SHOTS, { recursive: true });
const shot = async (name) => SHOTS && page.screenshot({ path: join(SHOTS, `vscode-${name}.png`) });
assert.ok(existsSync(VSIX), `${VSIX} is missing: run scripts/build-vscode.sh`);

const work = mkdtempSync(join(tmpdir(), 'lilypad-vscode-e2e-'));
const userData = join(work, 'user-data');
const extensions = join(work, 'extensions');
const folder = join(work, 'leap-year');
const nativeFolder = join(work, 'leap-year-native');
const LILYPAD_BIN = process.env.LILYPAD_BIN ? resolve(process.env.LILYPAD_BIN) : undefined;
const native = !!LILYPAD_BIN && existsSync(LILYPAD_BIN);
if (!native && process.env.LILYPAD_REQUIRE_NATIVE === '1') throw new Error(`LILYPAD_BIN (${LILYPAD_BIN}) is missing`);
const MODEL = process.env.LILYPAD_MODEL ? resolve(process.env.LILYPAD_MODEL) : undefined;
if (!MODEL && process.env.LILYPAD_REQUIRE_MODEL === '1') throw new Error('set LILYPAD_MODEL (LILYPAD_REQUIRE_MODEL=1)');
/** Agent steps and tokens per step for the real model: enough to see steps, cheap on a CPU adapter. */
const STEPS = Number(process.env.LILYPAD_E2E_STEPS ?? 2);
const TOKENS = 16;
const call = (name, args) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
const fixEdit = call('Edit', {
  file_path: '/repo/calendar_utils.py',
  old_string: '    if year % 100 == 0:\n        return True',
  new_string: '    if year % 100 == 0:\n        return year % 400 == 0',
});
const nativeReplies = join(work, 'native-replies.json');
writeFileSync(nativeReplies, JSON.stringify([fixEdit, 'Centuries are leap years only when divisible by 400.']));
mkdirSync(join(userData, 'User'), { recursive: true });
writeFileSync(join(userData, 'User/settings.json'), JSON.stringify({
  'security.workspace.trust.enabled': false,
  'workbench.startupEditor': 'none',
  'lilypad.maxSteps': 10,
  'lilypad.model': `scripted:${nativeReplies}`,
  'lilypad.nativeFallback': 'always',
  'lilypad.temperature': 0,
  ...(native ? { 'lilypad.nativeBinary': LILYPAD_BIN } : {}),
}));
for (const f of [folder, nativeFolder]) {
  cpSync(join(examples, 'leap-year'), f, { recursive: true, filter: (s) => !s.includes('__pycache__') && !s.includes('.pytest_cache') });
}
const original = readFileSync(join(folder, 'calendar_utils.py'), 'utf8');
const pytest = (cwd = folder) => {
  try {
    return { ok: true, out: execFileSync(PYTHON, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider'], { cwd, encoding: 'utf8' }) };
  } catch (e) {
    return { ok: false, out: `${e.stdout}${e.stderr}` };
  }
};
assert.equal(pytest().ok, false, 'the example starts with failing tests');

step('installing the .vsix');
const common = ['--user-data-dir', userData, '--extensions-dir', extensions];
execFileSync(CODE_SERVER, [...common, '--install-extension', VSIX], { stdio: 'inherit' });

const serverLog = [];
/** Starts code-server (again, for the restart check: same user data, same port). */
async function startCodeServer() {
  step(`code-server on 127.0.0.1:${PORT}`);
  const proc = spawn(CODE_SERVER, [
    '--bind-addr', `127.0.0.1:${PORT}`, '--auth', 'none', '--disable-telemetry', '--disable-update-check',
    ...common, folder,
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout.on('data', (d) => serverLog.push(d.toString()));
  proc.stderr.on('data', (d) => serverLog.push(d.toString()));
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok) return proc;
    } catch {}
    if (i > 120) throw new Error(`code-server did not start:\n${serverLog.join('')}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}
let server = await startCodeServer();
// The model, served from another origin with Range and CORS, as Hugging Face serves it. Not on
// 127.0.0.1: a webview's service worker holds requests to localhost ports for a port mapping
// that the engine's worker never answers (30 s each), which a remote host does not meet.
const models = MODEL ? await startServer({ host: '127.0.0.2', models: dirname(MODEL), dist: work }) : undefined;
const modelUrl = MODEL && `${models.url}/models/${basename(MODEL)}`;
const modelBytesSent = () => models.log.filter((e) => e.path === `/models/${basename(MODEL)}` && e.method === 'GET').reduce((n, e) => n + e.bytes, 0);

const browser = await launchBrowser(chromium, { viewport: { width: 1400, height: 900 } });
const { context, pageLog, listen } = browser;
let { page } = browser;

/** The frame holding the lilypad view (webviews sit two iframes deep). */
async function viewFrame(timeout = 120_000) {
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    for (const f of page.frames()) {
      try {
        if (await f.$('#agent.agent-panel')) return f;
      } catch {}
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error('the lilypad view did not appear');
}

async function command(title) {
  await page.keyboard.press('F1');
  await page.waitForSelector('.quick-input-widget input', { state: 'visible' });
  await page.keyboard.type(title);
  await page.waitForSelector(`.quick-input-list .monaco-list-row[aria-label*="${title}"]`, { timeout: 30_000 });
  await page.keyboard.press('Enter');
}

async function openView(dir) {
  await page.goto(`http://127.0.0.1:${PORT}/?folder=${encodeURIComponent(dir)}`);
  await page.waitForSelector('.monaco-workbench', { timeout: 120_000 });
  const icon = page.locator('.activitybar [aria-label^="lilypad"]').first();
  await icon.waitFor({ timeout: 60_000 });
  // A restored window may show the view already; clicking its icon then would hide it.
  if (!(await icon.evaluate((e) => !!e.closest('.checked')))) await icon.click();
  const view = await viewFrame();
  await view.waitForFunction(() => ['ready'].includes(document.getElementById('agent').dataset.state), null, { timeout: 120_000 });
  return view;
}

/**
 * Changes a setting in the Settings editor (`value`: text for a text setting, or `toggle` for a
 * checkbox), waits until `reached` holds in the view, then closes the editor.
 */
async function changeSetting(key, value, view, reached) {
  await command('Preferences: Open User Settings');
  await page.waitForSelector('.settings-editor', { timeout: 30_000 });
  await page.locator('.settings-editor .settings-header .suggest-input-container').click();
  await page.keyboard.press('ControlOrMeta+A');
  await page.keyboard.type(key);
  // The list is filtered after a pause; act once only the one setting is left.
  await page.waitForSelector('.settings-editor .settings-count-widget:has-text("1 Setting Found")', { timeout: 30_000 });
  const item = page.locator(`.setting-item-contents[data-key="${key}"]`);
  if (value === 'toggle') await item.locator('.setting-value-checkbox').click({ timeout: 30_000 });
  else {
    await item.locator('input').fill(value);
    await page.keyboard.press('Tab');
  }
  await view.waitForFunction(reached, value, { timeout: 30_000 });
  // The Settings editor may be a tab or an overlay; Escape closes the overlay, Close Editor the tab.
  for (let i = 0; i < 3 && (await page.locator('.settings-editor').isVisible()); i++) {
    await page.keyboard.press('Escape');
    await new Promise((r) => setTimeout(r, 500));
  }
  if (await page.locator('.settings-editor').isVisible()) await command('View: Close Editor');
  await page.locator('.settings-editor').waitFor({ state: 'hidden', timeout: 30_000 });
}

/** "lilypad: Choose model" with a URL. */
async function chooseModelUrl(url) {
  await command('lilypad: Choose model');
  await page.waitForSelector('.quick-input-widget input[placeholder*="Current model"]', { state: 'visible' });
  await page.keyboard.type('A GGUF URL');
  await page.keyboard.press('Enter');
  await page.waitForSelector('.quick-input-widget:has-text("GGUF model URL")', { state: 'visible' });
  await page.fill('.quick-input-widget input', url);
  await page.keyboard.press('Enter');
}

/** Asks through "lilypad: Chat"; resolves to the reply once it is complete. */
async function ask(view, question) {
  await command('lilypad: Chat');
  await view.waitForSelector('#lilypad-chat[open] .chat-input', { timeout: 30_000 });
  const before = await view.locator('.chat-message.assistant').count();
  const replyStarted = (timeout) => view.waitForFunction((n) => document.querySelectorAll('.chat-message.assistant').length > n,
    before, { timeout }).then(() => true, () => false);
  await view.fill('.chat-input', question);
  await view.click('.chat-send');
  // A click can land while the workbench still settles around the webview (a closing editor):
  // the view never hears it. Say so and send once more; a view that hears and hangs fails below.
  if (!(await replyStarted(30_000))) {
    console.log(`  (the send did not reach the view: ${JSON.stringify(await view.evaluate(() => ({
      state: document.querySelector('#lilypad-chat .chat').dataset.state, input: document.querySelector('.chat-input').value,
      stats: document.querySelector('.chat-stats')?.textContent })))}; sending again)`);
    await view.fill('.chat-input', question);
    await view.click('.chat-send');
  }
  const start = Date.now();
  try {
    await view.waitForFunction((n) => document.querySelectorAll('.chat-message.assistant').length > n
      && ['done', 'error'].includes(document.querySelector('#lilypad-chat .chat').dataset.state), before, { timeout: 300_000 });
  } catch (e) {
    // Say where it stood: no reply bubble, a reply still growing, or a finished one whose state was not set.
    const where = await view.evaluate(() => {
      const replies = [...document.querySelectorAll('.chat-message.assistant')];
      const last = replies.at(-1)?.textContent ?? '';
      return {
        state: document.querySelector('#lilypad-chat .chat').dataset.state, replies: replies.length,
        replyChars: last.length, replyTail: last.slice(-80), stats: document.querySelector('.chat-stats')?.textContent,
        model: document.querySelector('.agent-model-status')?.textContent, lora: document.body.dataset.lora,
      };
    }).catch((err) => String(err));
    throw new Error(`no complete reply after ${((Date.now() - start) / 1000).toFixed(0)} s: ${JSON.stringify(where)}`, { cause: e });
  }
  const reply = await view.locator('.chat-message.assistant').last().textContent();
  assert.equal(await view.getAttribute('#lilypad-chat .chat', 'data-state'), 'done', reply);
  console.log(`  (reply in ${((Date.now() - start) / 1000).toFixed(1)} s: ${await view.textContent('.chat-stats')})`);
  return reply;
}

async function acceptFromView(view, dir) {
  await view.click('li[data-path="calendar_utils.py"] .pending-accept');
  const end = Date.now() + 30_000;
  while (!readFileSync(join(dir, 'calendar_utils.py'), 'utf8').includes('return year % 400 == 0')) {
    if (Date.now() > end) throw new Error('the accepted change did not reach the disk');
    await new Promise((r) => setTimeout(r, 250));
  }
  await view.waitForSelector('#lilypad-pending[hidden]', { state: 'attached', timeout: 30_000 });
  const after = pytest(dir);
  assert.ok(after.ok, after.out);
  console.log(`  ${after.out.trim().split('\n').pop()}`);
}

try {
  step('opening the lilypad view');
  let view = await openView(folder);
  const webgpu = await view.getAttribute('#lilypad-gpu', 'data-webgpu');
  step(`the view is ready (WebGPU: ${webgpu}); files: ${await view.locator('.agent-files button').count()}`);
  assert.ok(await view.locator('.agent-files button[data-path="calendar_utils.py"]').count(), 'the view mirrors the folder');

  step('"lilypad: Manage cached models" lists the view\'s model cache');
  await command('lilypad: Manage cached models');
  await page.waitForSelector('.quick-input-widget input[placeholder*="cached model"]', { timeout: 30_000 });
  await page.keyboard.press('Escape');

  step('Python in the view: the tests fail before the fix');
  await view.click('.agent-run-tests');
  // Python runs in its worker (its files fetched by the view); the panel says when it is done.
  await view.waitForFunction(() => !document.getElementById('agent').dataset.tests, null, { timeout: 120_000 });
  assert.equal(await view.getAttribute('.agent-test-output', 'data-passed'), 'false', await view.textContent('.agent-test-output'));
  assert.match(await view.textContent('.agent-test-output'), /failed/);

  step('a scripted model fixes the bug through the view');
  const replies = [
    call('Read', { file_path: '/repo/calendar_utils.py' }),
    fixEdit,
    call('Bash', { command: 'python -m pytest -q', description: 'Run the tests' }),
    'Centuries are leap years only when divisible by 400.',
  ];
  await view.selectOption('.agent-model', 'scripted');
  await view.fill('.agent-model-input', JSON.stringify(replies));
  await view.fill('.agent-task-text', readFileSync(join(examples, 'leap-year/TASK.md'), 'utf8'));
  await view.click('.agent-run');
  await view.waitForFunction(() => ['done', 'error'].includes(document.getElementById('agent').dataset.state), null, { timeout: 120_000 });
  assert.equal(await view.getAttribute('#agent', 'data-state'), 'done', await view.textContent('.agent-run-status'));
  assert.equal(await view.locator('.agent-step').count(), 4, 'the trajectory is shown in the view');
  const trajectory = await view.evaluate(() => window.lilypadAgent.panel.trajectory);
  assert.deepEqual(trajectory.exit, { reason: 'submitted' });
  const inView = trajectory.steps[2].calls[0].observation;
  assert.match(inView, /passed/, inView);
  assert.doesNotMatch(inView, /failed/, inView);

  step('the fix is pending; nothing changed on disk');
  await view.waitForSelector('#lilypad-pending:not([hidden]) li[data-path="calendar_utils.py"]', { timeout: 30_000 });
  assert.equal(readFileSync(join(folder, 'calendar_utils.py'), 'utf8'), original, 'the file on disk is untouched before accepting');
  assert.equal(pytest().ok, false, 'the tests still fail on disk before accepting');
  await shot('pending');

  step('discarding drops the proposal and puts the view back to the disk');
  await view.click('li[data-path="calendar_utils.py"] .pending-discard');
  await view.waitForSelector('#lilypad-pending[hidden]', { state: 'attached', timeout: 30_000 });
  assert.equal(await view.evaluate(() => window.lilypadAgent.panel.session.changes().length), 0);
  assert.equal(readFileSync(join(folder, 'calendar_utils.py'), 'utf8'), original);
  step('the same run again; the diff editor shows the proposal');
  await view.click('.agent-run');
  await view.waitForFunction(() => ['done', 'error'].includes(document.getElementById('agent').dataset.state), null, { timeout: 120_000 });
  await view.waitForSelector('#lilypad-pending:not([hidden]) li[data-path="calendar_utils.py"]', { timeout: 30_000 });
  assert.equal(readFileSync(join(folder, 'calendar_utils.py'), 'utf8'), original);
  await view.click('li[data-path="calendar_utils.py"] .pending-diff');
  await page.waitForSelector('.tab:has-text("proposed by lilypad")', { timeout: 30_000 });
  await page.waitForSelector('.monaco-diff-editor', { timeout: 30_000 });

  step('reloading the window keeps the proposal pending');
  await page.reload();
  view = await openView(folder);
  await view.waitForSelector('#lilypad-pending:not([hidden]) li[data-path="calendar_utils.py"]', { timeout: 30_000 });
  assert.deepEqual(await view.evaluate(() => window.lilypadAgent.panel.session.changes()), [{ path: 'calendar_utils.py', change: 'modified' }]);
  assert.equal(readFileSync(join(folder, 'calendar_utils.py'), 'utf8'), original);

  step('accepting writes the file; the tests pass');
  await acceptFromView(view, folder);

  step('the real terminal (lilypad.terminal): each command runs only when the user allows it');
  await changeSetting('lilypad.terminal', 'toggle', view, () => document.body.dataset.terminal === 'true');
  await view.selectOption('.agent-model', 'scripted');
  await view.fill('.agent-model-input', JSON.stringify([
    // The Python that has pytest (the terminal's PATH is the login shell's).
    call('Bash', { command: `${PYTHON} -m pytest -q -p no:cacheprovider`, description: 'Run the tests' }),
    call('Bash', { command: 'rm calendar_utils.py', description: 'Remove the module' }),
    'The tests pass.',
  ]));
  await view.fill('.agent-task-text', 'Run the tests in the terminal.');
  await view.click('.agent-run');
  const dialog = async (button) => {
    const box = page.locator('.monaco-dialog-box');
    await box.waitFor({ state: 'visible', timeout: 60_000 });
    const text = await box.textContent();
    await box.locator(`.monaco-button:text-is("${button}")`).click();
    await box.waitFor({ state: 'hidden', timeout: 30_000 });
    return text;
  };
  assert.match(await dialog('Run'), /-m pytest -q/);
  assert.match(await dialog('Cancel'), /rm calendar_utils\.py/);
  await view.waitForFunction(() => ['done', 'error'].includes(document.getElementById('agent').dataset.state), null, { timeout: 120_000 });
  const inTerminal = await view.evaluate(() => window.lilypadAgent.panel.trajectory);
  assert.match(inTerminal.steps[0].calls[0].observation, /11 passed/, 'pytest ran on the disk, where the fix now is');
  assert.equal(inTerminal.steps[1].calls[0].observation, 'The user did not allow this command to run.');
  assert.ok(existsSync(join(folder, 'calendar_utils.py')), 'the refused command did not run');
  await page.waitForSelector('.terminal-tabs-entry:has-text("lilypad"), .single-terminal-tab:has-text("lilypad"), [id*="terminal"] :text("lilypad")', { timeout: 30_000 });
  console.log(`  ${JSON.stringify(inTerminal.steps.map((st) => st.calls[0]?.observation.split('\n').pop()))}`);
  await changeSetting('lilypad.terminal', 'toggle', view, () => document.body.dataset.terminal === 'false');

  if (MODEL && webgpu === 'true') {
    step(`${basename(MODEL)} in the view's engine: "lilypad: Choose model" sets its URL`);
    await view.selectOption('.agent-model', 'engine');
    await chooseModelUrl(modelUrl);
    await view.waitForFunction((url) => document.body.dataset.modelSetting === url && document.querySelector('.agent-model-chooser').dataset.value === url, modelUrl, { timeout: 30_000 });
    const question = 'What is the capital of France?';
    step('"lilypad: Chat" downloads the model and answers');
    const first = await ask(view, question);
    console.log(`  ${JSON.stringify(first)}; ${await view.textContent('.agent-model-status')}; ${await view.textContent('.chat-stats')}`);
    assert.match(first, /Paris/);
    await shot('chat');
    assert.ok(modelBytesSent() > 0, 'the model was downloaded');
    await view.fill('.agent-max-steps', String(STEPS));
    await view.fill('.agent-max-tokens', String(TOKENS));
    await view.uncheck('.agent-thinking');
    if (STEPS > 0) {
      step(`"lilypad: Solve a task": ${STEPS} steps of at most ${TOKENS} tokens`);
      const started = Date.now();
      await command('lilypad: Solve a task');
      await page.waitForSelector('.quick-input-widget:has-text("What should the agent do?")', { state: 'visible' });
      await page.fill('.quick-input-widget input', 'Fix the leap-year bug in calendar_utils.py so that the tests pass.');
      await page.keyboard.press('Enter');
      await view.waitForFunction(() => document.getElementById('agent').dataset.state === 'running', null, { timeout: 60_000 });
      const timer = setInterval(async () => {
        const p = await view.evaluate(() => `${document.querySelector('.agent-model-status').textContent}; ${document.querySelectorAll('.agent-step').length} steps`).catch(() => '');
        console.log(`  ${Math.round((Date.now() - started) / 1000)} s: ${p}`);
      }, 60_000);
      try {
        await view.waitForFunction(() => ['done', 'error'].includes(document.getElementById('agent').dataset.state), null, { timeout: 1_500_000 });
      } finally {
        clearInterval(timer);
      }
      assert.equal(await view.getAttribute('#agent', 'data-state'), 'done', `${await view.textContent('.agent-run-status')} ${await view.textContent('.agent-model-status')}`);
      const t = await view.evaluate(() => window.lilypadAgent.panel.trajectory);
      assert.equal(t.model, basename(MODEL));
      assert.ok(t.steps.length >= 1 && t.steps.length <= STEPS, `${t.steps.length} steps`);
      assert.equal(await view.locator('.agent-step').count(), t.steps.length, 'every step of the trajectory is shown in the view');
      assert.equal(await view.locator('.agent-step-stats').count(), t.steps.length, 'each step shows its speed');
      console.log(`  step 1: ${await view.locator('.agent-step-stats').first().textContent()}`);
      for (const s of t.steps) assert.ok(s.generated_tokens >= 1 && s.generated_tokens <= TOKENS, JSON.stringify(s));
      console.log(`  ${await view.textContent('.agent-run-status')} in ${Math.round((Date.now() - started) / 1000)} s; exit ${JSON.stringify(t.exit)}; ` +
        JSON.stringify(t.steps.map((s) => ({ prompt: s.prompt_tokens, prefilled: s.prefilled_tokens, generated: s.generated_tokens, prefill_ms: Math.round(s.prefill_ms), decode_ms: Math.round(s.decode_ms) }))));
      // Whatever the model proposed stays a proposal.
      assert.equal(readFileSync(join(folder, 'calendar_utils.py'), 'utf8').includes('return year % 400 == 0'), true, 'the accepted fix is still on disk');
      await view.evaluate(() => document.querySelector('.discard-all').click());
    } else {
      step('the agent run with the model is skipped (LILYPAD_E2E_STEPS=0)');
    }

    step('restarting code-server: the view loads the model from its cache');
    await page.close();
    server.kill();
    await new Promise((r) => server.once('exit', r));
    models.log.length = 0;
    server = await startCodeServer();
    page = await context.newPage();
    listen(page);
    const again = await openView(folder);
    await again.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.model), null, { timeout: 300_000 });
    assert.equal(await again.evaluate(() => document.body.dataset.model), 'ready', await again.textContent('.agent-model-status'));
    assert.equal(await again.evaluate(() => document.body.dataset.modelFromCache), 'true');
    assert.equal(modelBytesSent(), 0, `no model bytes after the restart: ${JSON.stringify(models.log)}`);
    console.log(`  ${await again.textContent('.agent-model-status')}; requests for the model: ${JSON.stringify(models.log.map((e) => e.method))}`);
    const fromUrl = await ask(again, question);
    console.log(`  "lilypad: Chat": ${JSON.stringify(fromUrl)}; ${await again.textContent('.chat-stats')}`);
    assert.equal(fromUrl, first, 'the same greedy answer after the restart');

    step('the model as a file on disk (the lilypad.model setting): the same greedy answer');
    await changeSetting('lilypad.model', MODEL, again, (m) => document.body.dataset.modelSetting === m);
    await again.click('.chat-clear');
    const fromFile = await ask(again, question);
    console.log(`  "lilypad: Chat": ${JSON.stringify(fromFile)}; ${await again.textContent('.agent-model-status')}`);
    assert.equal(fromFile, fromUrl);
    assert.equal(modelBytesSent(), 0, 'the file was read from disk, not from the server');
    assert.equal(await again.evaluate(() => document.body.dataset.modelFromCache), 'false');

    step('a LoRA adapter (lilypad.lora): the tiny llama from disk, without, with and without its adapter');
    const tiny = join(loraFixture, 'model/model.gguf');
    const adapterDir = join(loraFixture, 'adapter');
    await changeSetting('lilypad.model', tiny, again, (m) => document.body.dataset.modelSetting === m);
    await again.click('.chat-clear');
    const tinyBase = await ask(again, question);
    const loraSet = async (value) => {
      await changeSetting('lilypad.lora', value, again, (d) => document.body.dataset.loraSetting === d);
      // The view puts the new adapter on the loaded model right away.
      await again.waitForFunction((d) => document.body.dataset.lora === d, value, { timeout: 60_000 });
      await again.click('.chat-clear');
      return ask(again, question);
    };
    const tinyLora = await loraSet(adapterDir);
    console.log(`  without: ${JSON.stringify(tinyBase.slice(0, 60))}…; with: ${JSON.stringify(tinyLora.slice(0, 60))}…; ${await again.textContent('.agent-model-status')}`);
    assert.notEqual(tinyLora, tinyBase, 'the adapter changes the greedy answer');
    assert.equal(await loraSet(''), tinyBase, 'removing the adapter restores the base model');
    // The native part replays scripted replies.
    await changeSetting('lilypad.model', `scripted:${nativeReplies}`, again, (m) => document.body.dataset.modelSetting === m);
  } else {
    step(`real model skipped: ${MODEL ? 'the view has no WebGPU' : 'set LILYPAD_MODEL'}`);
    assert.ok(!(process.env.LILYPAD_REQUIRE_MODEL === '1' && MODEL), 'LILYPAD_REQUIRE_MODEL=1 needs WebGPU in the view');
  }

  if (native) {
    step('native path: a window without WebGPU');
    await page.close();
    await context.addInitScript(() => {
      delete Navigator.prototype.gpu;
      if (typeof WorkerNavigator !== 'undefined') delete WorkerNavigator.prototype.gpu;
    });
    page = await context.newPage();
    listen(page);
    const nview = await openView(nativeFolder);
    assert.equal(await nview.getAttribute('#lilypad-gpu', 'data-webgpu'), 'false', 'the view reports no WebGPU');
    assert.match(await nview.textContent('#lilypad-gpu'), /No WebGPU/);
    step(`"lilypad: Solve a task" runs ${LILYPAD_BIN} agent-stdio`);
    await command('lilypad: Solve a task');
    await page.waitForSelector('.quick-input-widget:has-text("What should the agent do?")', { state: 'visible' });
    await page.fill('.quick-input-widget input', 'Fix the leap-year bug');
    await page.keyboard.press('Enter');
    await nview.waitForSelector('#lilypad-pending:not([hidden]) li[data-path="calendar_utils.py"]', { timeout: 120_000 });
    assert.equal(readFileSync(join(nativeFolder, 'calendar_utils.py'), 'utf8'), original, 'the file on disk is untouched before accepting');
    step('accepting the native proposal; the tests pass');
    await acceptFromView(nview, nativeFolder);
  } else {
    step('native path skipped: set LILYPAD_BIN');
  }
  step('passed');
} catch (e) {
  // The workbench logs a lot of its own; the view's and the workers' lines are what tell.
  console.error(pageLog.filter((l) => !/ChatModelSelection|SettingsEditor2/.test(l)).slice(-40).join('\n'));
  await page.screenshot({ path: join(work, 'failure.png') }).catch(() => {});
  console.error(`screenshot: ${join(work, 'failure.png')}`);
  throw e;
} finally {
  await browser.close();
  server.kill();
  await models?.close();
}
