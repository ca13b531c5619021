// The demo's service worker: Sluice's worker entry from the package `sluice build` writes (the
// demo server serves that package under /pkg/), loaded as any app loads it.
//
// The configuration is read when the worker starts. Its engine part (budgets, retry, aging,
// retentionMs, maxBodyBytes) can be replaced at run time by a page (`configure`), until a
// deploy changes this script's. Relative prefixes ("/api/") are resolved against this worker's
// origin.
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
  // Where the package's files are served (the worker entry and its wasm).
  packageUrl: '/pkg/',
};

importScripts('/pkg/sluice-worker.js');
