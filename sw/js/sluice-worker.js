// Sluice's worker entry: the listeners that run the Rust/wasm worker (crate `sluice-sw`) in an
// app's own service worker. `sluice build` writes it into the package as `sluice-worker.js`,
// after wasm-bindgen's glue (wrapped as `sluiceGlue()`, which makes a fresh copy of it per
// instance) and with the wasm's name and SHA-256 filled in. An app's worker script sets its
// configuration and loads this with one line:
//
//   self.SLUICE_CONFIG = { budgets: [...], allow: [...], packageUrl: '/sluice/' };
//   importScripts('/sluice/sluice-worker.js');
//
// A classic script (importScripts works in every browser; module workers do not yet).
// Listeners must be added synchronously while the worker script first runs, but wasm starts
// asynchronously: the first event starts it (`whenReady`) and every listener waits on it.
//
// Configuration. The engine part (budgets, retry, aging, retentionMs, maxBodyBytes) can be
// replaced at run time by a page (`configure` request); that is saved in IndexedDB and wins
// over the script's for as long as the script's engine configuration stays the same. A deploy
// that changes the script's configuration wins over an older page-saved one. Relative prefixes
// ("/api/") are resolved against the worker's origin. `packageUrl` (read here only) is where
// this package's files are served; default: the folder of the worker script.
(function () {
  'use strict';

  // Filled in by `sluice build`: the wasm this glue was generated with, by content.
  const WASM_FILE = '@SLUICE_WASM_FILE@';
  const WASM_SHA256 = '@SLUICE_WASM_SHA256@';
  // One cache for the worker's wasm, one entry per build (the file name carries its hash). A
  // new version activating deletes the others, so new glue never meets old wasm, and an old
  // worker that restarts before the new one takes over still finds its own.
  const WASM_CACHE = 'sluice-wasm';

  const config = self.SLUICE_CONFIG || {};
  // A folder: `/sluice` is taken as `/sluice/` (resolved as written, `sluice_sw_bg.wasm` would
  // be looked for beside it, in the parent folder).
  const packageUrl = new URL(
    config.packageUrl ? String(config.packageUrl).replace(/\/?$/, '/') : './',
    self.location.href,
  );
  const wasmUrl = new URL(WASM_FILE, packageUrl).href;
  const packageUrlHint =
    `packageUrl (${config.packageUrl ? JSON.stringify(config.packageUrl) : 'not set: the worker ' +
      "script's folder"}) must be the URL of the folder that serves sluice-worker.js and its ` +
    'wasm, the files of one `sluice build` (with the Vite plugin: the base it serves them under)';

  // Why this instance cannot start; its message is what a person reads on the page (see
  // `tellPages`), so it says what to change.
  class StartError extends Error {
    constructor(message) {
      super(message);
      this.name = 'StartError';
    }
  }

  function hex(buffer) {
    return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, '0')).join('');
  }

  // Every wasm module starts with these four bytes.
  const WASM_MAGIC = [0x00, 0x61, 0x73, 0x6d];

  // The wasm is kept in Cache Storage: the browser caches the scripts a worker imports with its
  // registration, but not what they fetch, so a worker woken while offline could not start.
  // Install fetches it and checks it is the build the glue above was made for: a server or CDN
  // that serves mismatched files fails the install (the working version stays) instead of
  // running glue against the wrong wasm. The checks go from the likeliest mistake (a wrong
  // URL: not found, or a dev server's index.html answered for any path) to the rarest (files
  // of two builds mixed), so the message names the right one.
  async function storeWasm() {
    let response;
    try {
      response = await fetch(wasmUrl, { cache: 'no-cache' });
    } catch (error) {
      throw new StartError(`cannot load ${wasmUrl}: ${error} (offline, or the server is down)`);
    }
    if (!response.ok) {
      throw new StartError(
        `${wasmUrl} was not found (HTTP ${response.status}): ${packageUrlHint}`,
      );
    }
    const bytes = await response.arrayBuffer();
    const head = new Uint8Array(bytes, 0, Math.min(4, bytes.byteLength));
    if (head.length < 4 || WASM_MAGIC.some((b, i) => head[i] !== b)) {
      const type = response.headers.get('Content-Type') || 'none';
      const start = new TextDecoder().decode(bytes.slice(0, 256)).trimStart().toLowerCase();
      const page = /html/i.test(type) || start.startsWith('<!doctype') || start.startsWith('<html');
      throw new StartError(
        `${wasmUrl} is not wasm: the server answered ${page ? 'an HTML page' : 'something else'} ` +
          `(Content-Type: ${type}), as dev servers do for a path they do not know: ` +
          packageUrlHint,
      );
    }
    const sha256 = hex(await crypto.subtle.digest('SHA-256', bytes));
    if (sha256 !== WASM_SHA256) {
      throw new StartError(
        `${wasmUrl} is not the wasm this sluice-worker.js was built with (SHA-256 ${sha256}, ` +
          `expected ${WASM_SHA256}): serve the files of one \`sluice build\` together`,
      );
    }
    const cache = await caches.open(WASM_CACHE);
    await cache.put(
      wasmUrl,
      new Response(bytes, { headers: { 'Content-Type': 'application/wasm' } }),
    );
    return bytes;
  }

  // Tells every page of the origin (controlled or not: a page whose worker failed to install
  // is not) what went wrong, as the page client reads a worker error that answers no request:
  // a page waiting in `register()` rejects with it, later ones reach `subscribe` listeners.
  // The worker's console is not where a person building a page looks.
  async function tellPages(code, error) {
    const message = error instanceof Error ? error.message : String(error);
    const text = JSON.stringify({ type: 'error', requestId: null, error: { code, message } });
    try {
      const pages = await self.clients.matchAll({ includeUncontrolled: true, type: 'window' });
      for (const page of pages) page.postMessage(text);
    } catch (_) {
      // Nobody to tell; the console has it.
    }
  }

  async function cachedWasm() {
    const cache = await caches.open(WASM_CACHE);
    return (await cache.match(wasmUrl)) || storeWasm();
  }

  async function forgetOtherBuilds() {
    try {
      const cache = await caches.open(WASM_CACHE);
      const stale = (await cache.keys()).filter((request) => request.url !== wasmUrl);
      await Promise.all(stale.map((request) => cache.delete(request)));
    } catch (error) {
      // Only space is at stake; the worker runs either way.
      console.warn('sluice: could not remove the wasm of older builds:', error);
    }
  }

  // A wasm instance whose code stopped half-way (a trap: `unreachable`, out of memory; or a
  // browser call that threw through the Rust code) has its state half-updated: a RefCell left
  // borrowed, an async task stuck mid-poll. Entered again it fails again, or worse, acts on
  // that state. So it is never entered again: every later call into it (its timers, its
  // fetches' answers, its listeners) throws `Fenced` at once, so it can neither send, store nor
  // post, and the next event starts a fresh instance that rebuilds the queue from storage, as
  // after the worker was stopped.
  class Fenced extends Error {
    constructor(what) {
      super(`sluice: ${what} of a wasm instance that stopped after an error: not entered again`);
      this.name = 'Fenced';
    }
  }

  // The key of the glue's imports object: tells its instantiation apart from any other wasm
  // the app's worker script instantiates.
  const GLUE_IMPORTS = './sluice_sw_bg.js';

  // The instance's exports, each wrapped: an error escaping one marks the instance broken.
  function fenced(exports, life) {
    const out = {};
    for (const [name, value] of Object.entries(exports)) {
      if (typeof value !== 'function') {
        out[name] = value; // memory, tables
        continue;
      }
      out[name] = function (...args) {
        if (life.broken) throw new Fenced(name);
        try {
          return value.apply(this, args);
        } catch (error) {
          if (!(error instanceof Fenced)) broke(life, error);
          throw error;
        }
      };
    }
    return out;
  }

  function broke(life, error) {
    if (life.broken) return;
    life.broken = true;
    console.error(
      'sluice: the worker\'s wasm stopped in the middle of its work; that instance is fenced ' +
        'and a fresh one takes the queue over from storage with the next event:',
      error,
    );
    // Only a started instance's pages are told here; one that breaks while starting is a
    // start that failed (`whenReady` says so).
    if (current === life) {
      current = null;
      ready = null;
      tellPages('crashed', error);
    }
  }

  // Instantiates the wasm (bytes, or the cached Response) with a fresh copy of the glue whose
  // exports are wrapped by `fenced`. The glue calls WebAssembly.instantiate itself, with
  // imports it builds; this one call is caught on its way (recognised by the glue's imports)
  // and its exports wrapped. Bytes, never a Response: the glue would stream-compile that
  // (instantiateStreaming) past the catch.
  async function instantiate(wasm) {
    const bytes = wasm instanceof Response ? await wasm.arrayBuffer() : wasm;
    const glue = sluiceGlue();
    const life = { glue, broken: false, wrapped: false };
    const original = WebAssembly.instantiate;
    WebAssembly.instantiate = function (source, imports) {
      const made = original.call(WebAssembly, source, imports);
      if (!imports || !Object.prototype.hasOwnProperty.call(imports, GLUE_IMPORTS)) return made;
      WebAssembly.instantiate = original;
      life.wrapped = true;
      return made.then((result) => {
        const instance = result instanceof WebAssembly.Instance ? result : result.instance;
        const module = result instanceof WebAssembly.Instance ? source : result.module;
        return { instance: { exports: fenced(instance.exports, life) }, module };
      });
    };
    try {
      await glue({ module_or_path: bytes });
    } finally {
      if (WebAssembly.instantiate !== original) WebAssembly.instantiate = original;
    }
    if (!life.wrapped) throw new Error('sluice: the wasm was instantiated past its fence');
    return life;
  }

  // The wasm's own opening of IndexedDB took 12-23 ms of a cold start holding 7,700 jobs, and
  // began only once the wasm was loaded; an opening right after another one is done in 1-3 ms.
  // So the database is opened here, as the wasm starts loading, and closed at once: measured
  // (issue 40, `sluice bench --cold-start`, instrumented), the wasm's opening then took 1-3 ms
  // and the database was ready 24-25 ms after the event instead of 26-39. Opened at whatever
  // version it has; one that does not exist yet is not created here, without its schema: that
  // upgrade is aborted (the wasm creates it). Nothing here can fail a start.
  function warmDatabase() {
    try {
      const request = indexedDB.open('sluice');
      request.onupgradeneeded = () => request.transaction.abort();
      request.onsuccess = () => request.result.close();
      request.onerror = (event) => event.preventDefault();
    } catch (_) {
      // no IndexedDB here: the wasm says so
    }
  }

  // The running instance ({glue, broken}), once started.
  let current = null;
  let ready = null;
  // Starts the wasm once per instance, resolving to its glue; a failed start (e.g. offline
  // before anything was cached) is tried again by the next event instead of leaving this
  // worker broken for good, and so is an instance that broke (see `Fenced`).
  function whenReady(fromNetwork) {
    if (!ready) {
      warmDatabase();
      const starting = (fromNetwork ? storeWasm() : cachedWasm())
        .then(instantiate)
        .then((life) => {
          // An instance that breaks here throws (see `fenced`), so it never becomes current.
          const problem = life.glue.start(self.SLUICE_CONFIG);
          if (problem) throw new StartError(problem);
          current = life;
          return life.glue;
        })
        .catch(async (error) => {
          if (ready === starting) ready = null;
          // Every event that cannot start the worker says why where a person looks, before
          // its promise settles: a failed install makes this worker redundant, and what it had
          // not posted by then would be lost.
          console.error('sluice: the worker cannot start:', error);
          await tellPages('cannot-start', error);
          throw error;
        });
      ready = starting;
    }
    return ready;
  }

  // Runs `use(glue)` on the running instance; if that instance broke before this call entered
  // it, once more on a fresh one (an event that broke an instance itself is not repeated).
  function withWasm(use, fromNetwork) {
    return whenReady(fromNetwork)
      .then(use)
      .catch((error) => {
        if (!(error instanceof Fenced)) throw error;
        return whenReady(fromNetwork).then(use);
      });
  }

  // A broken build must never replace a working worker: install fails if the wasm does not load.
  self.addEventListener('install', (event) => {
    const installed = withWasm((glue) => glue.on_install(event), true);
    // The browser only says the install failed; `whenReady` told the pages and the console why.
    event.waitUntil(installed);
  });

  self.addEventListener('activate', (event) => {
    event.waitUntil(
      Promise.all([withWasm((glue) => glue.on_activate(event)), forgetOtherBuilds()]),
    );
  });

  // Replies and broadcasts are sent from inside; the promise resolves when the queue is idle
  // (at the latest after 90 s), keeping the worker alive while it works.
  self.addEventListener('message', (event) => {
    event.waitUntil(withWasm((glue) => glue.on_message(event)));
  });

  self.addEventListener('sync', (event) => {
    event.waitUntil(withWasm((glue) => glue.on_sync(event)));
  });

  // Whether to intercept must be decided synchronously. Once the wasm runs, Rust decides
  // (`should_intercept`). In the first milliseconds of a cold start (or of a fresh instance
  // after one broke), before it runs, this mirror of the same rule (method, URL prefix,
  // required header) picks candidates, and Rust confirms once ready; a candidate it declines
  // is fetched as it was.
  function mightIntercept(request) {
    const routes = (self.SLUICE_CONFIG && self.SLUICE_CONFIG.intercept) || [];
    return routes.some((route) => {
      try {
        const method = (route.method || '*').trim().toUpperCase();
        if (method !== '*' && method !== request.method.toUpperCase()) return false;
        if (!route.prefix) return false;
        const prefix = new URL(route.prefix.trim(), self.location.origin).href;
        if (!request.url.startsWith(prefix)) return false;
        return !route.header || request.headers.has(route.header.trim());
      } catch (_) {
        return false;
      }
    });
  }

  self.addEventListener('fetch', (event) => {
    const request = event.request;
    if (request.mode === 'navigate') {
      // A page of the site is loading: the queue starts now, not once the page's client asks
      // (`on_navigate`); the navigation itself is the browser's, untouched. A queue that cannot
      // start is told to the pages by `whenReady`, and to the page's client when it asks.
      event.waitUntil(withWasm((glue) => glue.on_navigate()).catch(() => undefined));
      return;
    }
    let candidate;
    try {
      candidate = current ? current.glue.should_intercept(request) : mightIntercept(request);
    } catch (_) {
      candidate = mightIntercept(request); // the instance broke: the mirror decides
    }
    if (!candidate) return; // not ours: the browser handles it untouched
    const response = withWasm((glue) =>
      glue.should_intercept(request) ? glue.on_fetch(event) : fetch(request));
    event.respondWith(response);
    event.waitUntil(response.then(() => withWasm((glue) => glue.settled()), () => undefined));
  });
})();
