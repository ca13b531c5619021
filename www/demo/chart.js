// Two hand-drawn canvas charts: requests per second at the server against its limit (429s
// hatched and marked), and each lane's median wait over time. The numbers behind them are
// also written as text by the caller; the canvases are pictures of that text.

const SPAN_S = 60;

function setupCanvas(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth;
  const height = canvas.clientHeight;
  if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  return { ctx, width, height };
}

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/** A nice axis: four equal steps of 1, 2, 2.5, 3, 4 or 5 times a power of ten, reaching `v`. */
function niceMax(v) {
  const raw = Math.max(v, 1e-9) / 4;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 3, 4, 5, 10]) if (m * p >= raw) return 4 * m * p;
  return 40 * p;
}

function hatch(ctx, color) {
  const tile = document.createElement('canvas');
  tile.width = tile.height = 6;
  const t = tile.getContext('2d');
  t.fillStyle = color;
  t.globalAlpha = 0.25;
  t.fillRect(0, 0, 6, 6);
  t.globalAlpha = 1;
  t.strokeStyle = color;
  t.lineWidth = 1.5;
  t.beginPath();
  t.moveTo(0, 6); t.lineTo(6, 0);
  t.moveTo(-1, 1); t.lineTo(1, -1);
  t.moveTo(5, 7); t.lineTo(7, 5);
  t.stroke();
  return ctx.createPattern(tile, 'repeat');
}

const AXIS_FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

function axisLabel(v) {
  return (Math.round(v * 100) / 100).toLocaleString('en-US');
}

/** Where the plot starts: room for the widest value label (the top one, with its unit). */
function plotLeft(ctx, max, unit) {
  ctx.font = AXIS_FONT;
  const widest = ctx.measureText(`${axisLabel(max)} ${unit}`).width;
  return Math.max(44, Math.ceil(widest) + 10);
}

function axes(ctx, { left, top, right, bottom, max, unit, ink, grid }) {
  ctx.font = AXIS_FONT;
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'right';
  const steps = 4;
  for (let i = 0; i <= steps; i++) {
    const v = (max * i) / steps;
    const y = bottom - ((bottom - top) * i) / steps;
    ctx.strokeStyle = grid;
    ctx.lineWidth = 1;
    ctx.beginPath();
    ctx.moveTo(left, Math.round(y) + 0.5);
    ctx.lineTo(right, Math.round(y) + 0.5);
    ctx.stroke();
    ctx.fillStyle = ink;
    ctx.fillText(axisLabel(v) + (i === steps && unit ? ` ${unit}` : ''), left - 6, y);
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (const s of [60, 45, 30, 15, 0]) {
    const x = left + ((right - left) * (SPAN_S - s)) / SPAN_S;
    ctx.fillText(s === 0 ? 'now' : `−${s} s`, Math.min(Math.max(x, left + 14), right - 12), bottom + 5);
  }
}

/**
 * Starts per second. `buckets`: Map second -> {ok, limited, failed}; `nowS`: the current
 * second on the server's clock (may be fractional); `limitPerS`/`sluicePerS`: the server's and
 * Sluice's limits per second now; `history`: Map second -> {limitPerS, sluicePerS} as they
 * were then, so the lines step where a limit changed; `since`: the first second they are known.
 */
export function drawRequests(canvas, { buckets, nowS, limitPerS, sluicePerS, history = new Map(), since = -Infinity }) {
  const { ctx, width, height } = setupCanvas(canvas);
  const ink = css('--ink-2');
  const grid = css('--line');
  const okColor = css('--chart-ok');
  const limitedColor = css('--chart-429');
  const failColor = css('--chart-fail');
  const right = width - 10;
  const top = 14;
  const bottom = height - 22;
  let peak = 0;
  const end = Math.floor(nowS);
  for (let s = end - SPAN_S; s <= end; s++) {
    const b = buckets.get(s);
    if (b) peak = Math.max(peak, b.ok + b.limited + b.failed);
  }
  // The scale follows the traffic and Sluice's limit; a server limit far above both (say
  // while it is lifted) is labelled at the top instead of flattening everything.
  // Limits are known from when this page started watching; no line is drawn before that.
  const at = (sec) => {
    if (sec < since) return { limitPerS: 0, sluicePerS: 0 };
    return history.get(sec) || { limitPerS, sluicePerS };
  };
  let topLimit = 0;
  let topSluice = 0;
  for (let sec = end - SPAN_S; sec <= end; sec++) {
    const h = at(sec);
    topLimit = Math.max(topLimit, h.limitPerS || 0);
    topSluice = Math.max(topSluice, h.sluicePerS || 0);
  }
  let max = niceMax(Math.max(peak * 1.1, topSluice * 1.25, 4));
  const limitOnScale = topLimit && topLimit * 1.25 <= max * 3;
  if (limitOnScale) max = Math.max(max, niceMax(topLimit * 1.25));
  const left = plotLeft(ctx, max, '/s');
  axes(ctx, { left, top, right, bottom, max, unit: '/s', ink, grid });
  const slot = (right - left) / SPAN_S;
  const y = (v) => bottom - ((bottom - top) * v) / max;
  const limitedFill = hatch(ctx, limitedColor);
  for (let s = end - SPAN_S + 1; s <= end; s++) {
    const b = buckets.get(s);
    if (!b) continue;
    // Bars are placed by their second's end, scrolling smoothly with the fractional now.
    const x = left + (s + 1 - (nowS - SPAN_S)) * slot - slot;
    if (x + slot < left || x > right) continue;
    const w = Math.max(1, slot - 2);
    let base = bottom;
    const layers = [[b.ok, okColor], [b.failed, failColor], [b.limited, limitedFill]];
    for (const [v, fill] of layers) {
      if (!v) continue;
      const h = (bottom - top) * (v / max);
      ctx.fillStyle = fill;
      ctx.fillRect(x + 1, base - h, w, h);
      if (fill === limitedFill) {
        ctx.strokeStyle = limitedColor;
        ctx.lineWidth = 1;
        ctx.strokeRect(x + 1.5, base - h + 0.5, w - 1, h - 1);
      }
      base -= h;
    }
    if (b.limited) {
      // A marker above the bar: 429s are visible by shape, not only by colour.
      const cx = x + 1 + w / 2;
      const cy = Math.max(top + 4, base - 7);
      ctx.strokeStyle = limitedColor;
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(cx - 3.5, cy - 3.5); ctx.lineTo(cx + 3.5, cy + 3.5);
      ctx.moveTo(cx + 3.5, cy - 3.5); ctx.lineTo(cx - 3.5, cy + 3.5);
      ctx.stroke();
    }
  }
  // A limit as a step line over the minute (it may have changed), labelled with today's value.
  const drawLimit = (key, value, color, dash, label, above) => {
    if (!value) return;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, 0, right - left, bottom);
    ctx.clip();
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.setLineDash(dash);
    ctx.beginPath();
    let first = true;
    for (let sec = end - SPAN_S; sec <= end + 1; sec++) {
      const v = sec > end ? value : at(sec)[key];
      if (!v) { first = true; continue; }
      const x0 = left + (sec - (nowS - SPAN_S)) * slot - slot;
      const ly = Math.round(y(Math.min(v, max))) + 0.5;
      if (first) ctx.moveTo(Math.max(left, x0), ly);
      else ctx.lineTo(x0, ly);
      ctx.lineTo(x0 + slot, ly);
      first = false;
    }
    ctx.stroke();
    ctx.restore();
    ctx.setLineDash([]);
    const ly = Math.round(y(Math.min(value, max))) + 0.5;
    ctx.font = '600 11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
    ctx.textAlign = 'right';
    ctx.textBaseline = above ? 'bottom' : 'top';
    const tw = ctx.measureText(label).width;
    const tx = right - 4;
    const ty = above ? ly - 3 : ly + 3;
    ctx.fillStyle = css('--surface');
    ctx.fillRect(tx - tw - 3, above ? ty - 13 : ty - 1, tw + 6, 14);
    ctx.fillStyle = color;
    ctx.fillText(label, tx, ty);
  };
  if (limitOnScale) drawLimit('limitPerS', limitPerS, css('--ink'), [6, 4], `server limit ${fmt(limitPerS)}/s`, true);
  else if (limitPerS) {
    ctx.font = '600 11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
    ctx.fillStyle = css('--ink');
    ctx.textAlign = 'right';
    ctx.textBaseline = 'top';
    ctx.fillText(`server limit ${fmt(limitPerS)}/s, above this scale ↑`, right, 0);
  }
  if (sluicePerS && Math.abs(sluicePerS - limitPerS) > 1e-9) {
    drawLimit('sluicePerS', sluicePerS, css('--accent'), [2, 3], `Sluice aims for ${fmt(sluicePerS)}/s`, false);
  }
}

