// Sluice service worker: a thin shim around the Rust/wasm worker (crate `sluice-sw`).
//
// A classic worker (importScripts works in every browser; module workers do not yet).
// Listeners must be added synchronously while this script first runs, but wasm starts
// asynchronously: the first event starts it (`whenReady`) and every listener waits on it.
//
// Configuration. The engine part (budgets, retry, aging, retentionMs, maxBodyBytes) can be
// replaced at run time by a page (`configure` request); that is saved in IndexedDB and wins
// over this script's for as long as this script's engine configuration stays the same. A
// deploy that changes the configuration below wins over an older page-saved one.
// Relative prefixes ("/api/") are resolved against this worker's origin.
self.SLUICE_CONFIG = {
  budgets: [
    {
      name: 'demo',
      windows: [{ limit: 10, lengthMs: 1000 }],
      concurrency: 4,
      algorithm: 'sliding-log',
      matchPrefixes: ['/api/'],
    },
  ],
  // Done and cancelled jobs are forgotten this long after they finished.
  retentionMs: 60 * 60 * 1000,
  // Plain fetch() calls taken off the network path and queued, answered 202 {jobId}.
  // `header`: only requests carrying it (page code opts in per request, so ordinary calls to
  // the same API pass untouched). X-Sluice-Lane / -Key / -Budget / -Group / -Kind steer the job.
  intercept: [{ method: '*', prefix: '/api/', header: 'X-Sluice-Lane' }],
};

importScripts('/pkg/sluice_sw.js');

// The wasm is kept in Cache Storage: the browser caches the scripts a worker imports with
// its registration, but not what they fetch, so a worker woken while offline could not start.
// Install stores the wasm that matches the glue it imported; later starts read it from there.
const WASM_URL = '/pkg/sluice_sw_bg.wasm';
const WASM_CACHE = 'sluice-wasm';

async function storeWasm() {
  const response = await fetch(WASM_URL, { cache: 'no-cache' });
  if (!response.ok) throw new Error(`cannot load ${WASM_URL}: HTTP ${response.status}`);
  const cache = await caches.open(WASM_CACHE);
  await cache.put(WASM_URL, response.clone());
  return response;
}

async function cachedWasm() {
  const cache = await caches.open(WASM_CACHE);
  return (await cache.match(WASM_URL)) || storeWasm();
}

let started = false;
let ready = null;
// Starts the wasm once; a failed start (e.g. offline before anything was cached) is tried
// again by the next event instead of leaving this worker broken for good.
function whenReady(fromNetwork) {
  if (!ready) {
    ready = (fromNetwork ? storeWasm() : cachedWasm())
      .then((response) => wasm_bindgen({ module_or_path: response }))
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
  event.waitUntil(whenReady(true).then(() => wasm_bindgen.on_install(event)));
});

self.addEventListener('activate', (event) => {
  event.waitUntil(whenReady().then(() => wasm_bindgen.on_activate(event)));
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
