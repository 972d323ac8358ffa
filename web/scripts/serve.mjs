#!/usr/bin/env node
// Serves the built playground (dist/) and model files (/models/ from a folder) on localhost,
// with HTTP Range support (via `send`: 206, ETag, Last-Modified, HEAD) and a request log.
// Used by scripts/web.sh and by the end-to-end test, which reads the log to prove caching.
//
//   node scripts/serve.mjs [--port 8080] [--models ../models] [--dist dist]
import { createServer } from 'node:http';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import send from 'send';

/**
 * Starts the server on `host` (a loopback address); resolves to { url, log, close }. Each log entry records one finished
 * request: method, path, Range header, status and body bytes sent. `extra` maps path
 * prefixes to folders; `intercept(req, res, url)` may answer a request (returning true) or
 * rewrite `req.url`.
 */
export function startServer({ port = 0, host = '127.0.0.1', models, dist, extra = {}, intercept }) {
  const log = [];
  const server = createServer((req, res) => {
    let url = new URL(req.url ?? '/', 'http://localhost');
    const entry = { method: req.method, path: url.pathname, range: req.headers.range ?? null, status: 0, bytes: 0 };
    const write = res.write.bind(res);
    res.write = (chunk, ...rest) => {
      entry.bytes += chunk?.length ?? 0;
      return write(chunk, ...rest);
    };
    res.on('finish', () => {
      entry.status = res.statusCode;
      log.push(entry);
    });
    // Tests: answer a request themselves, or rewrite req.url.
    if (intercept?.(req, res, url)) return;
    url = new URL(req.url ?? '/', 'http://localhost');
    // Extra routes (tests): path prefix -> folder.
    for (const [prefix, root] of Object.entries(extra)) {
      if (url.pathname.startsWith(prefix)) {
        return send(req, url.pathname.slice(prefix.length - 1), { root }).pipe(res);
      }
    }
    if (url.pathname.startsWith('/models/')) {
      // Models may be read from other origins (a VS Code webview), as from Hugging Face.
      res.setHeader('Access-Control-Allow-Origin', '*');
      res.setHeader('Access-Control-Expose-Headers', 'Content-Range, Content-Length, ETag, Last-Modified, Accept-Ranges');
      if (req.method === 'OPTIONS') {
        res.setHeader('Access-Control-Allow-Headers', 'Range');
        res.setHeader('Access-Control-Allow-Methods', 'GET, HEAD');
        res.statusCode = 204;
        return res.end();
      }
      return send(req, url.pathname.slice('/models'.length), { root: models }).pipe(res);
    }
    send(req, url.pathname === '/' ? '/index.html' : url.pathname, { root: dist }).pipe(res);
  });
  return new Promise((done) => {
    server.listen(port, host, () => {
      const url = `http://${host}:${server.address().port}`;
      done({ url, log, close: () => new Promise((r) => server.close(r)) });
    });
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: {
      port: { type: 'string', default: '8080' },
      models: { type: 'string', default: resolve(import.meta.dirname, '../../models') },
      dist: { type: 'string', default: resolve(import.meta.dirname, '../dist') },
    },
  });
  const { url } = await startServer({ port: Number(values.port), models: resolve(values.models), dist: resolve(values.dist) });
  console.log(`lilypad playground: ${url}/ (models from ${resolve(values.models)})`);
}