function fmt(v) {
  return Number.isInteger(v) ? v.toLocaleString('en-US') : v.toFixed(1);
}

/**
 * Median wait per lane over time. `samples`: [{t (ms, page clock), lanes: {interactive,
 * bulk, background}}] with waits in ms (null when unknown).
 */
export function drawLanes(canvas, { samples, now }) {
  const { ctx, width, height } = setupCanvas(canvas);
  const ink = css('--ink-2');
  const grid = css('--line');
  const right = width - 10;
  const top = 12;
  const bottom = height - 22;
  const from = now - SPAN_S * 1000;
  const recent = samples.filter((s) => s.t >= from - 1000);
  let peak = 0;
  for (const s of recent) for (const v of Object.values(s.lanes)) if (v != null) peak = Math.max(peak, v);
  const maxS = niceMax(Math.max(peak / 1000, 1));
  const left = plotLeft(ctx, maxS, 's');
  axes(ctx, { left, top, right, bottom, max: maxS, unit: 's', ink, grid });
  const x = (t) => left + ((right - left) * (t - from)) / (SPAN_S * 1000);
  const y = (ms) => bottom - ((bottom - top) * (ms / 1000)) / maxS;
  const styles = {
    interactive: { color: css('--lane-interactive'), dash: [] },
    bulk: { color: css('--lane-bulk'), dash: [7, 4] },
    background: { color: css('--lane-background'), dash: [2, 3] },
  };
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, top - 2, right - left, bottom - top + 4);
  ctx.clip();
  for (const [lane, st] of Object.entries(styles)) {
    ctx.strokeStyle = st.color;
    ctx.lineWidth = 2;
    ctx.setLineDash(st.dash);
    ctx.beginPath();
    let drawing = false;
    for (const s of recent) {
      const v = s.lanes[lane];
      if (v == null) { drawing = false; continue; }
      if (!drawing) ctx.moveTo(x(s.t), y(v));
      else ctx.lineTo(x(s.t), y(v));
      drawing = true;
    }
    ctx.stroke();
  }
  ctx.restore();
  ctx.setLineDash([]);
}
