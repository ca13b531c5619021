// Placeholder shim until the real worker lands. Classic worker: importScripts works in every
// browser, module workers do not yet. Listeners must be added synchronously while this script
// first runs, so wasm initialisation is started here and awaited inside each event.
importScripts('/pkg/sluice_sw.js');
const ready = wasm_bindgen({ module_or_path: '/pkg/sluice_sw_bg.wasm' });

self.addEventListener('install', (event) => {
  event.waitUntil(ready.then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil(ready.then(() => self.clients.claim()));
});

self.addEventListener('message', (event) => {
  event.waitUntil(ready.then(() => {
    if (event.source) event.source.postMessage({ version: wasm_bindgen.version() });
  }));
});
