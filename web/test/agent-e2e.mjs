#!/usr/bin/env node
// The coding agent end to end in real headless Chromium, on the built agent page:
//  1. Python in the browser: a folder import of examples/roman, pytest in Pyodide fails, an Edit
//     made through the agent's tools fixes the bug, pytest passes in the same interpreter (the
//     project's modules are purged between runs); Python's own file writes come back into the
//     project; git status/diff and undo in the shell.
//  2. A scripted model fixes examples/leap-year (imported as a zip) through the panel: the tests
//     fail, it edits, the tests pass, and the downloaded patch applies to the original files.
//  3a. SmolLM2-135M in the browser engine (WebGPU): the first step's prompt (about 1,900 tokens,
//     minutes on SwiftShader) shows its progress in the step, and Stop ends the run within
//     seconds with an aborted trajectory.
//  3b. SmolLM2-135M in the browser engine runs a few agent steps and produces a valid
//     trajectory whose later steps reuse the model's state (success is not expected).
//
// Environment: LILYPAD_MODEL (the GGUF; part 3 is skipped without it unless
// LILYPAD_REQUIRE_MODEL=1), CHROMIUM (default /usr/bin/chromium), AGENT_E2E_RESULTS (a JSON file
// for the figures), AGENT_E2E_STEPS / AGENT_E2E_TOKENS (part 3's step and token budget; 0 steps
// skips part 3, as the default suite does: it takes about 10 minutes on SwiftShader and runs in
// scripts/test-extended.sh).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { startServer } from '../scripts/serve.mjs';
import { launchBrowser } from './browser.mjs';

const here = import.meta.dirname;
const examples = resolve(here, '../../examples');
const MODEL = process.env.LILYPAD_MODEL ? resolve(process.env.LILYPAD_MODEL) : undefined;
const STEPS = Number(process.env.AGENT_E2E_STEPS ?? 2);
const TOKENS = Number(process.env.AGENT_E2E_TOKENS ?? 8);
const LONG = 40 * 60_000;
const results = {};
const step = (what) => console.log(`agent-e2e: ${what}`);
if (!MODEL && process.env.LILYPAD_REQUIRE_MODEL === '1') throw new Error('set LILYPAD_MODEL (LILYPAD_REQUIRE_MODEL=1)');

const work = mkdtempSync(join(tmpdir(), 'lilypad-agent-e2e-'));
// A zip with a wrapping folder, as GitHub's archives come.
const zipPath = join(work, 'leap-year.zip');
execFileSync('python3', ['-c', `
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED) as z:
    for name in sorted(os.listdir(src)):
        if name.endswith('.py') or name.endswith('.md'):
            z.write(os.path.join(src, name), 'leap-year-main/' + name)
`, join(examples, 'leap-year'), zipPath]);
const romanCopy = join(work, 'roman');
cpSync(join(examples, 'roman'), romanCopy, { recursive: true, filter: (s) => !s.includes('__pycache__') && !s.includes('.pytest_cache') });

const server = await startServer({ models: MODEL ? dirname(MODEL) : work, dist: join(here, '../dist') });
const browser = await launchBrowser(chromium, { acceptDownloads: true });
const { page, pageLog } = browser;

const SHOTS = process.env.E2E_SCREENSHOTS;
if (SHOTS) mkdirSync(SHOTS, { recursive: true });
const shot = async (name) => SHOTS && page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
const panelState = () => page.evaluate(() => document.getElementById('agent').dataset.state);
async function openPage() {
  await page.goto(`${server.url}/agent.html`);
  await page.waitForFunction(() => window.lilypadAgent !== undefined);
}
/** examples/roman in a fresh panel, its task typed in and the model chosen. */
async function romanWithTheModel() {
  await openPage();
  await page.setInputFiles('.agent-folder', romanCopy);
  await waitReady();
  await page.selectOption('.agent-model', 'engine');
  // The shared chooser's first preset is the model served with the page.
  await page.selectOption('.model-preset', 'smollm2-135m');
  assert.equal(await page.getAttribute('.agent-model-chooser', 'data-value'), `/models/${basename(MODEL)}`);
  await page.fill('.agent-task-text', readFileSync(join(examples, 'roman/TASK.md'), 'utf8'));
}
async function waitReady() {
  await page.waitForFunction(() => ['ready', 'empty'].includes(document.getElementById('agent').dataset.state), null, { timeout: 120_000 });
  assert.equal(await panelState(), 'ready', await page.textContent('.agent-project-status'));
}
/** Clicks "Run the tests" and waits until the panel shows their result. */
async function runTestsButton() {
  await page.click('.agent-run-tests');
  await page.waitForFunction(() => !document.getElementById('agent').dataset.tests, null, { timeout: 120_000 });
}
const shell = (command, timeout) =>
  page.evaluate(([c, t]) => window.lilypadAgent.panel.session.tool('Bash', { command: c, ...(t && { timeout: t }) }), [command, timeout]);

