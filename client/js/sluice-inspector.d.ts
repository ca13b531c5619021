// Types of `sluice/inspector` (sluice-inspector.js): the `<sluice-inspector>` element.
import type { Sluice } from './sluice_client.js';

/**
 * `<sluice-inspector>`: the queue of a Sluice client, collapsed in a corner of the page. Open,
 * it lists every job (state, lane, budget, attempts, the countdown to its next attempt) with
 * buttons to cancel, retry and discard it, the groups with their progress, and the budgets
 * with their limits and what the server last said. It reads the client's status broadcasts,
 * and the job list only while open and when something changed.
 */
export class SluiceInspector extends HTMLElement {
  /** The client whose queue it shows (what `Sluice.register` resolved with); `null` until set. */
  sluice: Sluice | null;
  /** Whether the panel is open. */
  open: boolean;
}

/** Adds a `<sluice-inspector>` showing `sluice`'s queue to `parent` (default: the page's
 * body) and returns it. */
export function inspect(sluice: Sluice, parent?: Element): SluiceInspector;

declare global {
  interface HTMLElementTagNameMap {
    'sluice-inspector': SluiceInspector;
  }
}
