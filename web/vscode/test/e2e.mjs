#!/usr/bin/env node
// The VS Code extension end to end in a real VS Code: code-server on localhost, driven by
// headless Chromium with WebGPU. The built lilypad.vsix is installed, a copy of examples/leap-year
// is the workspace, and a scripted model fixes its bug through the view and the repository
// bridge. Checks: the view mirrors the folder, the fix is shown as a pending change with the
// file on disk untouched, the diff editor opens on it, and after "Accept" the file on disk holds
// the fix and the project's tests pass.
//
// Then the native path: a second window whose pages have no navigator.gpu; the view says so,
// "lilypad: Solve a task" runs `lilypad agent-stdio` with scripted replies, the fix is pending with
// the disk untouched, and accepting it from the view makes the tests pass.
//
// Environment: LILYPAD_BIN (the native binary; the native part is skipped when it is missing,
// unless LILYPAD_REQUIRE_NATIVE=1), CODE_SERVER (the code-server binary; default: on PATH), CHROMIUM (default
// /usr/bin/chromium), PYTHON (a python with pytest; default $LILYPAD_CACHE/py-tests/bin/python).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const here = import.meta.dirname;
const examples = resolve(here, '../../../examples');
const VSIX = resolve(here, '../lilypad.vsix');
const CODE_SERVER = process.env.CODE_SERVER ?? 'code-server';
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const cache = process.env.LILYPAD_CACHE ?? join(homedir(), '.cache/lilypad');
const PYTHON = process.env.PYTHON ?? (existsSync(join(cache, 'py-tests/bin/python')) ? join(cache, 'py-tests/bin/python') : 'python3');
const PORT = Number(process.env.CODE_SERVER_PORT ?? 18000 + Math.floor(Math.random() * 1000));
const step = (what) => console.log(`vscode-e2e: ${what}`);
assert.ok(existsSync(VSIX), `${VSIX} is missing: run scripts/build-vscode.sh`);

const work = mkdtempSync(join(tmpdir(), 'lilypad-vscode-e2e-'));
const userData = join(work, 'user-data');
const extensions = join(work, 'extensions');
const folder = join(work, 'leap-year');
const nativeFolder = join(work, 'leap-year-native');
const LILYPAD_BIN = process.env.LILYPAD_BIN ? resolve(process.env.LILYPAD_BIN) : undefined;
const native = !!LILYPAD_BIN && existsSync(LILYPAD_BIN);
if (!native && process.env.LILYPAD_REQUIRE_NATIVE === '1') throw new Error(`LILYPAD_BIN (${LILYPAD_BIN}) is missing`);
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

step(`code-server on 127.0.0.1:${PORT}`);
const server = spawn(CODE_SERVER, [
  '--bind-addr', `127.0.0.1:${PORT}`, '--auth', 'none', '--disable-telemetry', '--disable-update-check',
  ...common, folder,
], { stdio: ['ignore', 'pipe', 'pipe'] });
const serverLog = [];
server.stdout.on('data', (d) => serverLog.push(d.toString()));
server.stderr.on('data', (d) => serverLog.push(d.toString()));
for (let i = 0; ; i++) {
  try {
    if ((await fetch(`http://127.0.0.1:${PORT}/healthz`)).ok) break;
  } catch {}
  if (i > 120) throw new Error(`code-server did not start:\n${serverLog.join('')}`);
  await new Promise((r) => setTimeout(r, 500));
}

const profile = mkdtempSync(join(tmpdir(), 'lilypad-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: [
    '--enable-unsafe-webgpu', '--no-sandbox', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
});
let page = context.pages()[0] ?? (await context.newPage());
const pageLog = [];
const listen = (p) => {
  p.on('console', (m) => pageLog.push(`[${m.type()}] ${m.text()}`));
  p.on('pageerror', (e) => pageLog.push(`[pageerror] ${e.message}`));
};
listen(page);

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
  await icon.click();
  const view = await viewFrame();
  await view.waitForFunction(() => ['ready'].includes(document.getElementById('agent').dataset.state), null, { timeout: 120_000 });
  return view;
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
  const view = await openView(folder);
  const webgpu = await view.getAttribute('#lilypad-gpu', 'data-webgpu');
  step(`the view is ready (WebGPU: ${webgpu}); files: ${await view.locator('.agent-files button').count()}`);
  assert.ok(await view.locator('.agent-files button[data-path="calendar_utils.py"]').count(), 'the view mirrors the folder');

  step('"lilypad: Manage cached models" lists the view\'s model cache');
  await command('lilypad: Manage cached models');
  await page.waitForSelector('.quick-input-widget input[placeholder*="cached model"]', { timeout: 30_000 });
  await page.keyboard.press('Escape');

  step('Python in the view: the tests fail before the fix');
  await view.click('.agent-run-tests');
  await view.waitForSelector('.agent-test-output:not([hidden])', { timeout: 60_000 });
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

  step('accepting writes the file; the tests pass');
  await acceptFromView(view, folder);

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
  console.error(pageLog.slice(-40).join('\n'));
  await page.screenshot({ path: join(work, 'failure.png') }).catch(() => {});
  console.error(`screenshot: ${join(work, 'failure.png')}`);
  throw e;
} finally {
  await context.close();
  server.kill();
}
