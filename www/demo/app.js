// The Sluice demo page: 2,000 contacts, a bulk owner change, single edits, a background
// refresh, a live banner, a chart of what the server saw, and the demo API's knobs.
//
// Where the truth lives:
// - the queue: the worker's `jobs` and `status` broadcasts (every tab gets the same ones);
// - contacts' saved values: the server (read once through the unmetered control API, then kept
//   current from done jobs' response bodies);
// - values still on their way: this page when it made the change, shared with other tabs and
//   the next visit through localStorage (a job update never carries the body it sends);
// - whether changes go through the batch endpoint: the switch, kept in localStorage for other
//   tabs and the next visit, and given to the worker in the budget's configuration.

import * as fmt from './format.js';
import * as server from './server.js';
import { ContactTable, CHIP_LABELS, nextFrame } from './table.js';
import { drawRequests, drawLanes } from './chart.js';

const $ = (id) => document.getElementById(id);
const BUDGET = 'demo';
const EDITS_KEY = 'sluice-demo:edits:v1';
const BATCH_KEY = 'sluice-demo:batch:v1';
/** The demo API's HubSpot-style batch update: contact PATCHes go together, 100 at most. */
const BATCH_RULE = {
  method: 'PATCH',
  url: '/api/contacts/:id',
  endpoint: '/api/contacts/batch/update',
  shape: 'inputs',
  maxItems: 100,
};
const PENDING = new Set(['queued', 'sending', 'retry-wait']);
const WAITING = new Set(['queued', 'retry-wait']);
const FINAL = new Set(['done', 'cancelled']);

// ----- state ---------------------------------------------------------------------------------

const st = {
  sluice: null,
  ready: false,
  failedToStart: null,
  status: null,
  contacts: new Map(), // id -> {id, name, email, company, base}
  order: [], // contact ids in table order
  jobs: new Map(), // job id -> latest JobUpdate
  rowJobs: new Map(), // contact id -> job ids in order (pending or failed ones)
  values: new Map(), // job id -> the owner it sets, when known
  temp: new Map(), // contact id -> owner, for changes not yet acknowledged by the worker
  outcome: new Map(), // contact id -> 'saved' | 'cancelled' | 'discarded' (last finished change)
  phase: 'starting',
  pause: null, // {until, reason} of the pause being shown
  run: null, // {ids: Set, announced: string|null}
  boot: { pending: 0, failed: 0, otherTabs: false },
  troubleClearedAt: 0,
  busy: false,
  batch: readBatch(), // the batch endpoint switch
  switching: false, // the worker is being given the switch's new state
};

const table = new ContactTable($('contacts-body'), viewOf, scheduleUi);

function contactOf(job) {
  const key = job && job.key;
  if (!key || !key.startsWith('contact:')) return null;
  const n = Number(key.slice(8));
  return Number.isInteger(n) ? n : null;
}

const isChange = (job) => contactOf(job) != null;

// ----- job updates ---------------------------------------------------------------------------

function rowList(n) {
  let list = st.rowJobs.get(n);
  if (!list) st.rowJobs.set(n, (list = []));
  return list;
}

function ownerFromOutcome(job) {
  const body = job.outcome && job.outcome.body;
  if (!body) return undefined;
  try {
    const record = JSON.parse(body);
    // A batch item's answer is HubSpot's result, `{id, properties}`.
    const fields = record && record.properties && typeof record.properties === 'object' ? record.properties : record;
    return fields && typeof fields.owner === 'string' ? fields.owner : undefined;
  } catch (_) {
    return undefined;
  }
}

/** Takes in one job's new state, from a broadcast, a listing or a local action. */
function applyUpdate(u, { live = true } = {}) {
  st.jobs.set(u.id, u);
  const n = contactOf(u);
  if (n == null) return;
  const list = rowList(n);
  const at = list.indexOf(u.id);
  if (PENDING.has(u.state) || u.state === 'failed') {
    if (at < 0) list.push(u.id);
    if (PENDING.has(u.state)) noteRun(u.id);
  } else if (FINAL.has(u.state)) {
    if (at >= 0) list.splice(at, 1);
    const c = st.contacts.get(n);
    // A listing at load also holds changes finished long ago, in no particular order: the
    // saved values read from the server then are newer than those.
    if (u.state === 'done' && (live || at >= 0)) {
      const owner = ownerFromOutcome(u) ?? st.values.get(u.id);
      if (c && owner !== undefined) c.base = owner;
    }
    if (live || at >= 0) st.outcome.set(n, u.state === 'done' ? 'saved' : 'cancelled');
    if (st.values.has(u.id)) {
      st.values.delete(u.id);
      edits.remove(u.id);
    }
  }
  table.mark(n);
}

function onBroadcast(message) {
  if (message.type === 'jobs') {
    for (const u of message.updates) applyUpdate(u);
    scheduleUi();
  } else if (message.type === 'status') {
    takeStatus(message.status);
  }
}

/** Takes in a status from a broadcast or a snapshot, unless a newer one is already here
 * (a snapshot's answer can arrive after a broadcast made later). */
function takeStatus(status) {
  if (st.status && status.now < st.status.now) return;
  st.status = status;
  lanes.sample(status);
  scheduleUi();
}

/** Attaches a job the worker accepted to its row, with the value it sets. */
function attach(n, id, owner) {
  st.values.set(id, owner);
  const known = st.jobs.get(id);
  if (known && FINAL.has(known.state)) {
    // Already over (a very fast answer, or folded into a job that just finished).
    applyUpdate(known);
    return;
  }
  const list = rowList(n);
  if (!list.includes(id)) list.push(id);
  if (!known) {
    st.jobs.set(id, { id, state: 'queued', key: `contact:${n}`, lane: 'bulk', groupId: null, lastError: null });
  }
  noteRun(id);
  table.mark(n);
}

function noteRun(id) {
  if (!st.run) st.run = { ids: new Set(), announced: null };
  st.run.ids.add(id);
}

// ----- a row's view --------------------------------------------------------------------------

function viewOf(n) {
  const c = st.contacts.get(n);
  const view = { owner: c ? c.base : '', ownerNote: '', pending: false, chip: 'none', chipText: '', title: '' };
  if (st.temp.has(n)) {
    view.owner = st.temp.get(n);
    view.pending = true;
    view.chip = 'waiting';
    view.chipText = CHIP_LABELS.waiting;
    return view;
  }
  const list = st.rowJobs.get(n) || [];
  let top = null;
  let value;
  for (let i = list.length - 1; i >= 0; i--) {
    const j = st.jobs.get(list[i]);
    if (!j || FINAL.has(j.state)) continue;
    if (!top) top = j;
    if (value === undefined && st.values.has(j.id)) value = st.values.get(j.id);
    if (top && value !== undefined) break;
  }
  if (top) {
    if (value !== undefined) view.owner = value;
    else view.ownerNote = 'new value set elsewhere';
    const why = fmt.reason(top.lastError);
    switch (top.state) {
      case 'queued':
        view.chip = 'waiting';
        view.chipText = CHIP_LABELS.waiting;
        view.pending = true;
        break;
      case 'retry-wait':
        view.chip = 'retrying';
        view.chipText = why ? `${CHIP_LABELS.retrying}: ${why}` : CHIP_LABELS.retrying;
        view.pending = true;
        break;
      case 'sending':
        view.chip = 'sending';
        view.chipText = CHIP_LABELS.sending;
        view.pending = true;
        break;
      case 'failed':
        view.chip = 'failed';
        view.chipText = why ? `${CHIP_LABELS.failed}: ${why}` : CHIP_LABELS.failed;
        view.ownerNote = 'not saved';
        break;
      default:
        break;
    }
    view.title = view.chipText;
    return view;
  }
  const last = st.outcome.get(n);
  if (last === 'saved') {
    view.chip = 'saved';
    view.chipText = CHIP_LABELS.saved;
  } else if (last === 'cancelled' || last === 'discarded') {
    view.chip = 'cancelled';
    view.chipText = last === 'cancelled' ? 'Cancelled, old value back' : 'Discarded, old value back';
    view.title = view.chipText;
  }
  return view;
}

