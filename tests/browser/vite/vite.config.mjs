// The package is pkg/ (built by pkg-config/build.sh), resolved as `wick-llm`.
import { fileURLToPath } from 'node:url';

export default {
  root: fileURLToPath(new URL('.', import.meta.url)),
  // Served under /vite/ by the test (www/serve.mjs serves named folders only, not /).
  base: '/vite/',
  logLevel: 'warn',
  resolve: { alias: { 'wick-llm': fileURLToPath(new URL('../../../pkg/index.js', import.meta.url)) } },
  build: { outDir: fileURLToPath(new URL('../../../target/web-test/vite-dist', import.meta.url)), emptyOutDir: true },
};
