// `<sluice-inspector>`: a drop-in view of a page's Sluice queue, shipped in the package as
// `sluice-inspector.js` (`import 'sluice/inspector'`; typed by `sluice-inspector.d.ts`).
//
//   import { inspect } from 'sluice/inspector';
//   inspect(sluice);                  // or: <sluice-inspector> in the page, then
//                                     // document.querySelector('sluice-inspector').sluice = sluice;
//
// Plain JavaScript beside the page client, not part of its wasm: a page that does not add the
// inspector pays nothing for it. What it costs a page that does:
// - Collapsed, it reads only the status broadcasts the client gets anyway (`subscribe`), for
//   its one-line summary.
// - Open, it asks for the job list (`jobs()`) when it opens and again when a jobs broadcast
//   says something changed, at most once per second (longer when a list takes long to
//   fetch), never on a timer of its own. The countdowns tick once a second only while it is
//   open and something waits for a time to come.
// Accessible: a `<details>` disclosure (keyboard and screen readers know it), real tables
// with captions and headers, buttons named after their job, a polite live region that says
// what needs attention and what an action did, text beside every colour; Escape closes it.
// Its shadow root keeps the page's CSS out; the page may place it with CSS on the element
// (`sluice-inspector { left: 1rem; right: auto; }`).

const TAG = 'sluice-inspector';
/** Rows of the job table: a bulk job may hold thousands; those needing a person come first. */
const MAX_JOB_ROWS = 100;
/** The least time between two job lists. */
const MIN_LIST_EVERY_MS = 1000;

const STATE_TEXT = {
  queued: 'Waiting',
  sending: 'Sending',
  'retry-wait': 'Waiting to retry',
  done: 'Done',
  failed: 'Failed',
  cancelled: 'Cancelled',
  conflict: 'Conflict',
};
/** Table order: what a person must resolve first, then what is moving, then what is over. */
const STATE_RANK = { conflict: 0, failed: 1, sending: 2, 'retry-wait': 3, queued: 4, done: 5, cancelled: 6 };
/** A shape per state, beside its word, so the state never rests on colour alone. */
const STATE_MARK = { queued: '○', sending: '◐', 'retry-wait': '↻', done: '✓', failed: '✕', cancelled: '–', conflict: '!' };
const WAITING = new Set(['queued', 'retry-wait']);
const RESOLVABLE = new Set(['failed', 'conflict']);

const numberFormat = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const int = (n) => numberFormat.format(n);

/** "45 s", "3 min 20 s", "1 h 12 min" (rounded up). */
function duration(ms) {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  if (h === 0 && m === 0) return `${s} s`;
  if (h === 0) return s === 0 ? `${m} min` : `${m} min ${s} s`;
  return m === 0 ? `${h} h` : `${h} h ${m} min`;
}

/** "10 per second", "50 per 10 s". */
function rate(w) {
  const named = { 1000: 'second', 60000: 'minute', 3600000: 'hour', 86400000: 'day' };
  return `${int(w.limit)} per ${named[w.lengthMs] || duration(w.lengthMs)}`;
}

/** Text for an instant to come: "in 4 s", or `past` once it has come. */
function until(at, now, past) {
  return at > now ? `in ${duration(at - now)}` : past;
}

/** One line of what the status says: "3 waiting, 1 sending, 2 failed" ("idle" when empty). */
function summarize(status) {
  if (!status) return 'connecting…';
  const c = status.counts;
  const parts = [];
  if (c.queued + c.retryWait > 0) parts.push(`${int(c.queued + c.retryWait)} waiting`);
  if (c.sending > 0) parts.push(`${int(c.sending)} sending`);
  if (c.failed > 0) parts.push(`${int(c.failed)} failed`);
  if (c.conflict > 0) parts.push(`${int(c.conflict)} ${c.conflict === 1 ? 'conflict' : 'conflicts'}`);
  if (status.offline) parts.push('offline');
  return parts.length ? parts.join(', ') : 'idle';
}

