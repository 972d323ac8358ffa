import { defineConfig } from 'vite';

export default defineConfig({
  // Module workers: the engine's worker imports the wasm glue as an ES module.
  worker: { format: 'es' },
  build: { target: 'es2022', outDir: 'dist', emptyOutDir: true },
  test: { include: ['test/unit/**/*.test.ts'], environment: 'node' },
});
