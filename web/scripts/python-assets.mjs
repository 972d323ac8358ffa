#!/usr/bin/env node
// Puts Python for the agent page into public/pyodide/, which Vite serves and copies into the
// build: Pyodide's runtime from the npm package and the pytest wheels that
// scripts/setup-pyodide.sh downloaded from PyPI (folder: $PYODIDE_WHEELS, default
// ~/.cache/lilypad/pyodide-wheels), listed in wheels.json. Nothing is loaded from a CDN.
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

const web = join(import.meta.dirname, '..');
const out = join(web, 'public/pyodide');
const runtime = join(web, 'node_modules/pyodide');
const cache = process.env.LILYPAD_CACHE ?? join(homedir(), '.cache/lilypad');
const wheels = process.env.PYODIDE_WHEELS ?? join(cache, 'pyodide-wheels');

rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, 'wheels'), { recursive: true });
for (const f of ['pyodide.mjs', 'pyodide.asm.mjs', 'pyodide.asm.wasm', 'python_stdlib.zip', 'pyodide-lock.json']) {
  copyFileSync(join(runtime, f), join(out, f));
}
const names = existsSync(wheels) ? readdirSync(wheels).filter((n) => n.endsWith('.whl')).sort() : [];
for (const n of names) copyFileSync(join(wheels, n), join(out, 'wheels', n));
if (names.length) {
  writeFileSync(join(out, 'wheels/wheels.json'), `${JSON.stringify(names)}\n`);
} else {
  console.warn(`python-assets: no wheels in ${wheels} (run scripts/setup-pyodide.sh); the agent page will have Python without pytest`);
  writeFileSync(join(out, 'wheels/wheels.json'), '[]\n');
}