/** What needs a person, for the live region (said again only when it changes). */
function attention(status) {
  if (!status) return '';
  const c = status.counts;
  const parts = [];
  if (c.failed > 0) parts.push(`${int(c.failed)} failed`);
  if (c.conflict > 0) parts.push(`${int(c.conflict)} ${c.conflict === 1 ? 'conflict' : 'conflicts'} to resolve`);
  for (const b of status.budgets) {
    if (b.credentialsNeeded) parts.push(`budget ${b.name} waits for sign-in`);
    else if (b.trouble) parts.push(`budget ${b.name} held: ${b.trouble}`);
    else if (b.pausedUntil && b.pausedUntil > status.now) parts.push(`budget ${b.name} paused`);
  }
  if (status.offline) parts.push('offline');
  // Not "sending" or "idle": a busy queue would say so at every burst. The summary shows it.
  return parts.length === 0 ? 'Nothing needs attention.' : `${parts.join('; ')}.`;
}

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'text') e.textContent = v;
    else if (k === 'class') e.className = v;
    else if (k.startsWith('data-') || k.startsWith('aria-') || k === 'scope' || k === 'role') e.setAttribute(k, v);
    else e[k] = v;
  }
  e.append(...children);
  return e;
}

/** A cell whose text counts down to `at` (ticked while the panel is open). */
function countdownCell(at, now, past) {
  const td = el('td', { text: until(at, now, past) });
  if (at > now) {
    td.dataset.until = String(at);
    td.dataset.past = past;
  }
  return td;
}

const STYLE = `
:host { all: initial; position: fixed; right: 1rem; bottom: 1rem; z-index: 2147483000;
  font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1b1b; }
:host([hidden]) { display: none; }
aside { max-width: min(56rem, calc(100vw - 2rem)); }
details { background: #fff; border: 1px solid #4a4a4a; border-radius: 8px;
  box-shadow: 0 4px 16px rgb(0 0 0 / 0.25); }
summary { cursor: pointer; padding: 0.45rem 0.8rem; list-style-position: inside; }
summary:focus-visible, button:focus-visible, [tabindex]:focus-visible {
  outline: 3px solid #0b57d0; outline-offset: 2px; }
.name { font-weight: 700; }
.panel { max-height: min(70vh, 40rem); overflow: auto; padding: 0 0.8rem 0.8rem;
  border-top: 1px solid #4a4a4a; }
h2 { font-size: 1rem; margin: 0.8rem 0 0.3rem; }
p { margin: 0.4rem 0; }
table { border-collapse: collapse; width: 100%; }
caption { text-align: left; font-weight: 600; padding: 0.2rem 0; }
th, td { text-align: left; vertical-align: top; padding: 0.2rem 0.45rem;
  border-bottom: 1px solid #c4c4c4; }
thead th { background: #f1f1f1; }
tbody th { font-weight: 400; font-family: ui-monospace, monospace; font-size: 0.85em;
  overflow-wrap: break-word; }
.state[data-state="failed"], .state[data-state="conflict"] { color: #a50e0e; font-weight: 600; }
.state[data-state="done"] { color: #0d652d; }
.mark { display: inline-block; width: 1.1em; }
.why { display: block; color: #444; font-size: 0.85em; }
button { font: inherit; font-size: 0.9em; padding: 0.1rem 0.5rem; margin: 0 0.25rem 0.2rem 0;
  border: 1px solid #4a4a4a; border-radius: 4px; background: #fff; color: #1b1b1b; cursor: pointer; }
button:hover { background: #e8e8e8; }
progress { vertical-align: middle; }
.empty { color: #444; }
`;

