#!/usr/bin/env node
// `sluice-copy-worker-files DIR`: copies this package's worker files (the worker entry and its
// wasm) into DIR, for bundlers other than Vite (whose plugin, `sluice/vite`, does it itself).
// Run it before each build, e.g. `"prebuild": "sluice-copy-worker-files public/sluice"`: the
// files come from the installed package, so they always match the page client beside them.
import { copyWorkerFiles } from './worker-files.js';

const args = process.argv.slice(2);
if (args.length !== 1 || args[0].startsWith('-')) {
  console.error(
    'usage: sluice-copy-worker-files DIR\n' +
      "  copies Sluice's worker files into DIR (e.g. public/sluice), to be served unchanged at\n" +
      "  the URL your worker script's packageUrl names",
  );
  process.exit(2);
}
try {
  for (const path of copyWorkerFiles(args[0])) console.log(path);
} catch (error) {
  console.error(`sluice-copy-worker-files: ${error.message}`);
  process.exit(1);
}
