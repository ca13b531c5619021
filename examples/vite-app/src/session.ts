// The app's sign-in, as far as Sluice sees it: a token from the API's sign-in endpoint, kept in
// IndexedDB, where the service worker's `credentials` function (public/sw.js) reads it before
// each request, also when no tab is open.

const DATABASE = 'contacts-app';
const STORE = 'session';

/** Signs in (the demo API's `POST /api/session` stands for a real sign-in) and keeps the token
 * where the worker reads it. Returns the token. */
export async function signIn(api: string): Promise<string> {
  const response = await fetch(`${api}/api/session`, { method: 'POST' });
  if (!response.ok) throw new Error(`sign-in failed: HTTP ${response.status}`);
  const { token } = (await response.json()) as { token: string };
  await keepToken(token);
  return token;
}

function keepToken(token: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(DATABASE, 1);
    open.onupgradeneeded = () => open.result.createObjectStore(STORE);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      const put = db.transaction(STORE, 'readwrite').objectStore(STORE).put(token, 'token');
      put.onsuccess = () => {
        db.close();
        resolve();
      };
      put.onerror = () => {
        db.close();
        reject(put.error);
      };
    };
  });
}
