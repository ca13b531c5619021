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
  // The signed-in token for every request, read before each one from where the page keeps it
  // (src/session.ts): jobs that waited offline go with today's token, not the one they were
  // queued with. After a 401 the budget waits until this gives a different one.
  credentials: async () => {
    const token = await readToken();
    return token ? { Authorization: `Bearer ${token}` } : undefined;
  },
};

function readToken() {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open('contacts-app', 1);
    open.onupgradeneeded = () => open.result.createObjectStore('session');
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      const get = db.transaction('session').objectStore('session').get('token');
      get.onsuccess = () => {
        db.close();
        resolve(get.result);
      };
      get.onerror = () => {
        db.close();
        reject(get.error);
      };
    };
  });
}

importScripts('/sluice/sluice-worker.js');