// ----- counting ------------------------------------------------------------------------------

/** Changes (contact jobs) by state, across every tab; unacknowledged local ones count as waiting. */
function tally() {
  const t = { waiting: st.temp.size, sending: 0, failed: 0, pending: 0, failedJobs: [], waitingJobs: [] };
  for (const j of st.jobs.values()) {
    if (!isChange(j)) continue;
    if (WAITING.has(j.state)) {
      t.waiting++;
      t.waitingJobs.push(j);
    } else if (j.state === 'sending') t.sending++;
    else if (j.state === 'failed') {
      t.failed++;
      t.failedJobs.push(j);
    }
  }
  t.pending = t.waiting + t.sending;
  return t;
}

/** What the current run came to: every job seen pending since the queue was last idle, and
 * the rest of their groups (so a tab opened mid-way reports the whole bulk change). */
function runCounts(run = st.run) {
  const r = { total: 0, done: 0, failed: 0, cancelled: 0, pending: 0 };
  if (!run) return r;
  const ids = new Set(run.ids);
  const groups = new Set();
  for (const id of run.ids) {
    const g = st.jobs.get(id) && st.jobs.get(id).groupId;
    if (g) groups.add(g);
  }
  if (groups.size) for (const j of st.jobs.values()) if (j.groupId && groups.has(j.groupId)) ids.add(j.id);
  for (const id of ids) {
    const j = st.jobs.get(id);
    if (!j || !isChange(j)) continue;
    r.total++;
    if (j.state === 'done') r.done++;
    else if (j.state === 'failed') r.failed++;
    else if (j.state === 'cancelled') r.cancelled++;
    else r.pending++;
  }
  return r;
}

/** Rows by the chip they show (what a person sees). */
function shownCounts() {
  const c = { rows: 0, waiting: 0, sending: 0, saved: 0, failed: 0, cancelled: 0, pending: 0 };
  for (const id of st.order) {
    const v = table.shown(id);
    if (!v) continue;
    c.rows++;
    if (v.chip === 'waiting' || v.chip === 'retrying') c.waiting++;
    else if (v.chip === 'sending') c.sending++;
    else if (v.chip === 'saved') c.saved++;
    else if (v.chip === 'failed') c.failed++;
    else if (v.chip === 'cancelled') c.cancelled++;
  }
  c.pending = c.waiting + c.sending;
  return c;
}

// ----- pauses and phases ---------------------------------------------------------------------

/** The pause worth telling a person about: one the server asked for (a 429), or any hold of
 * two seconds or more. The engine's sub-second holds at a window's edge are routine pacing. */
function currentPause(status) {
  let best = null;
  const now = Date.now();
  for (const b of (status && status.budgets) || []) {
    if (!b.pausedUntil || b.pausedUntil <= now) continue;
    const askedFor = /\bHTTP\b|asked to wait/i.test(b.pauseReason || '');
    const same = st.pause && st.pause.until === b.pausedUntil;
    if (!askedFor && !same && b.pausedUntil - now < 2000) continue;
    if (!best || b.pausedUntil > best.until) best = { until: b.pausedUntil, reason: b.pauseReason || '' };
  }
  return best;
}

function decidePhase(t, status) {
  if (!st.ready) return st.failedToStart ? 'broken' : 'starting';
  if (status && status.offline && t.pending) return 'offline';
  const trouble = status && status.now > (st.troubleClearedAt || 0) && status.budgets.find((b) => b.trouble);
  if (trouble && (t.pending || t.failed)) return 'trouble';
  if (t.pending && currentPause(status)) return 'paused';
  if (t.pending) return 'sending';
  if (t.failed) return 'failed';
  return 'idle';
}

function pauseText(pause) {
  const left = fmt.seconds(pause.until - Date.now());
  const r = pause.reason || '';
  if (/HTTP 429/.test(r)) return `Paused for ${left}: the demo API answered 429 Too Many Requests.`;
  if (r) return `Paused for ${left}: ${r}.`;
  return `Paused for ${left}.`;
}

function summaryText(r) {
  const was = (n) => (n === 1 ? 'was' : 'were');
  if (!r.failed && !r.cancelled) {
    if (r.done === 1) return 'Your change was saved.';
    return `All ${fmt.count(r.done, 'change')} saved.`;
  }
  const parts = [];
  if (r.cancelled) {
    const one = r.cancelled === 1;
    parts.push(`${fmt.count(r.done, 'change')} ${was(r.done)} saved.`);
    parts.push(`${fmt.int(r.cancelled)} ${was(r.cancelled)} not sent and ${one ? 'is' : 'are'} back to ${one ? 'its old value' : 'their old values'}.`);
  } else if (r.done) {
    parts.push(`${fmt.count(r.done, 'change')} saved.`);
  }
  if (r.failed) parts.push(`${fmt.count(r.failed, 'change')} failed.`);
  if (r.pending) parts.push(`${fmt.int(r.pending)} ${was(r.pending)} already being sent and will finish.`);
  return parts.join(' ');
}

function onPhase(next, prev, t) {
  const status = st.status;
  const n = t.pending;
  const boot = prev === 'starting';
  switch (next) {
    case 'sending': {
      // A retry says so itself once the worker has taken the jobs back: the broadcast of the
      // first one's new state may land while the others are still on their way, and must not
      // announce a run of one.
      if (st.busy === 'retry') break;
      let text;
      if (boot && st.boot.otherTabs) text = `Another tab is sending ${fmt.count(n, 'change')}. This tab shows the same queue, live.`;
      else if (boot) text = `Sending ${fmt.count(n, 'change')} left from your last visit.`;
      else if (prev === 'paused') text = `Sending again: ${fmt.count(n, 'change')} left.`;
      else if (prev === 'offline') text = `Back online. Sending ${fmt.count(n, 'change')}.`;
      else if (prev === 'trouble') text = `Sending again: ${fmt.count(n, 'change')} left.`;
      else {
        const b = budgetStatus();
        const w = b && b.windows[0];
        text = w ? `Sending ${fmt.count(n, 'change')}, at most ${fmt.rate(w.limit, w.lengthMs)}.` : `Sending ${fmt.count(n, 'change')}.`;
      }
      say(text, 'progress');
      break;
    }
    case 'paused': {
      let text = pauseText(st.pause);
      if (boot && !st.boot.otherTabs) text += ` ${fmt.count(n, 'change')} left from your last visit will be sent after it.`;
      else text += ` ${fmt.count(n, 'change')} will be sent after it.`;
      say(text, 'warning');
      break;
    }
    case 'offline':
      say(`You are offline. ${fmt.count(n, 'change')} will be sent when the connection is back.`, 'warning');
      break;
    case 'trouble': {
      const b = status.budgets.find((x) => x.trouble);
      const last = /last error: ([^)]*)\)/.exec(b.trouble);
      const detail = last ? ` (last error: ${last[1]})` : '';
      // No counts here: status and job updates arrive on separate beats, and the failures may
      // not have reached this tab yet. The buttons and tiles below carry the numbers.
      say(`Sending stopped: the demo API keeps failing${detail}. Nothing more is sent until you retry the failed changes.`, 'error');
      break;
    }
    case 'failed':
    case 'idle': {
      // A cancel or a retry says what happened itself, once the worker answered, and moves
      // focus there; a retry's end is announced after that.
      if (st.busy === 'cancel' || st.busy === 'retry') break;
      const run = st.run;
      if (run && prev !== 'failed' && prev !== 'idle') {
        const r = runCounts(run);
        const text = summaryText(r);
        if (text !== run.announced) say(text, r.failed ? 'error' : r.cancelled ? 'info' : 'success');
        st.run = null;
      } else if (boot) {
        if (t.failed && !st.boot.otherTabs) say(`${fmt.count(t.failed, 'change')} from your last visit failed. Retry them, or discard them to keep the saved values.`, 'error');
        else if (t.failed) say(`${fmt.count(t.failed, 'change')} failed.`, 'error');
        else say(`Ready. Nothing is waiting: change one owner, or all ${fmt.int(st.order.length)} at once.`, 'info');
      }
      break;
    }
    case 'broken':
      say(`Sluice could not start, so changes cannot be sent: ${st.failedToStart}`, 'error');
      break;
    default:
      break;
  }
}

