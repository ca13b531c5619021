// The demo server's own endpoints: the control API under /__sluice/ (never rate-limited, never
// recorded) and, only to seed an empty store once, plain creates on /api/contacts.
//
// This is the demo's data, not the product's: the page reads it to draw what the server saw.

export const CONTACT_COUNT = 2000;

const FIRST = ['Ada', 'Grace', 'Alan', 'Katherine', 'Edsger', 'Barbara', 'Donald', 'Frances',
  'Ken', 'Margaret', 'Dennis', 'Radia', 'Tim', 'Hedy', 'Linus', 'Sophie', 'John', 'Annie',
  'Niklaus', 'Karen', 'Leslie', 'Shafi', 'Whitfield', 'Mary', 'Guido', 'Adele', 'Bjarne',
  'Jean', 'Vint', 'Evelyn', 'Rasmus', 'Joan'];
const LAST = ['Lovelace', 'Hopper', 'Turing', 'Johnson', 'Dijkstra', 'Liskov', 'Knuth', 'Allen',
  'Thompson', 'Hamilton', 'Ritchie', 'Perlman', 'Berners-Lee', 'Lamarr', 'Torvalds', 'Wilson',
  'McCarthy', 'Easley', 'Wirth', 'Spärck Jones', 'Lamport', 'Goldwasser', 'Diffie', 'Keller',
  'van Rossum', 'Goldberg', 'Stroustrup', 'Sammet', 'Cerf', 'Boyd', 'Lerdorf', 'Clarke'];
const COMPANIES = ['Analytical Engines', 'Harbor Freight Lines', 'Northwind Traders',
  'Blue Yonder Air', 'Contoso Pharmacy', 'Fabrikam Fibre', 'Tailspin Toys', 'Wide World Importers',
  'Proseware', 'Lamna Healthcare', 'Alpine Ski House', 'Margie’s Travel', 'Coho Winery',
  'Litware Labs', 'Trey Research', 'Adatum Corporation'];

/**
 * A contact's display fields, from its id. The server keeps what the demo changes (the owner);
 * names are made up here so that a seed can be sent in any order and still match its id.
 * A record that has its own name (one made by other code) keeps it.
 */
export function describe(record) {
  const id = record.id;
  const first = FIRST[(id - 1) % FIRST.length];
  // Every (first, last) pair differs for the first 1,024 ids; names cycle after that.
  const last = LAST[((id - 1) * 13 + Math.floor((id - 1) / FIRST.length)) % LAST.length];
  const company = COMPANIES[(id * 7) % COMPANIES.length];
  const email = `${first}.${last}`.toLowerCase().replace(/[^a-z.]+/g, '') + `.${id}@example.com`;
  return {
    id,
    name: typeof record.name === 'string' ? record.name : `${first} ${last}`,
    email: typeof record.email === 'string' ? record.email : email,
    company: typeof record.company === 'string' ? record.company : company,
    owner: typeof record.owner === 'string' ? record.owner : 'Unassigned',
  };
}

async function json(url, init) {
  const res = await fetch(url, { cache: 'no-store', ...init });
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = text; }
  if (!res.ok) {
    const message = (body && body.error) || `HTTP ${res.status}`;
    throw new Error(`${url}: ${message}`);
  }
  return body;
}

export const getConfig = () => json('/__sluice/config');
export const getStats = () => json('/__sluice/stats');
export const getContacts = () => json('/__sluice/contacts');
export const arrivalsSince = (seq) => json(`/__sluice/arrivals?since=${seq}`);

/** Changes the demo server's behaviour; `patch` uses the server's field names. */
export function setConfig(patch) {
  return json('/__sluice/config', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(patch),
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Makes sure the server holds at least CONTACT_COUNT contacts and returns them.
 *
 * The demo API has no bulk or seed endpoint and PATCH/PUT only change existing records, so an
 * empty store (a freshly started server) is filled with plain creates, sent directly (not
 * through Sluice, which would spend minutes of the demo's rate limit on setup). While they run
 * (some seconds: a browser spends a few ms on each request) the server's limit and latency
 * are lifted, then restored exactly. The setup arrivals are left out of the page's chart but
 * do stay in the server's own totals (/__sluice/stats) until it is reset. One tab at a time
 * (Web Locks); `onProgress(done, of)` reports along the way.
 */
export async function ensureContacts(onProgress = () => {}) {
  const run = async () => {
    let contacts = await getContacts();
    if (contacts.length >= CONTACT_COUNT) return { contacts, seeded: 0 };
    const missing = CONTACT_COUNT - contacts.length;
    const saved = await getConfig();
    const before = await getStats();
    await setConfig({ limit: 1_000_000, latencyMs: 0, jitterMs: 0, faultRate: 0, hangRate: 0 });
    let lastSeq = before.total;
    try {
      let next = contacts.length + 1;
      let done = 0;
      const worker = async () => {
        while (next <= CONTACT_COUNT) {
          const n = next++;
          const res = await fetch('/api/contacts', {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({ owner: 'Unassigned' }),
          });
          if (!res.ok) throw new Error(`seeding contact ${n}: HTTP ${res.status}`);
          done++;
          if (done % 50 === 0) onProgress(done, missing);
        }
      };
      // Browsers open six connections per host; a few more keep them all busy.
      await Promise.all(Array.from({ length: 8 }, worker));
      const after = await getStats();
      lastSeq = after.total;
      // Let the burst leave the server's sliding window before the real limit is back, so the
      // first real request is not refused for the setup's sake.
      await sleep(Math.min(saved.windowMs, 3000) + 50);
    } finally {
      const { limit, latencyMs, jitterMs, faultRate, hangRate } = saved;
      await setConfig({ limit, latencyMs, jitterMs, faultRate, hangRate });
    }
    contacts = await getContacts();
    return { contacts, seeded: missing, seedSeqs: [before.total + 1, lastSeq] };
  };
  if (navigator.locks && navigator.locks.request) {
    return navigator.locks.request('sluice-demo-seed', run);
  }
  return run();
}
