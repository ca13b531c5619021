// Text for people: numbers, plurals, durations and honest estimates. Pure functions, no DOM.

const intFormat = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** 2000 -> "2,000". */
export function int(n) {
  return intFormat.format(Math.round(n));
}

/** count(1, 'change') -> "1 change"; count(2000, 'change') -> "2,000 changes". */
export function count(n, singular, plural = singular + 's') {
  return `${int(n)} ${n === 1 ? singular : plural}`;
}

/** A whole number of seconds, rounded up, as "20 seconds" / "1 second". */
export function seconds(ms) {
  const s = Math.max(1, Math.ceil(ms / 1000));
  return count(s, 'second');
}

/** A duration as the engine writes it: "45 s", "3 min 20 s", "1 h 12 min" (rounded up). */
export function duration(ms) {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  if (h === 0 && m === 0) return `${s} s`;
  if (h === 0) return s === 0 ? `${m} min` : `${m} min ${s} s`;
  return m === 0 ? `${h} h` : `${h} h ${m} min`;
}

/**
 * How long is left, rounded to what the estimate can honestly claim: a rate-based estimate
 * is good to a few seconds at best, so nothing finer than 10 s under a minute, whole minutes
 * under an hour, and 10 minutes beyond. Returns null when there is nothing to estimate.
 */
export function roughly(ms) {
  if (ms == null || !Number.isFinite(ms) || ms <= 0) return null;
  if (ms < 10_000) return 'a few seconds';
  if (ms < 55_000) return `about ${Math.round(ms / 10_000) * 10} s`;
  if (ms < 90_000) return 'about 1 min';
  if (ms < 59.5 * 60_000) return `about ${Math.round(ms / 60_000)} min`;
  const tenMinutes = Math.round(ms / 600_000);
  const h = Math.floor(tenMinutes / 6);
  const m = (tenMinutes % 6) * 10;
  return m === 0 ? `about ${h} h` : `about ${h} h ${m} min`;
}

/** "10 per second", "50 per 10 s", "5,000 per hour". */
export function rate(limit, windowMs) {
  const named = { 1000: 'second', 60_000: 'minute', 3_600_000: 'hour', 86_400_000: 'day' };
  if (named[windowMs]) return `${int(limit)} per ${named[windowMs]}`;
  return `${int(limit)} per ${duration(windowMs)}`;
}

/** The least time `jobs` requests take under these windows, or null if one window holds them all. */
export function leastTime(jobs, windows) {
  let worst = null;
  for (const w of windows || []) {
    if (jobs > w.limit) {
      const ms = Math.floor((jobs * w.lengthMs) / Math.max(1, w.limit));
      if (!worst || ms > worst.ms) worst = { ms, window: w };
    }
  }
  return worst;
}

/** A wait in ms for a table: "—" when unknown, "40 ms", "1.2 s", "3 min 20 s". */
export function wait(ms) {
  if (ms == null) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  return duration(ms);
}

/** The job's reason in a few words: "HTTP 500: injected fault (gave up after 3 attempts)". */
export function reason(lastError) {
  if (!lastError) return '';
  return String(lastError.message || (lastError.status ? `HTTP ${lastError.status}` : 'unknown error'));
}

/** "12:03:04" in the visitor's locale. */
export function clock(date = new Date()) {
  return date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}