// ----- the banner ----------------------------------------------------------------------------

const banner = $('banner');

/** Changes the announced text (a polite live region): only on changes of state, never per tick. */
function say(text, tone = 'info', { focus = false } = {}) {
  if (banner.textContent !== text) banner.textContent = text;
  banner.dataset.tone = tone;
  if (focus) banner.focus();
}

// ----- the UI frame --------------------------------------------------------------------------

let uiCancel = null;
function scheduleUi() {
  if (uiCancel) return;
  uiCancel = nextFrame(() => {
    uiCancel = null;
    updateUi();
  });
}

let lastShown = null;

function updateUi() {
  if (uiCancel) {
    uiCancel();
    uiCancel = null;
  }
  table.render();
  const t = tally();
  const status = st.status;
  const pause = currentPause(status);
  if (pause) st.pause = pause;
  const next = decidePhase(t, status);
  if (next !== st.phase) {
    const prev = st.phase;
    st.phase = next;
    onPhase(next, prev, t);
  }
  if (next !== 'paused') st.pause = null;
  ticker.sync(next === 'paused');
  updateDetails(t);
  updateButtons(t);
  updateCounts();
  updateWarnings(t);
  api.showLimits();
}

function updateDetails(t) {
  const status = st.status;
  // ETA: the engine's estimate less the time since it was made, rounded honestly.
  const etaEl = $('eta');
  let eta = '';
  if (st.ready && t.pending) {
    if (st.phase === 'trouble') eta = 'Time left: unknown until sending resumes.';
    else if (st.phase === 'offline') eta = 'Time left: unknown while offline.';
    else if (status && status.etaMs != null && status.budgets.some((b) => b.pending > 0)) {
      // Only an estimate that already counts the pending work (not one from before it was
      // queued). The engine's assumes sending at the limit; when the browser or the API
      // cannot keep up with it, the pace seen so far says more, so the longer one is shown.
      const engineLeft = status.etaMs - Math.max(0, Date.now() - status.now);
      const left = Math.max(engineLeft, pace.timeLeft(t.pending) ?? 0);
      const r = fmt.roughly(left);
      eta = r ? `Time left: ${r}.` : 'Time left: a few seconds.';
    }
  }
  pace.note(t.pending);
  if (etaEl.textContent !== eta) etaEl.textContent = eta;
  etaEl.hidden = !eta;
  ticker.tick();

  const run = st.run ? runCounts(st.run) : null;
  const progress = $('progress');
  const label = $('progress-label');
  if (run && run.total > 1 && (t.pending || st.phase === 'paused')) {
    const finished = run.done + run.failed + run.cancelled;
    progress.max = run.total;
    progress.value = finished;
    const text = `${fmt.int(run.done)} of ${fmt.int(run.total)} saved` +
      (run.failed ? `, ${fmt.int(run.failed)} failed` : '') +
      (run.cancelled ? `, ${fmt.int(run.cancelled)} cancelled` : '');
    if (label.textContent !== text) label.textContent = text;
    $('progress-wrap').hidden = false;
  } else {
    $('progress-wrap').hidden = true;
  }
}

function updateButtons(t) {
  const cancel = $('cancel-waiting');
  const retry = $('retry-failed');
  const discard = $('discard-failed');
  const cancelText = `Cancel ${fmt.count(t.waiting, 'waiting change')}`;
  if (cancel.textContent !== cancelText) cancel.textContent = cancelText;
  cancel.hidden = !(st.ready && t.waiting > 0);
  // While an action runs, buttons say they are unavailable but keep keyboard focus
  // (a focused button that becomes `disabled` drops focus to the page).
  busyState(cancel, !!st.busy || st.temp.size > 0);
  const retryText = t.failed === 1 ? 'Retry the failed change' : `Retry ${fmt.int(t.failed)} failed changes`;
  if (retry.textContent !== retryText) retry.textContent = retryText;
  retry.hidden = !(st.ready && t.failed > 0);
  busyState(retry, !!st.busy);
  const discardText = t.failed === 1 ? 'Discard the failed change' : `Discard ${fmt.int(t.failed)} failed changes`;
  if (discard.textContent !== discardText) discard.textContent = discardText;
  discard.hidden = retry.hidden;
  busyState(discard, !!st.busy);
  $('banner-actions').hidden = cancel.hidden && retry.hidden;

  const apply = $('apply');
  const applyText = st.busy === 'apply' ? `Queuing ${fmt.count(st.order.length, 'change')}…` : `Apply to all ${fmt.int(st.order.length)} contacts`;
  if (apply.textContent !== applyText) apply.textContent = applyText;
  apply.disabled = !st.ready;
  busyState(apply, !!st.busy);
  $('refresh').disabled = !st.ready;
  showBatch(t);
}

function busyState(button, busy) {
  if (busy) button.setAttribute('aria-disabled', 'true');
  else button.removeAttribute('aria-disabled');
}

function updateCounts() {
  const c = shownCounts();
  lastShown = c;
  for (const k of ['waiting', 'sending', 'saved', 'failed', 'cancelled']) {
    const el = $(`count-${k}`);
    const text = fmt.int(c[k]);
    if (el.textContent !== text) el.textContent = text;
  }
}

function budgetStatus() {
  const s = st.status;
  return s && (s.budgets.find((b) => b.name === BUDGET) || s.budgets[0]);
}

function updateWarnings(t) {
  // Before applying: what the bulk change will take at the limit Sluice knows.
  const b = budgetStatus();
  const changes = st.order.length;
  const requests = st.batch ? Math.ceil(changes / BATCH_RULE.maxItems) : changes;
  const least = b && fmt.leastTime(requests, b.windows);
  const cap = $('capacity-warning');
  let text = '';
  if (least) {
    const w = least.window;
    const what = st.batch
      ? `${fmt.count(changes, 'change')} in ${fmt.count(requests, 'request')}`
      : fmt.count(changes, 'change');
    text = `Sluice's limit is ${fmt.rate(w.limit, w.lengthMs)}, so ${what} take at least ${fmt.duration(least.ms)}.`;
  }
  if (cap.dataset.text !== text) {
    cap.dataset.text = text;
    $('capacity-text').textContent = text;
  }
  cap.hidden = !text;
  // While it runs: the worker's own warnings (a missing budget, a full storage); its notes
  // (how long a job larger than a window needs) are shown by the capacity line above.
  const warnings = [...new Set(((st.status && st.status.warnings) || []))];
  const qw = $('queue-warning');
  const wtext = t.pending && warnings.length ? warnings.map((w) => w[0].toUpperCase() + w.slice(1)).join('. ') + '.' : '';
  if ($('queue-warning-text').textContent !== wtext) $('queue-warning-text').textContent = wtext;
  qw.hidden = !wtext;
}

