// The contacts table: every row is in the document (so screen readers, find-in-page and tests
// see all of them), but only rows whose view changed are touched, at most once per frame.
//
// It is an ARIA table of divs rather than <table>: rows are grouped in chunks of 100 with
// `content-visibility: auto`, so the browser lays out, paints and hit-tests only the chunks on
// screen. (Internal table boxes cannot be contained; a 2,000-row <table> spent about 30 ms of
// layout and paint per changed cell, too slow for 100 job updates a second.)
//
// A row's view is plain data ({owner, ownerNote, pending, chip, chipText, title}); `render`
// compares it with what is on screen and writes only the difference.

export const ROW_HEIGHT = 44;
const CHUNK = 100;

const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ({
  '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
}[c]));

/** Chip states and their visible words; the icon comes from CSS by state. */
export const CHIP_LABELS = {
  waiting: 'Waiting',
  retrying: 'Waiting to retry',
  sending: 'Sending',
  saved: 'Saved',
  failed: 'Failed',
  cancelled: 'Cancelled',
  none: '',
};

/**
 * Runs `fn` before the next paint; in a hidden tab (no animation frames) after 100 ms, so
 * other tabs still keep their state current. Returns a function that cancels it.
 */
export function nextFrame(fn) {
  if (document.hidden) {
    const t = setTimeout(fn, 100);
    return () => clearTimeout(t);
  }
  const f = requestAnimationFrame(fn);
  return () => cancelAnimationFrame(f);
}

export class ContactTable {
  /**
   * @param {HTMLElement} tbody the element that holds the row groups
   * @param {(id: number) => object} viewOf the row's current view
   * @param {() => void} requestRender asks for a frame in which `render` is called
   */
  constructor(tbody, viewOf, requestRender) {
    this.tbody = tbody;
    this.viewOf = viewOf;
    this.requestRender = requestRender;
    this.rows = new Map(); // id -> {tr, owner, note, chip, chipText, shown}
    this.dirty = new Set();
  }

  /** Replaces the table body with these contacts (sorted by id). */
  build(contacts) {
    const html = [];
    for (let i = 0; i < contacts.length; i += CHUNK) {
      const rows = contacts.slice(i, i + CHUNK);
      html.push(`<div class="chunk" role="rowgroup" style="contain-intrinsic-size: auto ${rows.length * ROW_HEIGHT}px">`);
      for (const c of rows) {
        const id = c.id;
        html.push(
          `<div class="row" role="row" id="row-${id}">` +
          `<div class="cell num" role="cell">${id}</div>` +
          `<div class="cell name" role="rowheader"><span class="name-main">${escapeHtml(c.name)}</span>` +
          `<span class="email">${escapeHtml(c.email || '')}</span></div>` +
          `<div class="cell company" role="cell">${escapeHtml(c.company || '')}</div>` +
          `<div class="cell owner" role="cell"><button type="button" class="owner-btn" tabindex="-1" data-edit="${id}" ` +
          `aria-describedby="chip-${id}"><span class="owner-value"></span>` +
          `<span class="owner-note"></span><span class="visually-hidden">, edit owner of ` +
          `${escapeHtml(c.name)}</span><span class="edit-icon" aria-hidden="true"></span></button></div>` +
          `<div class="cell state" role="cell"><span class="chip" id="chip-${id}" data-row="${id}" ` +
          `data-testid="chip-${id}" data-state="none"><span class="chip-text"></span></span></div>` +
          `</div>`,
        );
      }
      html.push('</div>');
    }
    this.tbody.innerHTML = html.join('');
    this.rows.clear();
    this.current = null;
    for (const tr of this.tbody.querySelectorAll('.row')) {
      const id = Number(tr.id.slice(4));
      this.rows.set(id, {
        tr,
        owner: tr.querySelector('.owner-value'),
        note: tr.querySelector('.owner-note'),
        chip: tr.querySelector('.chip'),
        chipText: tr.querySelector('.chip-text'),
        shown: {},
      });
    }
    for (const id of this.rows.keys()) this.dirty.add(id);
    this.render();
    this.roving();
  }