try {
  step('1. Pyodide: pytest fails, an Edit through the tools, pytest passes');
  await openPage();
  let started = Date.now();
  await page.setInputFiles('.agent-folder', romanCopy);
  await waitReady();
  results.python_ready_ms = Date.now() - started;
  console.log(`  ${await page.textContent('.agent-project-status')} (${results.python_ready_ms} ms)`);
  const files = await page.evaluate(() => window.lilypadAgent.panel.session.files());
  assert.deepEqual(files, ['TASK.md', 'roman.py', 'test_roman.py']);

  started = Date.now();
  const before = await shell('python -m pytest -q');
  results.pytest_first_ms = Date.now() - started;
  console.log(`  before: ${before.content.trim().split('\n').at(-1)}`);
  assert.equal(before.is_error, true, before.content);
  assert.match(before.content, /failed/);
  assert.match(before.content, /Exit code: 1/);

  const edit = await page.evaluate(() =>
    window.lilypadAgent.panel.session.tool('Edit', {
      file_path: '/repo/roman.py',
      old_string: '        total += VALUES[ch]\n',
      new_string:
        '        total += VALUES[ch]\n' +
        '    values = [VALUES[ch] for ch in numeral.upper()]\n' +
        '    total = sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values))\n',
    }),
  );
  assert.equal(edit.is_error, false, edit.content);
  started = Date.now();
  const after = await shell('pytest -q');
  results.pytest_after_edit_ms = Date.now() - started;
  console.log(`  after:  ${after.content.trim().split('\n').at(-1)}`);
  assert.equal(after.is_error, false, after.content);
  assert.match(after.content, /passed/);
  assert.doesNotMatch(after.content, /failed/);

  // The panel's button runs the same command and shows the result.
  await runTestsButton();
  assert.equal(await page.getAttribute('.agent-test-output', 'data-passed'), 'true');

  // Python writes files back into the project; the shell sees them; git knows the changes.
  const written = await shell(`python3 -c "open('notes.txt', 'w').write('from python\\n')" && cat notes.txt && git status --short`);
  assert.equal(written.is_error, false, written.content);
  assert.match(written.content, /from python/);
  assert.match(written.content, /M roman\.py/);
  assert.match(written.content, /\?\? notes\.txt|A notes\.txt/);
  const gitDiff = await shell('git diff roman.py');
  assert.match(gitDiff.content, /\+    values = \[VALUES\[ch\]/);
  const missing = await shell('python3 nowhere.py');
  assert.equal(missing.is_error, true);
  assert.match(missing.content, /can't open file/);

  // Undo the note, then the edit: the tests fail again (the old module is not kept).
  await page.evaluate(() => { const s = window.lilypadAgent.panel.session; s.undo(); s.undo(); });
  const undone = await shell('python -m pytest -q');
  assert.match(undone.content, /failed/);
  console.log(`  undo:   ${undone.content.trim().split('\n').at(-1)}`);

  // A program that never ends is stopped at the command's time limit, and the tab goes on.
  const loops = [
    ['python3 -c "while True: pass"', 'a busy loop'],
    ['python3 -c "import time; time.sleep(3600)"', 'a sleep'],
    ["printf 'def test_forever():\\n    while True:\\n        pass\\n' > test_forever.py && python -m pytest -q test_forever.py", 'a test that never ends'],
    // The interrupt lands in the inner loop, inside the try, every time.
    ["printf 'while True:\\n    try:\\n        for i in range(10 ** 7):\\n            pass\\n    except BaseException:\\n        pass\\n' > swallow.py && python3 swallow.py", 'a loop that catches the interrupt'],
    // No interrupt reaches these: the page ends Python's worker and starts another.
    ['python3 -c "sum(range(10 ** 13))"', 'a long C call'],
    ["printf 'import sys\\nwhile True:\\n    try:\\n        while True:\\n            sys.settrace(None)\\n    except BaseException:\\n        pass\\n' > untrap.py && python3 untrap.py", 'a loop that clears the trace'],
  ];
  for (const [command, what] of loops) {
    started = Date.now();
    // Python runs in its worker: the page's event loop goes on meanwhile.
    const [stopped, ticks] = await page.evaluate(async ([c]) => {
      let ticks = 0;
      const timer = setInterval(() => ticks++, 50);
      try {
        return [await window.lilypadAgent.panel.session.tool('Bash', { command: c, timeout: 2000 }), ticks];
      } finally {
        clearInterval(timer);
      }
    }, [command]);
    const ms = Date.now() - started;
    console.log(`  ${what}: stopped after ${ms} ms (the page ran ${ticks} timer ticks meanwhile): ${JSON.stringify(stopped.content.trim().split('\n').at(-1))}`);
    assert.ok(ticks >= 10, `the page was blocked while Python ran ${what} (${ticks} ticks in ${ms} ms)`);
    if (what === 'a long C call') assert.match(stopped.content, /Python was restarted/, stopped.content);
    assert.equal(stopped.is_error, true, stopped.content);
    assert.match(stopped.content, /timed out after 2000 ms/, stopped.content);
    assert.ok(ms < 10_000, `${what} took ${ms} ms to stop`);
    results[`python_stop_ms_${what.replace(/\W+/g, '_')}`] = ms;
  }
  // A run the driver cannot start fails with its reason; Python goes on (no restart for that).
  const [broken, restartsBefore, restartsAfter] = await page.evaluate(async () => {
    const python = window.lilypadAgent.panel.session.python;
    const before = python.restarts;
    const error = await python.run({ root: '/repo', cwd: '/repo', argv: [], stdin: new Uint8Array(), files: [], timeout_ms: 10_000 })
      .then(() => 'answered', (e) => String(e.message));
    return [error, before, python.restarts];
  });
  assert.match(broken, /IndexError/, 'a run the driver cannot start fails with its reason');
  assert.equal(restartsAfter, restartsBefore, 'a failed run does not restart Python');
  // A folder without files is where the program runs.
  const inEmpty = await shell('mkdir -p empty/inner && cd empty/inner && python3 -c "import os; print(os.getcwd())"');
  assert.equal(inEmpty.content.trim(), '/repo/empty/inner', inEmpty.content);
  results.python_restarts = await page.evaluate(() => window.lilypadAgent.panel.session.python?.restarts);
  assert.equal((await shell('rm test_forever.py swallow.py untrap.py && python3 -c "print(6 * 7)"')).content.trim(), '42', 'Python runs again after a stop');


  step('2. a scripted model fixes examples/leap-year in the panel; the patch is downloaded');
  await openPage();
  await page.setInputFiles('.agent-zip', zipPath);
  await waitReady();
  const call = (name, args) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
  const replies = [
    `<think>Run the tests first.</think>\n${call('Bash', { command: 'python -m pytest -q', description: 'Run the tests' })}`,
    call('Read', { file_path: '/repo/calendar_utils.py' }),
    call('Edit', {
      file_path: '/repo/calendar_utils.py',
      old_string: '    if year % 100 == 0:\n        return True',
      new_string: '    if year % 100 == 0:\n        return year % 400 == 0',
    }),
    call('Bash', { command: 'python -m pytest -q', description: 'Run the tests again' }),
    'Centuries are leap years only when divisible by 400; the tests pass now.',
  ];
  // The tests fail before the fix; the summary line is shown on its own, whatever the output's length.
  await runTestsButton();
  assert.equal(await page.getAttribute('.agent-test-result', 'data-passed'), 'false');
  const failedSummary = await page.textContent('.agent-test-summary');
  assert.match(failedSummary, /^\d+ failed, \d+ passed in [\d.]+s$/, failedSummary);
  assert.equal(await page.isVisible('.agent-test-stale'), false);
  await page.selectOption('.agent-model', 'scripted');
  await page.fill('.agent-model-input', JSON.stringify(replies));
  await page.fill('.agent-task-text', readFileSync(join(examples, 'leap-year/TASK.md'), 'utf8'));
  await page.click('.agent-run');
  await page.waitForFunction(() => ['done', 'error'].includes(document.getElementById('agent').dataset.state), null, { timeout: LONG });
  assert.equal(await panelState(), 'done', await page.textContent('.agent-run-status'));
  const scripted = await page.evaluate(() => window.lilypadAgent.panel.trajectory);
  assert.deepEqual(scripted.exit, { reason: 'submitted' });
  assert.equal(scripted.steps.length, 5);
  const obs = scripted.steps.map((s) => s.calls[0]?.observation ?? '');
  assert.match(obs[0], /failed/, obs[0]);
  assert.match(obs[1], /def is_leap_year/);
  assert.equal(scripted.steps[2].calls[0].is_error, false, obs[2]);
  assert.match(obs[3], /passed/, obs[3]);
  assert.doesNotMatch(obs[3], /failed/, obs[3]);
  assert.equal(await page.locator('.agent-step').count(), 5);
  // Scripted replies measure nothing: no prompt or speed figures are shown for them.
  assert.equal(await page.locator('.agent-step-stats').count(), 0, await page.textContent('.agent-steps'));
  // Thinking is shown folded, apart from the reply.
  const thinking = page.locator('.agent-step').first().locator('details.thinking');
  assert.equal(await thinking.count(), 1);
  assert.equal(await thinking.evaluate((d) => d.open), false, 'thinking is folded once the reply goes on');
  assert.equal((await thinking.locator('.thinking-text').textContent()).trim(), 'Run the tests first.');
  // The test output from before the agent's fix is marked stale; a new run replaces it.
  assert.equal(await page.getAttribute('.agent-test-result', 'data-stale'), 'true');
  assert.equal(await page.isVisible('.agent-test-stale'), true);
  await shot('agent-scripted-done');
  await runTestsButton();
  assert.equal(await page.getAttribute('.agent-test-result', 'data-stale'), 'false');
  assert.equal(await page.getAttribute('.agent-test-result', 'data-passed'), 'true');
  assert.match(await page.textContent('.agent-test-summary'), /^\d+ passed in [\d.]+s$/);
  // Each call is shown once: named, its arguments with real line breaks, no <tool_call> markup.
  const outputs = await page.locator('.agent-step-output').allTextContents();
  assert.ok(outputs.every((o) => !o.includes('<tool_call>')), JSON.stringify(outputs));
  assert.deepEqual(await page.locator('.agent-call-name').allTextContents(), ['Bash', 'Read', 'Edit', 'Bash']);
  const editArgs = await page.locator('.agent-step').nth(2).locator('.agent-call-args pre').allTextContents();
  assert.ok(editArgs.includes('    if year % 100 == 0:\n        return year % 400 == 0'), JSON.stringify(editArgs));
  // The changed file is marked and opens in the editor.
  await page.click('.agent-files button[data-path="calendar_utils.py"][data-change="modified"]');
  assert.match(await page.textContent('.agent-editor'), /return year % 400 == 0/);
  // The editor names its file and says it was changed.
  assert.equal(await page.textContent('.agent-editor-name'), 'calendar_utils.py');
  assert.equal(await page.getAttribute('.agent-editor-name', 'data-change'), 'modified');
  // A narrow window (an editor's side bar): the file list goes above a full-width editor.
  const wide = page.viewportSize();
  await page.setViewportSize({ width: 420, height: 900 });
  const editorWidth = await page.evaluate(() => document.querySelector('.agent-editor').getBoundingClientRect().width);
  assert.ok(editorWidth > 300, `the editor is ${editorWidth} px wide in a 420 px window`);
  await shot('agent-narrow');
  await page.emulateMedia({ colorScheme: 'dark' });
  await shot('agent-narrow-dark');
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize(wide);
  const downloaded = page.waitForEvent('download');
  await page.click('.agent-download-patch');
  const download = await downloaded;
  const patchFile = join(work, download.suggestedFilename());
  await download.saveAs(patchFile);
  const patch = readFileSync(patchFile, 'utf8');
  assert.equal(patch, scripted.patch);
  assert.match(patch, /^diff --git a\/calendar_utils\.py b\/calendar_utils\.py/m);
  const target = join(work, 'leap-year');
  cpSync(join(examples, 'leap-year'), target, { recursive: true });
  execFileSync('git', ['apply', '--check', '--directory=', patchFile], { cwd: target });
  execFileSync('git', ['apply', patchFile], { cwd: target });
  assert.match(readFileSync(join(target, 'calendar_utils.py'), 'utf8'), /return year % 400 == 0/);
  results.scripted = { steps: scripted.steps.length, exit: scripted.exit.reason, patch_bytes: patch.length };
  console.log(`  ${await page.textContent('.agent-run-status')}; patch ${patch.length} bytes applies`);

  if (MODEL) {
    step(`3a. ${basename(MODEL)}: the first step's prompt shows its progress, and Stop ends the run at once`);
    await romanWithTheModel();
    await page.fill('.agent-temperature', '0');
    await page.click('.agent-run');
    await page.waitForSelector('.agent-step[data-prompt-done]', { timeout: LONG });
    const reading = await page.evaluate(() => {
      const s = document.querySelector('.agent-step');
      return { done: Number(s.dataset.promptDone), total: Number(s.dataset.promptTotal), text: s.querySelector('.agent-step-reading')?.textContent };
    });
    console.log(`  ${reading.text}`);
    assert.match(reading.text, /^Reading the prompt: [\d,]+ \/ [\d,]+ tokens$/);
    assert.ok(reading.done > 0 && reading.done < reading.total && reading.total > 1000, JSON.stringify(reading));
    const stopAt = Date.now();
    await page.click('.agent-stop');
    await page.waitForFunction(() => ['done', 'error'].includes(document.getElementById('agent').dataset.state), null, { timeout: LONG });
    const stopMs = Date.now() - stopAt;
    assert.equal(await panelState(), 'done', await page.textContent('.agent-run-status'));
    const aborted = await page.evaluate(() => window.lilypadAgent.panel.trajectory);
    console.log(`  stopped in ${stopMs} ms: ${await page.textContent('.agent-run-status')}`);
    assert.equal(aborted.exit.reason, 'aborted', JSON.stringify(aborted.exit));
    assert.ok(stopMs < 15_000, `Stop took ${stopMs} ms`);
    results.prompt_stop = { progress: `${reading.done}/${reading.total}`, stop_ms: stopMs };
  }

  if (MODEL && STEPS > 0) {
    step(`3b. ${basename(MODEL)} in the browser engine: ${STEPS} agent steps of at most ${TOKENS} tokens`);
    await romanWithTheModel();
    await page.fill('.agent-max-steps', String(STEPS));
    await page.fill('.agent-max-tokens', String(TOKENS));
    await page.fill('.agent-temperature', '0');
    await page.uncheck('.agent-thinking');
    started = Date.now();
    await page.click('.agent-run');
    const progress = setInterval(async () => {
      const p = await page
        .evaluate(() => ({
          model: document.querySelector('.agent-model-status').textContent,
          steps: document.querySelectorAll('.agent-step').length,
          text: document.querySelector('.agent-step:last-child .agent-step-output')?.textContent.length ?? 0,
        }))
        .catch(() => undefined);
      if (p) console.log(`  ${Math.round((Date.now() - started) / 1000)} s: ${p.model}; step ${p.steps}, ${p.text} characters`);
    }, 30_000);
    await page
      .waitForFunction(() => ['done', 'error'].includes(document.getElementById('agent').dataset.state), null, { timeout: LONG })
      .finally(() => clearInterval(progress));
    results.model_run_ms = Date.now() - started;
    assert.equal(await panelState(), 'done', `${await page.textContent('.agent-run-status')} ${await page.textContent('.agent-model-status')}`);
    const t = await page.evaluate(() => window.lilypadAgent.panel.trajectory);
    writeFileSync(join(work, 'trajectory.json'), JSON.stringify(t, null, 2));
    assert.equal(t.format, 1);
    assert.equal(t.model, basename(MODEL));
    assert.ok(t.steps.length >= 1 && t.steps.length <= STEPS, `${t.steps.length} steps`);
    assert.ok(['submitted', 'step_limit', 'format_errors', 'context_limit'].includes(t.exit.reason), JSON.stringify(t.exit));
    assert.equal(t.messages[0].role, 'system');
    assert.equal(t.messages[1].role, 'user');
    for (const s of t.steps) {
      assert.ok(s.prompt_tokens > 0 && s.generated_tokens > 0 && s.generated_tokens <= TOKENS, JSON.stringify(s));
      assert.ok(s.prefill_ms > 0 && s.decode_ms >= 0);
      assert.equal(typeof s.raw_output, 'string');
    }
    // State reuse: a later step evaluates only what is new since the previous one.
    for (const s of t.steps.slice(1)) {
      assert.ok(s.prefilled_tokens < s.prompt_tokens, `step ${s.index} prefilled ${s.prefilled_tokens} of ${s.prompt_tokens}`);
    }
    assert.equal(t.patch, await page.evaluate(() => window.lilypadAgent.panel.session.patch()));
    results.model = {
      steps: t.steps.map((s) => ({ prompt: s.prompt_tokens, prefilled: s.prefilled_tokens, generated: s.generated_tokens, prefill_ms: Math.round(s.prefill_ms), decode_ms: Math.round(s.decode_ms), calls: s.calls.length })),
      exit: t.exit.reason,
      first_output: t.steps[0].raw_output.slice(0, 200),
    };
    console.log(`  ${await page.textContent('.agent-run-status')} in ${results.model_run_ms} ms: ${JSON.stringify(results.model.steps)}`);

    step("3c. after a reload, the agent's opening (system prompt and tools) comes from OPFS");
    await romanWithTheModel();
    await page.fill('.agent-max-steps', '1');
    await page.fill('.agent-max-tokens', '4');
    await page.fill('.agent-temperature', '0');
    await page.uncheck('.agent-thinking');
    started = Date.now();
    await page.click('.agent-run');
    await page.waitForFunction(() => ['done', 'error'].includes(document.getElementById('agent').dataset.state), null, { timeout: LONG });
    const again = (await page.evaluate(() => window.lilypadAgent.panel.trajectory)).steps[0];
    console.log(`  first step: ${again.prefilled_tokens} of ${again.prompt_tokens} tokens read in ${Math.round(again.prefill_ms)} ms (was ${results.model.steps[0].prefilled} in ${results.model.steps[0].prefill_ms} ms)`);
    assert.equal(again.prompt_tokens, t.steps[0].prompt_tokens);
    assert.ok(again.prefilled_tokens < again.prompt_tokens / 2, JSON.stringify(again));
    results.model.reloaded_first_step = { prefilled: again.prefilled_tokens, prefill_ms: Math.round(again.prefill_ms), run_ms: Date.now() - started };
  } else {
    step(`3b. skipped: ${MODEL ? 'AGENT_E2E_STEPS=0 (scripts/test-extended.sh runs it)' : 'LILYPAD_MODEL is not set'}`);
  }
  assert.equal(pageLog.filter((l) => l.startsWith('[pageerror]')).length, 0, pageLog.join('\n'));
  console.log('agent-e2e: all checks passed');
} catch (e) {
  console.error(`agent-e2e: FAILED\n${pageLog.slice(-40).join('\n')}`);
  throw e;
} finally {
  if (process.env.AGENT_E2E_RESULTS) writeFileSync(process.env.AGENT_E2E_RESULTS, `${JSON.stringify(results, null, 2)}\n`);
  await browser.close();
  await server.close();
  rmSync(work, { recursive: true, force: true });
}