// How fast pending changes are really going out: (time, pending) over the last few seconds.
const pace = {
  samples: [],
  SPAN_MS: 8000,
  note(pending) {
    const now = Date.now();
    let last = this.samples[this.samples.length - 1];
    // More work was queued (or all of it finished): the old pace says nothing about the new.
    if (!pending || (last && pending > last.pending)) {
      this.samples = [];
      last = undefined;
    }
    if (!pending) return;
    if (!last || now - last.t >= 250 || pending !== last.pending) this.samples.push({ t: now, pending });
    while (this.samples.length > 2 && now - this.samples[0].t > this.SPAN_MS) this.samples.shift();
  },
  /** Time for `pending` changes at the recent pace, once there are 3 s of it; else null. */
  timeLeft(pending) {
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    if (!first || last.t - first.t < 3000) return null;
    const perMs = (first.pending - last.pending) / (last.t - first.t);
    return perMs > 0 ? pending / perMs : null;
  },
};

// The countdown sits outside the live region and is computed from the pause's end each time.
const ticker = {
  timer: 0,
  sync(on) {
    if (on && !this.timer) this.timer = setInterval(() => { this.tick(); scheduleUi(); }, 250);
    if (!on && this.timer) {
      clearInterval(this.timer);
      this.timer = 0;
    }
    this.tick();
  },
  tick() {
    const el = $('countdown');
    let text = '';
    if (st.phase === 'paused' && st.pause) {
      const left = st.pause.until - Date.now();
      text = left > 0 ? `Resumes in ${fmt.duration(left)}.` : 'Resuming…';
    }
    if (el.textContent !== text) el.textContent = text;
    el.hidden = !text;
  },
};

// ----- shared values (other tabs, next visit) --------------------------------------------------

const edits = {
  adds: new Map(),
  removes: new Set(),
  timer: 0,
  read() {
    try {
      return JSON.parse(localStorage.getItem(EDITS_KEY) || '{}') || {};
    } catch (_) {
      return {};
    }
  },
  add(id, n, owner) {
    this.adds.set(id, [n, owner]);
    this.removes.delete(id);
    this.flushSoon();
  },
  remove(id) {
    this.adds.delete(id);
    this.removes.add(id);
    this.flushSoon();
  },
  flushSoon() {
    if (!this.timer) this.timer = setTimeout(() => this.flush(), 200);
  },
  flush() {
    clearTimeout(this.timer);
    this.timer = 0;
    if (!this.adds.size && !this.removes.size) return;
    const all = this.read();
    for (const [id, v] of this.adds) all[id] = v;
    for (const id of this.removes) delete all[id];
    this.adds.clear();
    this.removes.clear();
    try {
      localStorage.setItem(EDITS_KEY, JSON.stringify(all));
    } catch (_) {
      // Storage full or blocked: other tabs show "new value set elsewhere"; nothing is lost.
    }
  },
  /** Takes in values another tab (or an earlier visit) wrote. */
  merge(all) {
    for (const [id, [n, owner]] of Object.entries(all)) {
      if (!st.values.has(id)) {
        st.values.set(id, owner);
        const j = st.jobs.get(id);
        if (j && !FINAL.has(j.state)) table.mark(n);
      }
    }
  },
};

window.addEventListener('storage', (e) => {
  if (e.key !== EDITS_KEY || !e.newValue) return;
  try {
    edits.merge(JSON.parse(e.newValue));
    scheduleUi();
  } catch (_) { /* another version's format: ignore */ }
});
window.addEventListener('pagehide', () => edits.flush());

/** Whether another demo tab is open (then pending work is that tab's, not a last visit's). */
const tabs = new BroadcastChannel('sluice-demo');
tabs.onmessage = (e) => {
  if (e.data === 'hello') tabs.postMessage('here');
};
function otherTabsOpen(ms = 250) {
  return new Promise((resolve) => {
    const listen = (e) => {
      if (e.data === 'here') done(true);
    };
    const done = (v) => {
      tabs.removeEventListener('message', listen);
      resolve(v);
    };
    tabs.addEventListener('message', listen);
    tabs.postMessage('hello');
    setTimeout(() => done(false), ms);
  });
}

// ----- actions -------------------------------------------------------------------------------

async function applyOwner(owner) {
  owner = String(owner || '').trim();
  if (!owner) throw new Error('an owner is needed');
  if (!st.ready || st.busy) throw new Error('not ready');
  st.busy = 'apply';
  const ids = st.order.slice();
  for (const n of ids) {
    st.temp.set(n, owner);
    table.mark(n);
  }
  scheduleUi();
  const groupId = `owner-${Date.now().toString(36)}`;
  const jobs = ids.map((n) => ({
    url: `/api/contacts/${n}`,
    method: 'PATCH',
    kind: 'patch',
    lane: 'bulk',
    key: `contact:${n}`,
    body: ownerBody(owner),
  }));
  try {
    const result = await st.sluice.enqueueMany(jobs, groupId);
    ids.forEach((n, i) => {
      st.temp.delete(n);
      attach(n, result.ids[i], owner);
      edits.add(result.ids[i], n, owner);
    });
    for (const id of result.ids) {
      const j = st.jobs.get(id);
      if (j && !j.groupId) st.jobs.set(id, { ...j, groupId });
    }
    edits.flush();
    if (result.warning) showQueueWarning(result.warning);
    return result;
  } catch (e) {
    for (const n of ids) {
      st.temp.delete(n);
      table.mark(n);
    }
    say(`Nothing was queued: ${e.message}`, 'error', { focus: true });
    throw e;
  } finally {
    st.busy = false;
    scheduleUi();
  }
}

function showQueueWarning(text) {
  $('queue-warning-text').textContent = text.endsWith('.') ? text : `${text}.`;
  $('queue-warning').hidden = false;
}

async function editOwner(n, owner) {
  owner = String(owner || '').trim();
  if (!owner || !st.contacts.has(n)) throw new Error('no such contact or owner');
  st.temp.set(n, owner);
  table.mark(n);
  scheduleUi();
  try {
    const r = await st.sluice.enqueue({
      url: `/api/contacts/${n}`,
      method: 'PATCH',
      kind: 'patch',
      lane: 'interactive',
      key: `contact:${n}`,
      body: ownerBody(owner),
    });
    st.temp.delete(n);
    attach(n, r.id, owner);
    edits.add(r.id, n, owner);
    return { id: r.id, coalesced: r.coalesced, state: r.state };
  } catch (e) {
    st.temp.delete(n);
    table.mark(n);
    say(`The change to ${st.contacts.get(n).name} was not queued: ${e.message}`, 'error', { focus: true });
    throw e;
  } finally {
    scheduleUi();
  }
}

function waitUntil(pred, ms) {
  return new Promise((resolve) => {
    const deadline = Date.now() + ms;
    const check = () => {
      if (pred() || Date.now() > deadline) resolve(pred());
      else setTimeout(check, 50);
    };
    check();
  });
}