const SHELL = `
<aside aria-label="Sluice queue inspector">
  <details>
    <summary><span class="name">Sluice:</span> <span class="summary"></span></summary>
    <div class="panel" role="region" aria-label="Sluice queue details" tabindex="0">
      <p class="live" role="status" aria-live="polite" aria-atomic="true"></p>
      <h2>Budgets</h2>
      <table class="budgets">
        <caption>Budgets: their limits and what the server last said</caption>
        <thead><tr><th scope="col">Budget</th><th scope="col">Limits</th><th scope="col">In flight</th>
          <th scope="col">Pending</th><th scope="col">Server said</th><th scope="col">Done in</th></tr></thead>
        <tbody></tbody>
      </table>
      <div class="groups-part">
        <h2>Groups</h2>
        <table class="groups">
          <caption>Groups and their progress</caption>
          <thead><tr><th scope="col">Group</th><th scope="col">Progress</th><th scope="col">Done in</th>
            <th scope="col">Actions</th></tr></thead>
          <tbody></tbody>
        </table>
      </div>
      <h2 class="jobs-title" tabindex="-1">Jobs</h2>
      <table class="jobs">
        <caption></caption>
        <thead><tr><th scope="col">Job</th><th scope="col">State</th><th scope="col">Lane</th>
          <th scope="col">Budget</th><th scope="col">Group</th><th scope="col">Attempts</th>
          <th scope="col">Next attempt</th><th scope="col">Actions</th></tr></thead>
        <tbody></tbody>
      </table>
    </div>
  </details>
</aside>`;

export class SluiceInspector extends HTMLElement {
  #sluice = null;
  #unsubscribe = null;
  #status = null;
  #jobs = null;
  /** What the live region last said of what needs attention (an action's result may follow). */
  #attention = '';
  /** What each table was last built from: a table is rebuilt only when that changes, so a
   * focused button is not replaced under a keyboard user at every status. */
  #built = { budgets: '', groups: '', jobs: null };
  #listing = false;
  #listAgain = false;
  #lastList = -Infinity;
  #listEvery = MIN_LIST_EVERY_MS;
  #listTimer = 0;
  #tickTimer = 0;
  #parts = null;

