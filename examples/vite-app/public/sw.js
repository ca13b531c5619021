// This app's service worker: Sluice runs here and sends every queued request for all tabs.
// The configuration is read when the worker starts; `sluice-worker.js` does the rest.
self.SLUICE_CONFIG = {
  budgets: [
    {
      // Jobs name it (`budget: 'contacts-api'`); the demo API admits 10 per second.
      name: 'contacts-api',
      windows: [{ limit: 10, lengthMs: 1000 }],
      concurrency: 4,
    },
  ],
  // The only origins jobs may go to: the demo API (`cargo run --release -- --api-port 8081`).
  allow: ['http://127.0.0.1:8081'],
  // Where the `sluice/vite` plugin (vite.config.ts) serves the package's worker files.
  packageUrl: '/sluice/',
};

importScripts('/sluice/sluice-worker.js');
