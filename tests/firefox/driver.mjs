// The Firefox driver of the end-to-end tests: launches Firefox with puppeteer-core, which
// speaks WebDriver BiDi on Firefox's own `--remote-debugging-port` (no geckodriver), and
// carries out the commands the Rust harness (tests/e2e/support/firefox.rs) sends.
//
// Usage: node driver.mjs '<launch JSON>'   with { executablePath, userDataDir, prefs }
//
// Protocol: one JSON object a line. The first line on stdout is
//   { "ready": { "browserPid": <pid>, "version": "<browser version>" } }   or   { "fatal": "<text>" }
// then each command on stdin, { "id": <n>, "op": "<op>", ... }, gets exactly one answer,
//   { "id": <n>, "ok": <value> }   or   { "id": <n>, "error": "<text>", "script": <bool> }
// ("script": true when the page's own script threw). Ops:
//   open { url }          a new tab, loaded            -> { page: <tab id> }
//   eval { page, body }   `body` as an async function's body in the page -> its result
//   reload { page }       `location.reload()` and its load (see below)
//   goto { page, url }    navigates and waits for the load
//   close { page }        closes the tab (no beforeunload prompt)
//   quit                  closes Firefox as a person quitting it would; the driver then exits
// Everything else the driver and Firefox print (page and worker console lines, prompts
// answered, Firefox's own output) goes to stderr, which the harness keeps as the test's log.
// When stdin closes, the driver closes Firefox and exits.

import { createInterface } from 'node:readline';
import puppeteer from 'puppeteer-core';

function log(line) {
  process.stderr.write(`${line}\n`);
}

function send(message) {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

let launch;
try {
  launch = JSON.parse(process.argv[2] ?? '');
} catch (e) {
  send({ fatal: `the launch argument is not JSON: ${e.message}` });
  process.exit(2);
}

let browser;
try {
  browser = await puppeteer.launch({
    browser: 'firefox',
    executablePath: launch.executablePath,
    userDataDir: launch.userDataDir,
    headless: true,
    // Firefox's output is copied to stderr below; puppeteer's `dumpio` would mix it into
    // stdout, which carries the protocol.
    dumpio: false,
    extraPrefsFirefox: launch.prefs ?? {},
    defaultViewport: { width: 1024, height: 768 },
    protocolTimeout: 60_000,
    // The harness ends the driver; puppeteer's own signal handlers would race it.
    handleSIGINT: false,
    handleSIGTERM: false,
    handleSIGHUP: false,
  });
} catch (e) {
  send({ fatal: `launching Firefox: ${e.message}` });
  process.exit(1);
}

const firefox = browser.process();
for (const stream of [firefox?.stdout, firefox?.stderr]) {
  stream?.on('data', (chunk) => process.stderr.write(chunk));
}

const pages = new Map();
let nextPage = 1;

function watch(id, page) {
  page.on('console', (m) => log(`page ${id} console.${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => log(`page ${id} error: ${e.message}`));
  // A `beforeunload` prompt would hold a reload or a navigation until answered; a person
  // reloading confirms it.
  page.on('dialog', async (dialog) => {
    log(`page ${id} ${dialog.type()} prompt accepted: ${dialog.message()}`);
    await dialog.accept().catch((e) => log(`page ${id} prompt: ${e.message}`));
  });
}

function pageOf(command) {
  const page = pages.get(command.page);
  if (!page) throw new Error(`no open tab ${command.page}`);
  return page;
}

/// A script's own exception, as opposed to a failure to run it.
class ScriptError extends Error {}

const ops = {
  async open({ url }) {
    const page = await browser.newPage();
    const id = nextPage++;
    pages.set(id, page);
    watch(id, page);
    await page.goto(url, { waitUntil: 'load' });
    return { page: id };
  },
  async eval(command) {
    const page = pageOf(command);
    try {
      return await page.evaluate(`(async () => {\n${command.body}\n})()`);
    } catch (e) {
      throw new ScriptError(e.message);
    }
  },
  async reload(command) {
    // WebDriver's own reload bypasses the service worker (the page comes back uncontrolled,
    // as after a forced reload); the page's own `location.reload()` is an ordinary one.
    const page = pageOf(command);
    await Promise.all([
      page.waitForNavigation({ waitUntil: 'load' }),
      page.evaluate('setTimeout(() => location.reload(), 0)'),
    ]);
    return null;
  },
  async goto(command) {
    await pageOf(command).goto(command.url, { waitUntil: 'load' });
    return null;
  },
  async close(command) {
    const page = pageOf(command);
    pages.delete(command.page);
    await page.close({ runBeforeUnload: false });
    return null;
  },
  async quit() {
    await browser.close();
    return null;
  },
};

send({ ready: { browserPid: firefox?.pid ?? null, version: await browser.version() } });

let quitting = false;
const input = createInterface({ input: process.stdin });
input.on('line', async (line) => {
  let command;
  try {
    command = JSON.parse(line);
  } catch (e) {
    log(`driver: a command that is not JSON: ${line}`);
    return;
  }
  const op = ops[command.op];
  try {
    if (!op) throw new Error(`unknown op ${command.op}`);
    if (command.op === 'quit') quitting = true;
    const value = await op(command);
    send({ id: command.id, ok: value ?? null });
    if (command.op === 'quit') process.exit(0);
  } catch (e) {
    send({ id: command.id, error: e.message, script: e instanceof ScriptError });
  }
});
input.on('close', async () => {
  if (!quitting) await browser.close().catch(() => {});
  process.exit(0);
});
