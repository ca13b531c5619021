// Sluice's worker entry: the listeners that run the Rust/wasm worker (crate `sluice-sw`) in an
// app's own service worker. `sluice build` writes it into the package as `sluice-worker.js`,
// after wasm-bindgen's glue (the global `wasm_bindgen`) and with the wasm's name and SHA-256
// filled in. An app's worker script sets its configuration and loads this with one line:
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
  const packageUrl = new URL(config.packageUrl || './', self.location.href);
  const wasmUrl = new URL(WASM_FILE, packageUrl).href;

  function hex(buffer) {
    return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, '0')).join('');
  }

  // The wasm is kept in Cache Storage: the browser caches the scripts a worker imports with its
  // registration, but not what they fetch, so a worker woken while offline could not start.
  // Install fetches it and checks it is the build the glue above was made for: a server or CDN
  // that serves mismatched files fails the install (the working version stays) instead of
  // running glue against the wrong wasm.
  async function storeWasm() {
    const response = await fetch(wasmUrl, { cache: 'no-cache' });
    if (!response.ok) throw new Error(`cannot load ${wasmUrl}: HTTP ${response.status}`);
    const bytes = await response.arrayBuffer();
    const sha256 = hex(await crypto.subtle.digest('SHA-256', bytes));
    if (sha256 !== WASM_SHA256) {
      throw new Error(
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

  let started = false;
  let ready = null;
  // Starts the wasm once; a failed start (e.g. offline before anything was cached) is tried
  // again by the next event instead of leaving this worker broken for good.
  function whenReady(fromNetwork) {
    if (!ready) {
      ready = (fromNetwork ? storeWasm() : cachedWasm())
        .then((wasm) => wasm_bindgen({ module_or_path: wasm }))
        .then(() => {
          wasm_bindgen.start(self.SLUICE_CONFIG);
          started = true;
        })
        .catch((error) => {
          ready = null;
          throw error;
        });
    }
    return ready;
  }

  // A broken build must never replace a working worker: install fails if the wasm does not load.
  self.addEventListener('install', (event) => {
    const installed = whenReady(true).then(() => wasm_bindgen.on_install(event));
    event.waitUntil(
      installed.catch((error) => {
        // The browser only says the install failed; this says why (in the worker's console).
        console.error('sluice: this version of the worker cannot start, so it does not install:', error);
        throw error;
      }),
    );
  });

  self.addEventListener('activate', (event) => {
    event.waitUntil(
      Promise.all([whenReady().then(() => wasm_bindgen.on_activate(event)), forgetOtherBuilds()]),
    );
  });

  // Replies and broadcasts are sent from inside; the promise resolves when the queue is idle
  // (at the latest after 90 s), keeping the worker alive while it works.
  self.addEventListener('message', (event) => {
    event.waitUntil(whenReady().then(() => wasm_bindgen.on_message(event)));
  });

  self.addEventListener('sync', (event) => {
    event.waitUntil(whenReady().then(() => wasm_bindgen.on_sync(event)));
  });

  // Whether to intercept must be decided synchronously. Once the wasm runs, Rust decides
  // (`should_intercept`). In the first milliseconds of a cold start, before it runs, this mirror
  // of the same rule (method, URL prefix, required header) picks candidates, and Rust confirms
  // once ready; a candidate it declines is fetched as it was.
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
    if (request.mode === 'navigate') return;
    const candidate = started ? wasm_bindgen.should_intercept(request) : mightIntercept(request);
    if (!candidate) return; // not ours: the browser handles it untouched
    const response = whenReady().then(() =>
      wasm_bindgen.should_intercept(request) ? wasm_bindgen.on_fetch(event) : fetch(request));
    event.respondWith(response);
    event.waitUntil(response.then(() => wasm_bindgen.settled(), () => undefined));
  });
})();
