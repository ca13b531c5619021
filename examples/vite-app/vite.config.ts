import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { defineConfig, searchForWorkspaceRoot, type Plugin } from 'vite';

/** Where the app serves Sluice's worker files; public/sw.js names the same folder. */
const SLUICE_DIR = 'sluice';

/**
 * Serves Sluice's worker files (its entry and its wasm, listed in the package's
 * `sluice.workerFiles`) unchanged under `/sluice/`, in `vite dev` and in the build. A service
 * worker loads them with `importScripts` at a fixed URL, so they are not bundled or renamed;
 * the page client (`import ... from 'sluice'`) is bundled like any other module. `vite dev`
 * may also read the installed package's folder, which lies outside this project when the
 * package is installed from a folder (a link): the client loads its wasm from there.
 */
function sluiceWorkerFiles(): Plugin {
  const require = createRequire(import.meta.url);
  const manifest = require.resolve('sluice/package.json');
  const dir = dirname(manifest);
  const { sluice } = JSON.parse(readFileSync(manifest, 'utf8')) as {
    sluice: { workerFiles: string[] };
  };
  const types: Record<string, string> = {
    js: 'text/javascript; charset=utf-8',
    wasm: 'application/wasm',
  };
  return {
    name: 'sluice-worker-files',
    config() {
      return { server: { fs: { allow: [searchForWorkspaceRoot(process.cwd()), dir] } } };
    },
    configureServer(server) {
      server.middlewares.use((req, res, next) => {
        const path = (req.url ?? '').split('?')[0];
        const name = path.slice(`/${SLUICE_DIR}/`.length);
        if (!path.startsWith(`/${SLUICE_DIR}/`) || !sluice.workerFiles.includes(name)) {
          return next();
        }
        res.setHeader('Content-Type', types[name.split('.').pop() ?? ''] ?? 'application/octet-stream');
        res.end(readFileSync(join(dir, name)));
      });
    },
    generateBundle() {
      for (const name of sluice.workerFiles) {
        this.emitFile({
          type: 'asset',
          fileName: `${SLUICE_DIR}/${name}`,
          source: readFileSync(join(dir, name)),
        });
      }
    },
  };
}

export default defineConfig({
  plugins: [sluiceWorkerFiles()],
});
