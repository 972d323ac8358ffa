import { resolve } from 'node:path';
import { defineConfig } from 'vite';

export default defineConfig({
  // Module workers: the engine's worker imports the wasm glue as an ES module.
  worker: { format: 'es' },
  build: {
    target: 'es2022',
    outDir: 'dist',
    emptyOutDir: true,
    // The chat playground and the agent page.
    rollupOptions: { input: { main: resolve(import.meta.dirname, 'index.html'), agent: resolve(import.meta.dirname, 'agent.html') } },
  },
  test: { include: ['test/unit/**/*.test.ts'], environment: 'node' },
});
