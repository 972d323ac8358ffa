// Headless Chromium with WebGPU (SwiftShader without a GPU) for the end-to-end tests, in a
// throwaway profile, with every page's console and errors collected. `chromium` is the caller's
// playwright-core (the web tests and the VS Code extension's each have their own).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';

/** Resolves to { context, page, pageLog, listen(page), close() }; `options` go to Playwright. */
export async function launchBrowser(chromium, options = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'lilypad-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--enable-unsafe-webgpu', '--no-sandbox', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
    ...options,
  });
  const pageLog = [];
  const listen = (page) => {
    page.on('console', (m) => pageLog.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => pageLog.push(`[pageerror] ${e.message}`));
    // The engine runs in a worker: its console (a wasm panic's message) matters most.
    page.on('worker', (w) => w.on('console', (m) => pageLog.push(`[worker ${m.type()}] ${m.text()}`)));
  };
  const page = context.pages()[0] ?? (await context.newPage());
  listen(page);
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, page, pageLog, listen, close };
}