async function cancelWaiting() {
  const t = tally();
  if (!t.waitingJobs.length) return { cancelled: 0 };
  st.busy = 'cancel';
  // The run the message sums up, taken now: the broadcasts of the cancel may end it meanwhile.
  const run = st.run;
  scheduleUi();
  try {
    const groups = new Set();
    const singles = [];
    for (const j of t.waitingJobs) {
      if (j.groupId) groups.add(j.groupId);
      else singles.push(j.id);
    }
    const results = await Promise.allSettled([
      ...[...groups].map((g) => st.sluice.cancel(g)),
      ...singles.map((id) => st.sluice.cancel(id)),
    ]);
    const ids = results.flatMap((r) => (r.status === 'fulfilled' ? r.value : []));
    for (const id of ids) {
      const j = st.jobs.get(id);
      if (j && !FINAL.has(j.state)) applyUpdate({ ...j, state: 'cancelled' });
    }
    // Jobs already on the wire cannot be called back: let them land (briefly) so the message
    // says what really happened.
    await waitUntil(() => !run || runCounts(run).pending === 0, 3000);
    table.render();
    const counts = run && runCounts(run);
    const text = run ? summaryText(counts) : `${fmt.count(ids.length, 'change')} cancelled.`;
    if (run) run.announced = text;
    // Over, unless some of it is still landing: then the end is announced if it changes this.
    if (run && st.run === run && counts.pending === 0) st.run = null;
    say(text, 'info', { focus: true });
    return { cancelled: ids.length, text };
  } finally {
    st.busy = false;
    scheduleUi();
  }
}

async function retryFailed() {
  const { failedJobs } = tally();
  if (!failedJobs.length) return { retried: 0 };
  st.busy = 'retry';
  // A new run: the retried jobs (and, through their groups, the rest of their bulk change).
  st.run = null;
  // Sending again, announced below once the worker has taken them back: the broadcasts of
  // their new state, which may come first, must not announce it on their own.
  st.phase = 'sending';
  scheduleUi();
  try {
    const results = await Promise.allSettled(failedJobs.map((j) => st.sluice.retry(j.id)));
    let ok = 0;
    results.forEach((r, i) => {
      if (r.status !== 'fulfilled') return;
      ok++;
      const j = st.jobs.get(failedJobs[i].id) || failedJobs[i];
      noteRun(j.id);
      // Unless a broadcast already told what became of it.
      if (j.state === 'failed') applyUpdate({ ...j, state: 'queued', lastError: null });
    });
    // A retry lifts the budget's hold; status broadcasts from before it may still say trouble.
    st.troubleClearedAt = Date.now();
    const text = ok === 1 ? 'Retrying the failed change.' : `Retrying ${fmt.int(ok)} failed changes.`;
    // Even if the retried changes are already saved: their end is announced after this.
    if (ok) st.phase = 'sending';
    say(ok ? text : 'The failed changes could not be retried.', ok ? 'progress' : 'error', { focus: true });
    return { retried: ok };
  } finally {
    st.busy = false;
    scheduleUi();
  }
}

async function discardFailed() {
  const { failedJobs } = tally();
  if (!failedJobs.length) return { discarded: 0 };
  st.busy = 'discard';
  scheduleUi();
  try {
    const results = await Promise.allSettled(failedJobs.map((j) => st.sluice.dismiss(j.id)));
    let ok = 0;
    results.forEach((r, i) => {
      if (r.status !== 'fulfilled') return;
      ok++;
      const j = failedJobs[i];
      st.jobs.delete(j.id);
      const n = contactOf(j);
      const list = st.rowJobs.get(n) || [];
      const at = list.indexOf(j.id);
      if (at >= 0) list.splice(at, 1);
      st.values.delete(j.id);
      edits.remove(j.id);
      st.outcome.set(n, 'discarded');
      table.mark(n);
    });
    table.render();
    const text = ok === 1
      ? 'Discarded the failed change. That contact shows its saved value again.'
      : `Discarded ${fmt.int(ok)} failed changes. Those contacts show their saved values again.`;
    st.phase = tally().failed ? 'failed' : 'idle';
    say(text, 'info', { focus: true });
    return { discarded: ok };
  } finally {
    st.busy = false;
    scheduleUi();
  }
}

// Background refresh: reads go in the background lane, behind every change.
const refresh = {
  timer: 0,
  inFlight: 0,
  async run() {
    if (!st.ready) return 0;
    const ids = table.visibleIds($('table-wrap'));
    const note = $('refresh-note');
    note.textContent = `Reading ${fmt.count(ids.length, 'visible row')} in the background lane…`;
    this.inFlight += ids.length;
    let read = 0;
    await Promise.all(ids.map(async (n) => {
      try {
        const job = await st.sluice.enqueue({
          url: `/api/contacts/${n}`,
          method: 'GET',
          lane: 'background',
          key: `read:contact:${n}`,
        });
        const outcome = await job.done;
        const record = JSON.parse(outcome.body);
        const c = st.contacts.get(n);
        const busy = (st.rowJobs.get(n) || []).some((id) => !FINAL.has((st.jobs.get(id) || {}).state));
        if (c && !busy && !st.temp.has(n) && typeof record.owner === 'string') {
          c.base = record.owner;
          table.mark(n);
        }
        read++;
      } catch (_) {
        // A read that failed changes nothing shown.
      } finally {
        this.inFlight--;
      }
    }));
    note.textContent = `Read ${fmt.count(read, 'row')} at ${fmt.clock()} (background lane).`;
    return read;
  },
  auto(on) {
    clearInterval(this.timer);
    this.timer = on ? setInterval(() => { if (!document.hidden) this.run(); }, 30_000) : 0;
  },
};

// ----- the chart of what the server saw -------------------------------------------------------

