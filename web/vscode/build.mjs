// Bundles the extension host (CommonJS, vscode external) and the webview (an ES module, so the
// wasm glue finds its .wasm next to it through import.meta.url), and copies the assets.
import { build } from 'esbuild';
import { cpSync, existsSync, mkdirSync, rmSync } from 'node:fs';

const web = new URL('../', import.meta.url).pathname;
rmSync('dist', { recursive: true, force: true });
mkdirSync('dist');
await build({
  entryPoints: ['src/extension.ts'], bundle: true, platform: 'node', format: 'cjs', target: 'node18',
  external: ['vscode'], outfile: 'dist/extension.js', sourcemap: false, logLevel: 'warning',
});
await build({
  entryPoints: { webview: 'src/webview.ts' }, bundle: true, platform: 'browser', format: 'esm', target: 'es2022',
  outdir: 'dist', splitting: false, logLevel: 'warning',
  // The agent's Python (Pyodide) is served from dist/pyodide/: the base is set by the webview.
  define: { 'import.meta.env': 'globalThis.lilypadEnv' },
});
await build({
  entryPoints: { 'engine-worker': '../src/lib/worker.ts', 'python-worker': '../src/agent/python-worker.ts' },
  bundle: true, platform: 'browser', format: 'esm', target: 'es2022', outdir: 'dist', logLevel: 'warning',
});
await build({ entryPoints: { webview: 'src/webview.css' }, bundle: true, outdir: 'dist', logLevel: 'warning' });
const wasm = `${web}src/agent/wasm/lilypad_agent_wasm_bg.wasm`;
if (!existsSync(wasm)) throw new Error(`${wasm} is missing: run scripts/build-agent-wasm.sh first`);
cpSync(wasm, 'dist/lilypad_agent_wasm_bg.wasm');
const engineWasm = `${web}src/wasm/lilypad_wasm_bg.wasm`;
if (!existsSync(engineWasm)) throw new Error(`${engineWasm} is missing: run scripts/build-wasm.sh first`);
cpSync(engineWasm, 'dist/lilypad_wasm_bg.wasm');
// Pyodide and pytest's wheels (scripts/setup-pyodide.sh), for Python in the agent's shell.
const pyodide = `${web}public/pyodide`;
if (existsSync(pyodide)) cpSync(pyodide, 'dist/pyodide', { recursive: true });
else console.warn(`${pyodide} is missing: the view will have no Python (scripts/setup-pyodide.sh)`);
console.log('built dist/');
