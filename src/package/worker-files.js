// The worker files of this package (its `sluice.workerFiles`: the worker entry and its wasm),
// for the bundler plugins (`sluice/vite`) and `sluice-copy-worker-files`. A service worker loads
// them with `importScripts` at a fixed URL, so they are served as they are, never bundled or
// renamed; the page client is an ordinary module a bundler handles itself.
import { mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** This package's folder, symlinks resolved: what a `file:` install links to. */
export const packageDir = realpathSync(dirname(fileURLToPath(import.meta.url)));

/** This package's manifest, read afresh: a `sluice build` while `vite dev` runs takes effect. */
export function manifest() {
  return JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8'));
}

/** The files a service worker loads, by name (`sluice-worker.js`, `sluice_sw_bg.<hash>.wasm`). */
export function workerFiles() {
  const files = manifest().sluice?.workerFiles;
  if (!Array.isArray(files) || files.length === 0) {
    throw new Error(
      `${join(packageDir, 'package.json')} lists no sluice.workerFiles: write the package again with \`sluice build\``,
    );
  }
  return files;
}

/** The Content-Type a worker file must be served with (a wasm is compiled only as application/wasm). */
export function contentType(name) {
  if (name.endsWith('.wasm')) return 'application/wasm';
  if (name.endsWith('.js')) return 'text/javascript; charset=utf-8';
  return 'application/octet-stream';
}

export function readWorkerFile(name) {
  return readFileSync(join(packageDir, name));
}

/**
 * Copies the worker files into `dir` (created if needed) and removes the worker wasm of an
 * older build there, so a folder that is deployed whole never holds a wasm no entry loads.
 * Returns the paths written.
 */
export function copyWorkerFiles(dir) {
  const files = workerFiles();
  mkdirSync(dir, { recursive: true });
  const written = [];
  for (const name of files) {
    const path = join(dir, name);
    writeFileSync(path, readWorkerFile(name));
    written.push(path);
  }
  for (const name of readdirSync(dir)) {
    if (name.startsWith('sluice_sw_bg.') && name.endsWith('.wasm') && !files.includes(name)) {
      rmSync(join(dir, name));
    }
  }
  return written;
}
