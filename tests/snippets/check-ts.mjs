// Type-checks every ```ts block of the README (and of docs/*.md and the package's own README,
// src/package/README.md) against the built package, with the strict settings Vite's
// `create-vite` TypeScript template gives a new app: a newcomer pastes these into such an app
// first, and a snippet that fails there is the first thing they meet (issue 35: an unused
// local, an undeclared variable, an implicit any).
//
//   node tests/snippets/check-ts.mjs [FILE.md ...]
//
// Needs `npm ci --prefix examples/vite-app` (after `sluice build`): the snippets are checked
// inside that app, so `sluice`, `sluice/vite` and `vite` resolve as they do in an app, with its
// pinned TypeScript. Each block is a module of its own. A block whose first line is a comment
// naming a file (`// vite.config.ts`) is checked as that file: a config file gets the
// template's Node settings, anything else its browser settings. A block that is not meant to
// compile on its own is marked as another language (```js, ```text).
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const app = join(repo, 'examples/vite-app');
const require = createRequire(join(app, 'package.json'));
let ts;
try {
  ts = require('typescript');
} catch {
  console.error('check-ts: no TypeScript in examples/vite-app: run `npm ci --prefix examples/vite-app` first');
  process.exit(2);
}

// create-vite's `vanilla-ts` template (tsconfig.json), and its Node side for config files
// (the `tsconfig.node.json` of its framework templates).
const shared = {
  module: 'ESNext',
  skipLibCheck: true,
  moduleResolution: 'bundler',
  allowImportingTsExtensions: true,
  verbatimModuleSyntax: true,
  moduleDetection: 'force',
  noEmit: true,
  strict: true,
  noUnusedLocals: true,
  noUnusedParameters: true,
  erasableSyntaxOnly: true,
  noFallthroughCasesInSwitch: true,
  noUncheckedSideEffectImports: true,
};
const browser = {
  ...shared,
  target: 'ES2022',
  useDefineForClassFields: true,
  lib: ['ES2022', 'DOM', 'DOM.Iterable'],
  types: ['vite/client'],
};
const node = { ...shared, target: 'ES2023', lib: ['ES2023'], types: ['node'] };

/** The ```ts blocks of a Markdown file: `{ line, code, name }`, `line` 1-based, of its first code line. */
function blocks(path) {
  const found = [];
  const lines = readFileSync(path, 'utf8').split('\n');
  let open = null;
  lines.forEach((text, i) => {
    const fence = /^\s*```(\S*)\s*$/.exec(text);
    if (open === null && fence) {
      open = { lang: fence[1], line: i + 2, code: [] };
    } else if (open !== null && /^\s*```\s*$/.test(text)) {
      if (['ts', 'typescript'].includes(open.lang)) {
        const named = /^\s*\/\/\s*([\w.-]+\.ts)\s*$/.exec(open.code[0] ?? '');
        found.push({ line: open.line, code: open.code.join('\n') + '\n', name: named ? named[1] : 'snippet.ts' });
      }
      open = null;
    } else if (open !== null) {
      open.code.push(text);
    }
  });
  return found;
}

const files = process.argv.length > 2
  ? process.argv.slice(2).map((f) => resolve(f))
  : [join(repo, 'README.md'), ...listDocs(), join(repo, 'src/package/README.md')];

function listDocs() {
  const docs = join(repo, 'docs');
  try {
    return ts.sys.readDirectory(docs, ['.md']).map((f) => resolve(f));
  } catch {
    return [];
  }
}

// Inside the app, so that its node_modules resolve; removed afterwards.
const work = join(app, '.snippets-check');
rmSync(work, { recursive: true, force: true });
const snippets = [];
for (const file of files) {
  for (const block of blocks(file)) {
    const dir = join(work, String(snippets.length));
    mkdirSync(dir, { recursive: true });
    const path = join(dir, block.name);
    writeFileSync(path, block.code);
    snippets.push({ ...block, file, path });
  }
}

let errors = 0;
try {
  process.chdir(app); // where `types` are looked up
  for (const [settings, which] of [[browser, (s) => !isConfig(s)], [node, isConfig]]) {
    const chosen = snippets.filter(which);
    if (chosen.length === 0) continue;
    const { options, errors: bad } = ts.convertCompilerOptionsFromJson(settings, app);
    if (bad.length) throw new Error(ts.flattenDiagnosticMessageText(bad[0].messageText, '\n'));
    const program = ts.createProgram(chosen.map((s) => s.path), options);
    for (const d of ts.getPreEmitDiagnostics(program)) {
      errors += 1;
      const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
      const snippet = d.file && chosen.find((s) => resolve(s.path) === resolve(d.file.fileName));
      if (snippet && d.start !== undefined) {
        const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
        console.error(`${relative(repo, snippet.file)}:${snippet.line + line}:${character + 1}: TS${d.code}: ${message}`);
      } else {
        console.error(`${d.file ? d.file.fileName : '(options)'}: TS${d.code}: ${message}`);
      }
    }
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}

function isConfig(snippet) {
  return /^vite\.config\.[cm]?ts$/.test(basename(snippet.path));
}

const where = [...new Set(snippets.map((s) => relative(repo, s.file)))].join(', ');
if (errors > 0) {
  console.error(`check-ts: ${errors} error(s) in ${snippets.length} TypeScript snippet(s)`);
  process.exit(1);
}
console.log(`check-ts: ${snippets.length} TypeScript snippet(s) type-check (${where || 'none found'})`);