const chart = {
  buckets: new Map(),
  lastSeq: 0,
  offset: null, // page clock minus server clock (ms), estimated from arrivals
  total: 0,
  timer: 0,
  serverConfig: null,
  async start() {
    try {
      // Recent history too (a reload mid-run).
      const stats = await server.getStats();
      showTraffic(stats);
      this.lastSeq = Math.max(0, stats.total - 1500);
      await this.poll();
    } catch (_) { /* the chart is a nice-to-have */ }
    this.timer = setInterval(() => { if (!document.hidden) this.poll(); }, 1000);
    setInterval(() => { if (!document.hidden) this.draw(); }, 250);
    setInterval(() => { if (!document.hidden) this.checkReset(); }, 5000);
  },
  async poll() {
    let list;
    try {
      list = await server.arrivalsSince(this.lastSeq);
    } catch (_) {
      return;
    }
    // New arrivals: the requests and changes saved moved on too.
    if (list.length) server.getStats().then(showTraffic, () => {});
    const now = Date.now();
    for (const a of list) {
      this.lastSeq = a.seq;
      const offset = now - a.atMs;
      if (this.offset == null || offset < this.offset) this.offset = offset;
      const s = Math.floor(a.atMs / 1000);
      let b = this.buckets.get(s);
      if (!b) this.buckets.set(s, (b = { ok: 0, limited: 0, failed: 0 }));
      if (a.status === 429) b.limited++;
      else if (a.status >= 500 || a.outcome === 'fault') b.failed++;
      else b.ok++;
    }
    if (this.offset != null) {
      const oldest = Math.floor((now - this.offset) / 1000) - 120;
      for (const s of this.buckets.keys()) if (s < oldest) this.buckets.delete(s);
    }
    this.draw();
    this.summarize();
  },
  async checkReset() {
    try {
      const stats = await server.getStats();
      showTraffic(stats);
      if (stats.total < this.lastSeq) {
        this.buckets.clear();
        this.history.clear();
        this.since = null;
        this.lastSeq = 0;
        this.offset = null;
      }
    } catch (_) { /* next time */ }
  },
  nowS() {
    return this.offset == null ? 0 : (Date.now() - this.offset) / 1000;
  },
  limits() {
    const cfg = api.server;
    const limitPerS = cfg ? (cfg.limit * 1000) / cfg.windowMs : 0;
    const b = budgetStatus();
    const tight = b && b.windows.slice().sort((x, y) => x.limit / x.lengthMs - y.limit / y.lengthMs)[0];
    const sluicePerS = tight ? (tight.limit * 1000) / tight.lengthMs : 0;
    return { limitPerS, sluicePerS };
  },
  history: new Map(), // server second -> the limits in force then
  draw() {
    const canvas = $('chart');
    if (!canvas.clientWidth) return;
    const limits = this.limits();
    if (this.offset != null) {
      const sec = Math.floor(this.nowS());
      if (this.since == null) this.since = sec;
      this.history.set(sec, limits);
      for (const k of this.history.keys()) if (k < sec - 120) this.history.delete(k);
    }
    drawRequests(canvas, { buckets: this.buckets, nowS: this.nowS(), history: this.history, since: this.since ?? -Infinity, ...limits });
    drawLanes($('lanes-chart'), { samples: lanes.samples, now: Date.now() });
  },
  summarize() {
    const end = Math.floor(this.nowS());
    let total = 0;
    let limited = 0;
    let failed = 0;
    let peak = 0;
    for (let s = end - 59; s <= end; s++) {
      const b = this.buckets.get(s);
      if (!b) continue;
      total += b.ok + b.limited + b.failed;
      limited += b.limited;
      failed += b.failed;
      peak = Math.max(peak, b.ok + b.limited + b.failed);
    }
    this.last = { total, limited, failed, peak };
    const cfg = api.server;
    const limit = cfg ? ` The server allows ${fmt.rate(cfg.limit, cfg.windowMs)}.` : '';
    const text = total
      ? `Last 60 seconds: ${fmt.count(total, 'request')}, at most ${fmt.int(peak)} in one second.${limit} ` +
        `${fmt.int(limited)} answered 429 Too Many Requests` + (failed ? `, ${fmt.int(failed)} failed with a server error.` : '.')
      : `No requests in the last 60 seconds.${limit}`;
    const el = $('chart-summary');
    if (el.textContent !== text) el.textContent = text;
  },
};

// Per-lane waits from the status broadcasts.
const lanes = {
  samples: [],
  lastAt: 0,
  sample(status) {
    const now = Date.now();
    const values = {};
    for (const l of status.lanes) values[l.lane] = l.waitP50Ms;
    if (now - this.lastAt >= 500) {
      this.samples.push({ t: now, lanes: values });
      this.lastAt = now;
      const cutoff = now - 70_000;
      while (this.samples.length && this.samples[0].t < cutoff) this.samples.shift();
    }
    for (const l of status.lanes) {
      const row = document.querySelector(`#lanes-table tr[data-lane="${l.lane}"]`);
      if (!row) continue;
      const cells = row.cells;
      const texts = [fmt.int(l.waiting), fmt.wait(l.waitP50Ms), fmt.wait(l.waitP95Ms)];
      texts.forEach((text, i) => {
        if (cells[i + 1].textContent !== text) cells[i + 1].textContent = text;
      });
    }
  },
};

// ----- demo API controls ---------------------------------------------------------------------

const api = {
  server: null,
  async load() {
    try {
      this.server = await server.getConfig();
      this.fill(this.server);
    } catch (e) {
      $('api-result').textContent = `Could not read the demo API's settings: ${e.message}`;
    }
    setInterval(() => {
      if (!document.hidden) this.refresh();
    }, 3000);
  },
  /** Reads the server's settings again (another tab may have changed them). */
  async refresh() {
    try {
      this.server = await server.getConfig();
      this.showLimits();
    } catch (_) { /* next time */ }
  },
  fill(cfg) {
    const form = $('api-form');
    form.limit.value = cfg.limit;
    const windowSelect = form.windowMs;
    if (![...windowSelect.options].some((o) => Number(o.value) === cfg.windowMs)) {
      windowSelect.add(new Option(fmt.duration(cfg.windowMs), String(cfg.windowMs)));
    }
    windowSelect.value = String(cfg.windowMs);
    form.latencyMs.value = cfg.latencyMs;
    form.faultRate.value = Math.round(cfg.faultRate * 1000) / 10;
    form.retryAfterForm.value = cfg.retryAfterForm;
    form.headers.value = cfg.headers;
    this.showLimits();
  },
  read() {
    const form = $('api-form');
    return {
      limit: Math.max(1, Math.round(Number(form.limit.value))),
      windowMs: Number(form.windowMs.value),
      latencyMs: Math.max(0, Math.round(Number(form.latencyMs.value))),
      faultRate: Math.min(100, Math.max(0, Number(form.faultRate.value))) / 100,
      retryAfterForm: form.retryAfterForm.value,
      headers: form.headers.value,
    };
  },
  /** Changes the demo server; with `tell`, also gives Sluice's budget the same limit. */
  async apply(patch, { tell = true } = {}) {
    const cfg = await server.setConfig(patch);
    this.server = cfg;
    let told = false;
    if (tell && st.sluice) {
      await configureSluice([{ limit: cfg.limit, lengthMs: cfg.windowMs }]);
      told = true;
    }
    this.showLimits();
    chart.draw();
    return { config: cfg, told };
  },
  showLimits() {
    const cfg = this.server;
    const b = budgetStatus();
    const serverText = cfg ? fmt.rate(cfg.limit, cfg.windowMs) : '…';
    const sluiceText = b ? b.windows.map((w) => fmt.rate(w.limit, w.lengthMs)).join(' and ') : '…';
    if ($('limit-server').textContent !== serverText) $('limit-server').textContent = serverText;
    if ($('limit-sluice').textContent !== sluiceText) $('limit-sluice').textContent = sluiceText;
    const mismatch = !!(cfg && b && !b.windows.some((w) => w.limit === cfg.limit && w.lengthMs === cfg.windowMs));
    $('limit-mismatch').hidden = !mismatch;
  },
};

// ----- Sluice's configuration and the batch endpoint switch ---------------------------------

/** The demo's engine configuration: the one place its budget is built, for a new limit and for
 * the batch endpoint switch alike. */
function engineConfig({ windows, concurrency }) {
  const budget = {
    name: BUDGET,
    windows,
    concurrency,
    algorithm: 'sliding-log',
    matchPrefixes: ['/api/'],
  };
  if (st.batch) budget.batches = [{ ...BATCH_RULE }];
  return { budgets: [budget], retentionMs: 60 * 60 * 1000 };
}

/** Configures Sluice's budget with these windows (by default the ones it has now) and the
 * switch's state, and takes its status at once: the banner quotes the limit. */
async function configureSluice(windows) {
  const b = budgetStatus();
  const now = b && b.windows.map(({ limit, lengthMs }) => ({ limit, lengthMs }));
  const server = api.server && [{ limit: api.server.limit, lengthMs: api.server.windowMs }];
  await st.sluice.configure(engineConfig({
    windows: windows || now || server || [{ limit: 10, lengthMs: 1000 }],
    concurrency: (b && b.concurrency) || 4,
  }));
  takeStatus(await st.sluice.snapshot());
}

