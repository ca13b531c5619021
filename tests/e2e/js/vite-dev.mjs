// `vite dev` for tests/e2e/package.rs: the example app's own vite.config.ts (so its
// `sluice/vite` plugin), started through Vite's API exactly as the `vite` command starts it, on
// a port the system picks. One more plugin, the test's: the example's public/sw.js allows only
// the demo API on :8081, so /sw.js is served allowing the test's API as well, as the demo
// server does for the built example (src/server.rs `allowing`).
//
//   node tests/e2e/js/vite-dev.mjs APP_ROOT API_ORIGIN
//
// Prints `ready URL` once it listens; stops when stdin closes (the test ended) or on SIGTERM.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [rootArg, apiOrigin] = process.argv.slice(2);
if (!rootArg || !apiOrigin) {
  console.error('usage: node vite-dev.mjs APP_ROOT API_ORIGIN');
  process.exit(2);
}
const root = resolve(rootArg);
// The app's own Vite, as its `npm run dev` would run it.
const vitePath = createRequire(join(root, 'package.json')).resolve('vite');
const { createServer } = await import(pathToFileURL(vitePath).href);

/** The worker script with the test API's origin allowed, just before it loads the entry. */
function allowTestApi() {
  return {
    name: 'sluice-e2e-allow-test-api',
    configureServer(server) {
      server.middlewares.use((req, res, next) => {
        if ((req.url ?? '').split('?')[0] !== '/sw.js') return next();
        const script = readFileSync(join(root, 'public', 'sw.js'), 'utf8');
        const at = script.search(/^\s*importScripts\(/m);
        if (at < 0) return next(new Error('public/sw.js does not load the worker entry'));
        const allow = `self.SLUICE_CONFIG.allow = [${JSON.stringify(`${apiOrigin.replace(/\/$/, '')}/`)}];\n`;
        res.setHeader('Content-Type', 'text/javascript; charset=utf-8');
        res.setHeader('Cache-Control', 'no-cache');
        res.end(script.slice(0, at) + allow + script.slice(at));
      });
    },
  };
}

const server = await createServer({
  root,
  configFile: join(root, 'vite.config.ts'),
  clearScreen: false,
  server: { host: '127.0.0.1', port: 0, strictPort: true },
  plugins: [allowTestApi()],
});
await server.listen();
const address = server.httpServer?.address();
if (!address || typeof address !== 'object') {
  console.error('vite dev: no address to report');
  process.exit(1);
}
console.log(`ready http://127.0.0.1:${address.port}/`);

let closing = false;
async function close() {
  if (closing) return;
  closing = true;
  await server.close();
  process.exit(0);
}
process.stdin.on('end', close);
process.stdin.on('close', close);
process.stdin.resume();
process.on('SIGTERM', close);