  constructor() {
    super();
    const root = this.attachShadow({ mode: 'open' });
    root.innerHTML = `<style>${STYLE}</style>${SHELL}`;
    const $ = (s) => root.querySelector(s);
    this.#parts = {
      details: $('details'),
      summary: $('.summary'),
      live: $('.live'),
      budgets: $('.budgets tbody'),
      groupsPart: $('.groups-part'),
      groups: $('.groups tbody'),
      jobsTitle: $('.jobs-title'),
      jobsCaption: $('.jobs caption'),
      jobs: $('.jobs tbody'),
    };
    this.#parts.details.addEventListener('toggle', () => this.#onToggle());
    this.#parts.details.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && this.open) {
        this.open = false;
        root.querySelector('summary').focus();
      }
    });
    // One listener for every button: each names its action and target.
    root.addEventListener('click', (e) => {
      const button = e.target.closest && e.target.closest('button[data-action]');
      if (button) this.#act(button.dataset.action, button.dataset.target);
    });
    this.#render();
  }

  /** The Sluice client whose queue this shows (what `Sluice.register` resolved with). */
  get sluice() {
    return this.#sluice;
  }

  set sluice(client) {
    if (client === this.#sluice) return;
    this.#stop();
    this.#sluice = client || null;
    this.#status = null;
    this.#jobs = null;
    if (this.isConnected) this.#start();
    this.#render();
  }

  /** Whether the panel is open. */
  get open() {
    return this.#parts.details.open;
  }

  set open(value) {
    this.#parts.details.open = !!value;
  }

  connectedCallback() {
    // A `sluice` set on the element before this module defined it is an own property that
    // hides the accessor: taken over here.
    if (Object.prototype.hasOwnProperty.call(this, 'sluice')) {
      const client = this.sluice;
      delete this.sluice;
      this.sluice = client;
      return;
    }
    this.#start();
  }

  disconnectedCallback() {
    this.#stop();
  }

  #start() {
    if (!this.#sluice || this.#unsubscribe) return;
    // A new listener gets the last status at once.
    this.#unsubscribe = this.#sluice.subscribe((message) => this.#onBroadcast(message));
    if (this.open) this.#list();
  }

  #stop() {
    if (this.#unsubscribe) this.#unsubscribe();
    this.#unsubscribe = null;
    clearTimeout(this.#listTimer);
    clearTimeout(this.#tickTimer);
    this.#listTimer = 0;
    this.#tickTimer = 0;
  }

  #onBroadcast(message) {
    if (message.type === 'status') {
      this.#status = message.status;
      this.#render();
    } else if (message.type === 'jobs' && this.open) {
      this.#list();
    }
  }

  #onToggle() {
    if (this.open) {
      this.#list();
      this.#render();
    } else {
      clearTimeout(this.#tickTimer);
      this.#tickTimer = 0;
      // Closed, it holds no list (thousands of jobs, perhaps) and shows none stale on opening.
      this.#jobs = null;
    }
  }

  /** Asks for the job list now, or once the last one is far enough behind. */
  #list() {
    if (!this.#sluice || !this.open) return;
    if (this.#listing) {
      this.#listAgain = true;
      return;
    }
    const wait = this.#lastList + this.#listEvery - Date.now();
    if (wait > 0) {
      if (!this.#listTimer) {
        this.#listTimer = setTimeout(() => {
          this.#listTimer = 0;
          this.#list();
        }, wait);
      }
      return;
    }
    this.#listing = true;
    this.#listAgain = false;
    const client = this.#sluice;
    const started = Date.now();
    client
      .jobs()
      .then((jobs) => {
        if (client !== this.#sluice || !this.open) return;
        this.#jobs = jobs;
        this.#render();
      })
      .catch((e) => this.#say(`The job list could not be read: ${e && e.message}`))
      .finally(() => {
        this.#listing = false;
        this.#lastList = Date.now();
        // A list that takes long (thousands of jobs) is asked for less often.
        this.#listEvery = Math.max(MIN_LIST_EVERY_MS, 4 * (this.#lastList - started));
        if (this.#listAgain) this.#list();
      });
  }

  async #act(action, target) {
    const client = this.#sluice;
    if (!client) return;
    const what = { cancel: 'Cancelled', retry: 'Sent again', dismiss: 'Discarded', 'cancel-group': 'Cancelled group' };
    const whose = action === 'cancel-group' ? target : `job ${target}`;
    try {
      if (action === 'cancel' || action === 'cancel-group') await client.cancel(target);
      else if (action === 'retry') await client.retry(target);
      else if (action === 'dismiss') await client.dismiss(target);
      else return;
      this.#say(`${what[action]}: ${whose}.`);
    } catch (e) {
      this.#say(`Could not ${action === 'dismiss' ? 'discard' : action.replace('-group', '')} ${whose}: ${e && e.message}`);
    }
    this.#list();
  }

  /** Puts `text` in the live region (read out politely while the panel is open). */
  #say(text) {
    this.#parts.live.textContent = text;
  }

  #render() {
    const p = this.#parts;
    const status = this.#status;
    p.summary.textContent = this.#sluice ? summarize(status) : 'not connected';
    if (!this.open) return;
    const needs = this.#sluice ? attention(status) : 'No Sluice client: set the element’s sluice property.';
    if (needs !== this.#attention) {
      this.#attention = needs;
      this.#say(needs);
    }
    const now = Date.now();
    // The focused button is found again by its key after the rows are rebuilt.
    const focused = this.shadowRoot.activeElement;
    const focusKey = focused && focused.dataset && focused.dataset.key;
    this.#renderBudgets(status, now);
    this.#renderGroups(status);
    this.#renderJobs(now);
    if (focusKey) {
      const again = this.shadowRoot.querySelector(`[data-key="${CSS.escape(focusKey)}"]`);
      if (again) again.focus();
      else if (!this.shadowRoot.activeElement) p.jobsTitle.focus();
    }
    this.#scheduleTick();
  }

  #renderBudgets(status, now) {
    const built = JSON.stringify(status && status.budgets);
    if (built === this.#built.budgets) return;
    this.#built.budgets = built;
    const rows = (status ? status.budgets : []).map((b) => {
      const said = [];
      if (b.credentialsNeeded) said.push(`waiting for sign-in: ${b.credentialsNeeded}`);
      if (b.trouble) said.push(`held: ${b.trouble}`);
      if (b.overdue) said.push(b.overdue);
      if (b.serverRemaining != null) said.push(`${int(b.serverRemaining)} left in its window`);
      const cell = el('td');
      cell.append(said.join('; '));
      if (b.pausedUntil && b.pausedUntil > now) {
        const pause = el('span', { class: 'why' });
        pause.append(`paused${b.pauseReason ? ` (${b.pauseReason})` : ''}, `);
        const left = el('span', { text: until(b.pausedUntil, now, 'ending now') });
        left.dataset.until = String(b.pausedUntil);
        left.dataset.past = 'ending now';
        pause.append(left);
        cell.append(pause);
      } else if (b.serverResetAt && b.serverResetAt > now) {
        const reset = el('span', { class: 'why' }, 'resets ');
        const at = el('span', { text: until(b.serverResetAt, now, 'now') });
        at.dataset.until = String(b.serverResetAt);
        at.dataset.past = 'now';
        reset.append(at);
        cell.append(reset);
      }
      if (!cell.textContent) cell.textContent = 'nothing yet';
      return el(
        'tr',
        {},
        el('th', { scope: 'row', text: b.name }),
        el('td', { text: b.windows.map(rate).join(', ') }),
        el('td', { text: `${int(b.inFlight)} of ${int(b.concurrency)}` }),
        el('td', { text: int(b.pending) }),
        cell,
        el('td', { text: b.etaMs == null ? 'held' : b.pending > 0 ? duration(b.etaMs) : '—' }),
      );
    });
    if (rows.length === 0) rows.push(el('tr', {}, el('td', { colSpan: 6, class: 'empty', text: 'No budgets yet.' })));
    this.#parts.budgets.replaceChildren(...rows);
  }

  #renderGroups(status) {
    const groups = status ? status.groups : [];
    const built = JSON.stringify(groups);
    if (built === this.#built.groups) return;
    this.#built.groups = built;
    this.#parts.groupsPart.hidden = groups.length === 0;
    this.#parts.groups.replaceChildren(
      ...groups.map((g) => {
        const finished = g.done + g.failed + g.cancelled + g.conflicts;
        const words = [`${int(g.done)} of ${int(g.total)} done`];
        if (g.failed) words.push(`${int(g.failed)} failed`);
        if (g.conflicts) words.push(`${int(g.conflicts)} in conflict`);
        if (g.cancelled) words.push(`${int(g.cancelled)} cancelled`);
        if (g.waiting) words.push(`${int(g.waiting)} waiting`);
        const progress = el('progress', { max: Math.max(1, g.total), value: finished });
        progress.setAttribute('aria-label', `Group ${g.id}: ${int(finished)} of ${int(g.total)} finished`);
        const actions = el('td');
        if (g.waiting > 0) actions.append(this.#button('cancel-group', g.id, 'Cancel', `Cancel the waiting jobs of group ${g.id}`));
        return el(
          'tr',
          {},
          el('th', { scope: 'row', text: g.id }),
          el('td', {}, progress, ' ', words.join(', '), g.warning ? el('span', { class: 'why', text: g.warning }) : ''),
          el('td', { text: g.etaMs == null ? 'held' : g.pending > 0 ? duration(g.etaMs) : '—' }),
          actions,
        );
      }),
    );
  }

  #renderJobs(now) {
    const p = this.#parts;
    if (this.#jobs === this.#built.jobs && this.#jobs) return;
    this.#built.jobs = this.#jobs;
    const only = (text) => el('tr', {}, el('td', { colSpan: 8, class: 'empty', text }));
    if (!this.#jobs) {
      p.jobsCaption.textContent = 'Jobs';
      p.jobs.replaceChildren(only('Loading…'));
      return;
    }
    const jobs = [...this.#jobs].sort((a, b) => STATE_RANK[a.state] - STATE_RANK[b.state]);
    const shown = jobs.slice(0, MAX_JOB_ROWS);
    p.jobsCaption.textContent =
      jobs.length === 0
        ? 'Jobs: none'
        : shown.length < jobs.length
          ? `Jobs: the first ${int(shown.length)} of ${int(jobs.length)}, those needing attention first`
          : `Jobs: ${int(jobs.length)}, those needing attention first`;
    p.jobs.replaceChildren(...(shown.length ? shown.map((job) => this.#jobRow(job, now)) : [only('No jobs.')]));
  }

  #jobRow(job, now) {
    const state = el('td', { class: 'state', 'data-state': job.state });
    state.append(el('span', { class: 'mark', 'aria-hidden': 'true', text: STATE_MARK[job.state] || '' }));
    state.append(STATE_TEXT[job.state] || job.state);
    const error = job.lastError;
    if (error && job.state !== 'done') {
      // The worker's words usually name the status already ("conflict: HTTP 409: ...").
      const named = !error.status || error.message.includes(`HTTP ${error.status}`);
      const words = named ? error.message : `HTTP ${error.status}: ${error.message}`;
      state.append(el('span', { class: 'why', text: words }));
    }
    // A job's own time to wait (a retry's backoff); past it, its budget decides. A job that
    // waits for others' answers (`after`) goes once they are done.
    const waitsFor = WAITING.has(job.state) ? job.waitingFor || [] : [];
    const next = waitsFor.length
      ? el('td', { text: `after ${waitsFor.length === 1 ? 'job' : 'jobs'} ${waitsFor.join(', ')}` })
      : WAITING.has(job.state)
        ? countdownCell(job.notBefore, now, 'as its budget allows')
        : el('td', { text: '—' });
    const actions = el('td');
    if (WAITING.has(job.state)) actions.append(this.#button('cancel', job.id, 'Cancel', `Cancel job ${job.id}`));
    if (RESOLVABLE.has(job.state)) {
      actions.append(this.#button('retry', job.id, 'Retry', `Retry job ${job.id}`));
      actions.append(this.#button('dismiss', job.id, 'Discard', `Discard job ${job.id}`));
    }
    const row = el(
      'tr',
      {},
      el('th', { scope: 'row', text: job.id }),
      state,
      el('td', { text: job.lane }),
      el('td', { text: job.budget }),
      el('td', { text: job.groupId || '—' }),
      el('td', { text: int(job.attempts) }),
      next,
      actions,
    );
    row.dataset.job = job.id;
    row.dataset.state = job.state;
    return row;
  }

  #button(action, target, text, name) {
    const b = el('button', { type: 'button', text, 'aria-label': name });
    b.dataset.action = action;
    b.dataset.target = target;
    b.dataset.key = `${action}:${target}`;
    return b;
  }

  /** Ticks the countdowns once a second while the panel is open and one still runs. */
  #scheduleTick() {
    clearTimeout(this.#tickTimer);
    this.#tickTimer = 0;
    if (!this.open || !this.shadowRoot.querySelector('[data-until]')) return;
    this.#tickTimer = setTimeout(() => {
      this.#tickTimer = 0;
      const now = Date.now();
      for (const e of this.shadowRoot.querySelectorAll('[data-until]')) {
        const at = Number(e.dataset.until);
        e.textContent = until(at, now, e.dataset.past);
        if (at <= now) delete e.dataset.until;
      }
      this.#scheduleTick();
    }, 1000 - (Date.now() % 1000) + 5);
  }
}

if (!customElements.get(TAG)) customElements.define(TAG, SluiceInspector);

/** Adds a `<sluice-inspector>` showing `sluice`'s queue to `parent` (the page's body) and
 * returns it. */
export function inspect(sluice, parent = document.body) {
  const inspector = document.createElement(TAG);
  inspector.sluice = sluice;
  parent.append(inspector);
  return inspector;
}