function readBatch() {
  try {
    return localStorage.getItem(BATCH_KEY) === 'on';
  } catch (_) {
    return false;
  }
}

/** The body of a PATCH that sets a contact's owner: HubSpot's `{properties}` when it may go in
 * a batch (the batch endpoint takes nothing else; the single PATCH takes both). */
function ownerBody(owner) {
  return st.batch ? { properties: { owner } } : { owner };
}

/** Changes queued or failed were built for the way they were to be sent: a change of the
 * switch waits until none is left. */
function batchLocked(t = tally()) {
  return !st.ready || !!st.busy || st.switching || t.pending > 0 || t.failed > 0;
}

/** Turns the batch endpoint on or off: the worker's budget first, then the kept setting. */
async function setBatching(on) {
  on = !!on;
  if (on === st.batch) return { batch: on };
  if (batchLocked()) throw new Error('changes are waiting or failed');
  const was = st.batch;
  st.batch = on;
  st.switching = true;
  scheduleUi();
  try {
    await configureSluice();
    try {
      localStorage.setItem(BATCH_KEY, on ? 'on' : 'off');
    } catch (_) { /* storage blocked: on for this visit only */ }
  } catch (e) {
    st.batch = was;
    throw e;
  } finally {
    st.switching = false;
    showBatch();
    scheduleUi();
  }
  return { batch: on };
}

/** The switch, its lock and the bulk hint as the state says. */
function showBatch(t) {
  const input = $('use-batch');
  if (input.checked !== st.batch) input.checked = st.batch;
  const locked = batchLocked(t);
  if (locked) input.setAttribute('aria-disabled', 'true');
  else input.removeAttribute('aria-disabled');
  const how = st.batch
    ? 'One bulk change: up to 100 contacts in each request to the batch endpoint, sent in the bulk lane.'
    : 'One bulk change: a PATCH per contact, sent in the bulk lane.';
  if ($('bulk-how').textContent !== how) $('bulk-how').textContent = how;
}

// Another tab switched: its worker configuration is this tab's too.
window.addEventListener('storage', (e) => {
  if (e.key !== BATCH_KEY) return;
  st.batch = readBatch();
  showBatch();
});

/** Requests the demo API received against the changes it saved, from its stats (since it
 * started or was reset). */
function showTraffic(stats) {
  const changes = stats.patchesApplied ?? 0;
  const text = `${fmt.count(stats.total, 'request')} · ${fmt.count(changes, 'change')} saved`;
  if ($('traffic').textContent !== text) $('traffic').textContent = text;
}

function describeApi(cfg, told) {
  const parts = [`The demo API now allows ${fmt.rate(cfg.limit, cfg.windowMs)}`];
  if (cfg.latencyMs) parts.push(`answers after ${fmt.int(cfg.latencyMs)} ms`);
  if (cfg.faultRate) parts.push(`fails ${Math.round(cfg.faultRate * 1000) / 10}% of requests`);
  let text = parts.join(', ') + '.';
  text += told
    ? ' Sluice was told the new limit.'
    : ' Sluice was not told: it keeps its own limit until the server pushes back.';
  return text;
}

// ----- wiring --------------------------------------------------------------------------------

function wire() {
  $('bulk-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (st.busy) return;
    applyOwner($('owner-input').value).catch(() => {});
  });
  const unlessBusy = (fn) => (e) => {
    if (e.currentTarget.getAttribute('aria-disabled') === 'true') return;
    fn().catch((err) => say(`That did not work: ${err.message}`, 'error', { focus: true }));
  };
  $('cancel-waiting').addEventListener('click', unlessBusy(cancelWaiting));
  $('retry-failed').addEventListener('click', unlessBusy(retryFailed));
  $('discard-failed').addEventListener('click', unlessBusy(discardFailed));
  $('refresh').addEventListener('click', () => refresh.run());
  const batchSwitch = $('use-batch');
  batchSwitch.checked = st.batch;
  batchSwitch.addEventListener('click', (e) => {
    // Unavailable, not disabled: it keeps keyboard focus, and the hint says why.
    if (batchSwitch.getAttribute('aria-disabled') === 'true') e.preventDefault();
  });
  batchSwitch.addEventListener('change', () => {
    setBatching(batchSwitch.checked).catch((err) => {
      showBatch();
      say(`The batch endpoint was not switched: ${err.message}`, 'error', { focus: true });
    });
  });
  $('auto-refresh').addEventListener('change', (e) => refresh.auto(e.target.checked));

  const dialog = $('edit-dialog');
  const editForm = $('edit-form');
  let editing = null;
  $('contacts-body').addEventListener('click', (e) => {
    const btn = e.target.closest('[data-edit]');
    if (!btn || !st.ready) return;
    const n = Number(btn.dataset.edit);
    const c = st.contacts.get(n);
    editing = n;
    $('edit-title').textContent = `Change the owner of ${c.name}`;
    $('edit-desc').textContent = `Contact ${n} at ${c.company}. A single edit goes in the interactive lane, ahead of any bulk change.`;
    $('edit-owner').value = viewOf(n).owner;
    dialog.showModal();
    $('edit-owner').select();
  });
  editForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const owner = $('edit-owner').value.trim();
    if (!owner) return;
    const n = editing;
    dialog.close();
    editOwner(n, owner).catch(() => {});
  });
  $('edit-cancel').addEventListener('click', () => dialog.close());
  dialog.addEventListener('close', () => {
    const btn = editing != null && table.button(editing);
    if (btn) table.focusButton(btn);
    editing = null;
  });

  $('api-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const out = $('api-result');
    try {
      const tell = $('tell-sluice').checked;
      const { config, told } = await api.apply(api.read(), { tell });
      out.textContent = describeApi(config, told);
    } catch (err) {
      out.textContent = `The settings were not changed: ${err.message}`;
    }
  });
  $('provoke').addEventListener('click', async () => {
    const out = $('api-result');
    try {
      // A longer window than Sluice knows about: it spends the window's budget in a couple of
      // seconds, the server answers 429 with a Retry-After of several seconds, and Sluice pauses.
      // Without rate-limit headers Sluice cannot see the quota run out, so it meets a 429.
      const limit = 20;
      const windowMs = 10_000;
      $('tell-sluice').checked = false;
      const { config } = await api.apply({ limit, windowMs, headers: 'none' }, { tell: false });
      api.fill(config);
      out.textContent = `The demo API now allows only ${fmt.rate(limit, windowMs)}, sends no rate-limit headers, and Sluice was not told. ` +
        (tally().pending ? 'Watch for the 429, the pause and the recovery.' : 'Start a bulk change to see the 429, the pause and the recovery.');
    } catch (err) {
      out.textContent = `The settings were not changed: ${err.message}`;
    }
  });
  $('restore').addEventListener('click', async () => {
    const out = $('api-result');
    try {
      $('tell-sluice').checked = true;
      const { config, told } = await api.apply({
        limit: 10, windowMs: 1000, latencyMs: 300, jitterMs: 0, arrivalJitterMs: 0,
        faultRate: 0, hangRate: 0, retryAfterForm: 'delta', headers: 'xrate',
        batchItemFailRate: 0, batchSubRateLimited: 0,
      }, { tell: true });
      api.fill(config);
      out.textContent = `Defaults restored. ${describeApi(config, told)}`;
    } catch (err) {
      out.textContent = `The settings were not changed: ${err.message}`;
    }
  });

  window.addEventListener('beforeunload', (e) => {
    // Only work a person is waiting for: interactive and bulk changes not yet sent, as this
    // tab knows them (its own, at once) or the worker last said (any tab's). Background reads
    // are not worth a question.
    const lanesNow = (st.status && st.status.lanes) || [];
    const waiting = lanesNow.filter((l) => l.lane !== 'background').reduce((a, l) => a + l.waiting, 0);
    if (waiting > 0 || tally().waiting > 0) {
      e.preventDefault();
      e.returnValue = '';
    }
  });
  window.addEventListener('online', scheduleUi);
  window.addEventListener('offline', scheduleUi);
  new ResizeObserver(() => chart.draw()).observe($('chart'));
}

