// `sluice/vite`: the Vite plugin an app adds so that it copies nothing of Sluice's by hand.
//
//   import sluice from 'sluice/vite';
//   export default defineConfig({ plugins: [sluice()] });
//
// - `vite dev` serves the worker files (`sluice.workerFiles`) unchanged under `base`
//   (`/sluice/` by default), read from the installed package on every request;
// - `vite build` emits them unchanged at that path in the output, so `vite preview` and any
//   static host serve them beside the app;
// - Vite may read the installed package's real folder: a package installed from a folder
//   (`file:`, `npm link`) is a symlink out of the project, and the page client loads its wasm
//   from there (`new URL('sluice_client_bg.wasm', import.meta.url)`), which Vite's allow list
//   refuses with "403 ... outside of Vite serving allow list" otherwise;
// - the page client is kept out of dependency pre-bundling: a pre-bundled copy lives in
//   `node_modules/.vite/deps`, where that wasm URL points at a file that is not there.
//
// This file imports nothing of Vite's: a package installed from a folder cannot resolve the
// app's `vite` from where it lies.
import { contentType, manifest, packageDir, readWorkerFile, workerFiles } from './worker-files.js';

const DEFAULT_BASE = '/sluice/';

/** `'/sluice/'`, `'sluice'`, `'/vendor/sluice'` → `'sluice'`, `'vendor/sluice'`; refuses the rest. */
function folderOf(base) {
  if (typeof base !== 'string') {
    throw new TypeError(`sluice/vite: base must be a string such as '/sluice/', not ${typeof base}`);
  }
  const folder = base.replace(/^\/+|\/+$/g, '');
  const segments = folder.split('/');
  const bad = folder === '' || /[?#\\]/.test(folder) || segments.some((s) => s === '' || s === '.' || s === '..');
  if (bad) {
    throw new Error(
      `sluice/vite: base ${JSON.stringify(base)} is not a folder path such as '/sluice/' ` +
        `(the worker files need a folder of their own, and the worker script's packageUrl names it)`,
    );
  }
  return folder;
}

/**
 * @param {{ base?: string }} [options]
 */
export default function sluice(options = {}) {
  const folder = folderOf(options.base ?? DEFAULT_BASE);
  const name = manifest().name;
  // Where `vite dev` answers: the app's base URL (Vite's `base`), then the folder.
  let prefix = `/${folder}/`;
  return {
    name: 'sluice',
    config() {
      return { optimizeDeps: { exclude: [name] } };
    },
    configResolved(config) {
      // Added to the resolved list, not set in `config()`: a list set there would replace the
      // default (the project's workspace root) instead of extending it.
      const allow = config.server?.fs?.allow;
      const dir = packageDir.replace(/\\/g, '/');
      if (Array.isArray(allow) && !allow.some((a) => dir === a || dir.startsWith(`${a.replace(/\/$/, '')}/`))) {
        allow.push(dir);
      }
      const base = typeof config.base === 'string' && config.base.startsWith('/') ? config.base : '/';
      prefix = `${base.replace(/\/?$/, '/')}${folder}/`;
    },
    configureServer(server) {
      server.middlewares.use((req, res, next) => {
        const path = (req.url ?? '').split(/[?#]/)[0];
        if (!path.startsWith(prefix) || (req.method !== 'GET' && req.method !== 'HEAD')) return next();
        let file;
        try {
          file = decodeURIComponent(path.slice(prefix.length));
        } catch {
          return next(); // not a name any worker file has
        }
        let body;
        try {
          if (!workerFiles().includes(file)) return next();
          body = readWorkerFile(file);
        } catch (error) {
          return next(error);
        }
        res.statusCode = 200;
        res.setHeader('Content-Type', contentType(file));
        res.setHeader('Content-Length', String(body.length));
        // A stale worker entry or wasm in development is the most confusing kind of bug.
        res.setHeader('Cache-Control', 'no-cache');
        res.end(req.method === 'HEAD' ? undefined : body);
      });
    },
    generateBundle() {
      // One copy, with the browser's build: a server-side build (SSR) serves no worker.
      if (this.environment?.config?.consumer === 'server') return;
      for (const file of workerFiles()) {
        this.emitFile({ type: 'asset', fileName: `${folder}/${file}`, source: readWorkerFile(file) });
      }
    },
  };
}
