// The demo server's own endpoints: the control API under /__sluice/ (never rate-limited, never
// recorded), including the seed that fills an empty store.
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

/**
 * Makes sure the server holds at least CONTACT_COUNT contacts and returns them all.
 *
 * The demo server's seed endpoint creates the missing ones at once, unmetered and unrecorded:
 * setup is not what the demo is about, and creating 2,000 contacts one request at a time
 * took a first visit 13-29 s. Seeding is "at least", so two tabs seeding at once is harmless.
 */
export async function ensureContacts() {
  await json('/__sluice/seed', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ count: CONTACT_COUNT, fields: { owner: 'Unassigned' } }),
  });
  return getContacts();
}