async function startSluice() {
  // Loaded here rather than imported at the top, so that a missing or broken client bundle
  // leaves the rest of the page working and the banner saying why.
  const client = await import('/pkg/sluice_client.js');
  if (typeof client.default !== 'function' || !client.Sluice) {
    throw new Error('/pkg/sluice_client.js is not the Sluice client (was it built with SLUICE_SKIP_WASM?)');
  }
  // The path is explicit: the bindings are generated without a default module path.
  await client.default({ module_or_path: '/pkg/sluice_client_bg.wasm' });
  const sluice = await client.Sluice.register('/sw.js');
  performance.mark('demo:registered');
  st.sluice = sluice;
  sluice.subscribe(onBroadcast);
  // The inspector is for the curious, after everything else: a page works without it.
  import('/pkg/sluice-inspector.js').then(
    () => { $('inspector').sluice = sluice; },
    (e) => console.warn('the Sluice inspector did not load:', e),
  );
  // Saved values are read again now that every later change reaches this tab as a broadcast
  // (the first read, before subscribing, may have missed some); at once, beside the listing.
  const contacts = server.getContacts().catch(() => null);
  const [jobs, status] = await Promise.all([sluice.jobs(), sluice.snapshot()]);
  performance.mark('demo:listed');
  return { jobs, status, contacts: await contacts };
}

/** Puts these contacts (server records, sorted by id) in the table. */
function buildRows(records) {
  st.contacts.clear();
  for (const r of records) {
    const c = server.describe(r);
    st.contacts.set(c.id, { ...c, base: c.owner });
  }
  st.order = records.map((r) => r.id);
  $('contacts-count').textContent = fmt.int(st.order.length);
  table.build(records.map((r) => st.contacts.get(r.id)));
}

/** The first CONTACT_COUNT records by id. */
function firstRecords(records) {
  return records.slice().sort((a, b) => a.id - b.id).slice(0, server.CONTACT_COUNT);
}

async function boot() {
  wire();
  say('Starting Sluice…', 'info');
  const stored = edits.read();
  for (const [id, [, owner]] of Object.entries(stored)) st.values.set(id, owner);
  const others = otherTabsOpen();
  const sluiceP = startSluice();
  sluiceP.catch(() => {});
  api.load();

  // The table at once: the server's records (seeded on the first visit after a server start).
  let records = [];
  try {
    records = firstRecords(await server.ensureContacts());
  } catch (e) {
    say(`The demo API did not answer: ${e.message}`, 'error');
  }
  buildRows(records);
  performance.mark('demo:table');
  rendered({ contacts: st.order.length });
  chart.start();

  let started;
  try {
    started = await sluiceP;
  } catch (e) {
    st.failedToStart = e.message || String(e);
    updateUi();
    throw e;
  }
  // What the worker holds now: the table after a reload, and the last visit's leftovers.
  for (const j of started.jobs) {
    if (!st.jobs.has(j.id)) applyUpdate(j, { live: false });
  }
  // A bulk change still running shows its finished rows as such, in a late tab too.
  const running = new Set();
  for (const j of st.jobs.values()) if (j.groupId && PENDING.has(j.state)) running.add(j.groupId);
  for (const j of st.jobs.values()) {
    const n = contactOf(j);
    if (n == null || !j.groupId || !running.has(j.groupId) || !FINAL.has(j.state)) continue;
    if (!(st.rowJobs.get(n) || []).length) {
      st.outcome.set(n, j.state === 'done' ? 'saved' : 'cancelled');
      table.mark(n);
    }
  }
  takeStatus(started.status);
  // A new worker script starts from its own configuration: the switch's is given again.
  if (st.batch) {
    try {
      await configureSluice();
    } catch (e) {
      console.error('sluice demo: configuring the batch endpoint:', e);
    }
  }
  // The saved values read after subscribing are newer than any listed job's outcome.
  for (const r of started.contacts || []) {
    const known = st.contacts.get(r.id);
    if (known && typeof r.owner === 'string' && known.base !== r.owner) {
      known.base = r.owner;
      table.mark(r.id);
    }
  }
  const gone = Object.keys(stored).filter((id) => !st.jobs.has(id) || FINAL.has(st.jobs.get(id).state));
  for (const id of gone) edits.remove(id);
  const t = tally();
  st.boot = { pending: t.pending, failed: t.failed, otherTabs: await others };
  st.ready = true;
  table.markAll();
  updateUi();
  chart.draw();
  performance.mark('demo:ready');
  return { contacts: st.order.length };
}

// ----- test hooks ----------------------------------------------------------------------------

let rendered;
const renderedP = new Promise((resolve) => { rendered = resolve; });
const ready = boot();
ready.catch((e) => console.error('sluice demo:', e));

window.demo = {
  /** Resolves once the table is rendered and Sluice registered and listed: every control
   * works from then on. Rejects if Sluice cannot start. */
  ready,
  /** Resolves as soon as the table is on screen (before Sluice answers). */
  rendered: renderedP,
  /** Counts as shown on the page (rows by chip), and the banner's texts. */
  state() {
    updateUi();
    const c = lastShown || shownCounts();
    return {
      ...c,
      phase: st.phase,
      banner: banner.textContent,
      countdown: $('countdown').textContent,
      eta: $('eta').textContent,
      paused: st.phase === 'paused',
      batch: st.batch,
      batchLocked: batchLocked(),
      queue: (({ waiting, sending, failed, pending }) => ({ waiting, sending, failed, pending }))(tally()),
    };
  },
  /** What row n shows. */
  row(n) {
    table.render();
    const v = table.shown(n);
    return v && { owner: v.owner, note: v.ownerNote, chip: v.chip, text: v.chipText };
  },
  get sluice() {
    return st.sluice;
  },
  get status() {
    return st.status;
  },
  chart: () => ({ ...chart.last, lastSeq: chart.lastSeq, limits: chart.limits() }),
  applyOwner,
  editOwner,
  cancelWaiting,
  retryFailed,
  discardFailed,
  refreshVisible: () => refresh.run(),
  /** Turns the batch endpoint on or off, as the switch does. */
  setBatching,
  /** Changes the demo API (server field names); `tell`: also configure Sluice's budget. */
  setApi: async (patch, { tell = true } = {}) => {
    const r = await api.apply(patch, { tell });
    api.fill(r.config);
    return r;
  },
  /** Resolves when `pred(demo.state())` holds, or rejects after `ms`. */
  async waitFor(pred, ms = 10_000) {
    const deadline = Date.now() + ms;
    for (;;) {
      const s = this.state();
      if (pred(s)) return s;
      if (Date.now() > deadline) throw new Error(`demo.waitFor: not within ${ms} ms; last state ${JSON.stringify(s)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  },
};