  /**
   * One tab stop for the whole table: the current row's edit button. Arrow keys, Page Up/Down
   * and Home/End move between rows (the page says so above the table).
   */
  roving() {
    const first = this.tbody.querySelector('[data-edit]');
    if (first) this.focusButton(first, false);
    if (this.keyHandler) return;
    this.keyHandler = (e) => {
      const btn = e.target.closest && e.target.closest('[data-edit]');
      if (!btn) return;
      const ids = [...this.rows.keys()];
      const index = ids.indexOf(Number(btn.dataset.edit));
      const scroller = this.tbody.closest('.table-wrap');
      const page = Math.max(1, Math.floor((scroller ? scroller.clientHeight : 440) / ROW_HEIGHT) - 2);
      const to = {
        ArrowDown: index + 1, ArrowUp: index - 1, PageDown: index + page, PageUp: index - page,
        Home: 0, End: ids.length - 1,
      }[e.key];
      if (to === undefined || e.altKey || e.ctrlKey || e.metaKey) return;
      e.preventDefault();
      this.focusButton(this.button(ids[Math.max(0, Math.min(ids.length - 1, to))]));
    };
    this.tbody.addEventListener('keydown', this.keyHandler);
    this.tbody.addEventListener('focusin', (e) => {
      const btn = e.target.closest && e.target.closest('[data-edit]');
      if (btn) this.focusButton(btn, false);
    });
  }

  focusButton(btn, move = true) {
    if (this.current && this.current !== btn) this.current.tabIndex = -1;
    btn.tabIndex = 0;
    this.current = btn;
    if (move) btn.focus({ preventScroll: true });
    if (move) btn.closest('.row').scrollIntoView({ block: 'nearest' });
  }

  /** The edit button of row `id`. */
  button(id) {
    const r = this.rows.get(id);
    return r ? r.tr.querySelector('[data-edit]') : null;
  }

  has(id) {
    return this.rows.has(id);
  }

  /** Schedules a row for the next frame. */
  mark(id) {
    if (!this.rows.has(id)) return;
    this.dirty.add(id);
    this.requestRender();
  }

  markAll() {
    for (const id of this.rows.keys()) this.dirty.add(id);
    this.requestRender();
  }

  /** Writes every dirty row now. */
  render() {
    for (const id of this.dirty) {
      const r = this.rows.get(id);
      if (!r) continue;
      const v = this.viewOf(id);
      const s = r.shown;
      if (s.owner !== v.owner) r.owner.textContent = v.owner;
      if (s.ownerNote !== v.ownerNote) r.note.textContent = v.ownerNote;
      if (s.pending !== v.pending) r.tr.classList.toggle('is-pending', v.pending);
      if (s.chip !== v.chip) r.chip.dataset.state = v.chip;
      if (s.chipText !== v.chipText) r.chipText.textContent = v.chipText;
      if (s.title !== v.title) {
        if (v.title) r.chip.title = v.title;
        else r.chip.removeAttribute('title');
      }
      r.shown = v;
    }
    this.dirty.clear();
  }

  /** What row `id` shows right now. */
  shown(id) {
    const r = this.rows.get(id);
    return r ? r.shown : null;
  }

  /** Ids of rows at least partly visible in the scroll container (measured per chunk, so
   * off-screen chunks are not laid out for it). */
  visibleIds(container) {
    const box = container.getBoundingClientRect();
    const ids = [];
    for (const chunk of this.tbody.children) {
      const c = chunk.getBoundingClientRect();
      if (c.bottom <= box.top || c.top >= box.bottom) continue;
      for (const row of chunk.children) {
        const b = row.getBoundingClientRect();
        if (b.bottom > box.top + 1 && b.top < box.bottom - 1) ids.push(Number(row.id.slice(4)));
      }
    }
    return ids;
  }
}
