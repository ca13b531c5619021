import init, {
  Sluice,
  type GroupStatus,
  type JobInput,
  type JobUpdate,
  type SluiceError,
  type Status,
  type WorkerBroadcast,
} from 'sluice';
import { signIn } from './session';

/** The demo API on its own origin (`cargo run --release -- --api-port 8081`); `?api=` overrides. */
const API = new URLSearchParams(location.search).get('api') ?? 'http://127.0.0.1:8081';
/** The budget public/sw.js declares for that API. */
const BUDGET = 'contacts-api';
const IMPORT_SIZE = 50;

function element<T extends HTMLElement>(id: string): T {
  const found = document.getElementById(id);
  if (!found) throw new Error(`#${id} is missing from index.html`);
  return found as T;
}

const state = element<HTMLParagraphElement>('state');
const addButton = element<HTMLButtonElement>('add');
const importButton = element<HTMLButtonElement>('import');
const cancelButton = element<HTMLButtonElement>('cancel');
const added = element<HTMLParagraphElement>('added');
const groups = element<HTMLUListElement>('groups');
const updates = element<HTMLOListElement>('updates');

function createContact(name: string, lane: JobInput['lane']): JobInput {
  return {
    url: `${API}/api/contacts`,
    budget: BUDGET,
    lane,
    // A create gets one Idempotency-Key for all its attempts: the API applies it once.
    kind: 'create',
    body: { name },
  };
}

function describeGroup(group: GroupStatus): string {
  const parts = [`${group.done} of ${group.total} saved`];
  if (group.pending > 0) parts.push(`${group.pending} waiting`);
  if (group.cancelled > 0) parts.push(`${group.cancelled} cancelled`);
  if (group.failed > 0) parts.push(`${group.failed} failed`);
  return `${group.id}: ${parts.join(', ')}`;
}

/** What every tab shows, from the worker's status (the same in all tabs, also after a reload). */
function showStatus(status: Status): void {
  const budget = status.budgets.find((b) => b.name === BUDGET);
  const pending = status.counts.queued + status.counts.sending + status.counts.retryWait;
  const limit = budget?.windows[0]?.limit;
  state.textContent =
    pending === 0
      ? 'Nothing waiting.'
      : `${pending} waiting, sent at most ${limit ?? '?'} per second.`;
  groups.replaceChildren(
    ...status.groups.map((group) => {
      const item = document.createElement('li');
      item.textContent = describeGroup(group);
      // For the browser test, which reads the counts rather than the wording.
      Object.assign(item.dataset, {
        group: group.id,
        total: String(group.total),
        done: String(group.done),
        pending: String(group.pending),
        cancelled: String(group.cancelled),
        failed: String(group.failed),
      });
      return item;
    }),
  );
  cancelButton.disabled = !status.groups.some((g) => g.pending > 0);
}

function showUpdates(jobs: JobUpdate[]): void {
  for (const job of jobs) {
    const item = document.createElement('li');
    item.textContent = `${job.id.slice(0, 8)} ${job.state}${job.attempts > 1 ? ` (attempt ${job.attempts})` : ''}`;
    updates.prepend(item);
  }
  while (updates.children.length > 10) updates.lastElementChild?.remove();
}

/** Signs in and gives the worker the token at once; one sign-in at a time. The worker's
 * `credentials` function (public/sw.js) reads the same token whenever no tab has given one. */
let signingIn: Promise<void> | null = null;
function refreshSession(sluice: Sluice): Promise<void> {
  signingIn ??= signIn(API)
    .then(async (token) => {
      await sluice.setCredentials(BUDGET, { Authorization: `Bearer ${token}` });
      document.body.dataset.signIns = String(Number(document.body.dataset.signIns ?? 0) + 1);
    })
    .finally(() => {
      signingIn = null;
    });
  return signingIn;
}

async function main(): Promise<void> {
  // The client's wasm: Vite serves and fingerprints it like any asset the module names.
  await init();
  const sluice = await Sluice.register('/sw.js');
  // Jobs queued before it still wait for it: a 401 holds them, it does not fail them.
  await refreshSession(sluice).catch((error: unknown) => {
    state.textContent = `Sign-in failed: ${String(error)}`;
  });

  sluice.subscribe((message: WorkerBroadcast) => {
    if (message.type === 'status') {
      showStatus(message.status);
      // The API refused the token (it expired): sign in again; the jobs wait, none fails.
      if (message.status.budgets.some((b) => b.name === BUDGET && b.credentialsNeeded)) {
        state.textContent = 'Signing in again…';
        refreshSession(sluice).catch((error: unknown) => {
          state.textContent = `Sign-in failed: ${String(error)}`;
        });
      }
    } else if (message.type === 'jobs') showUpdates(message.updates);
    // The worker's own trouble (a new version that cannot start, a crash it recovers from).
    else state.textContent = `Sluice: ${message.error.message}`;
  });
  showStatus(await sluice.snapshot());

  addButton.addEventListener('click', async () => {
    added.textContent = 'Saving…';
    try {
      // Resolves once the worker has stored the job; `done` once the API answered.
      const create = await sluice.enqueue(createContact('Ada Lovelace', 'interactive'));
      // An edit of the contact the create makes, queued at once (offline too): it waits for
      // the create and goes to the id the server gives it.
      const edit = await sluice.enqueue({
        url: `${API}/api/contacts/${sluice.ref(create.id, 'body.id')}`,
        method: 'PATCH',
        budget: BUDGET,
        lane: 'interactive',
        body: { company: 'Analytical Engines' },
      });
      const outcome = await create.done;
      added.textContent = `Contact saved: HTTP ${outcome.status}`;
      const edited = await edit.done;
      added.dataset.edited = String(edited.status);
    } catch (error) {
      added.textContent = `Not saved: ${(error as SluiceError).code ?? String(error)}`;
    }
  });

  importButton.addEventListener('click', async () => {
    const jobs = Array.from({ length: IMPORT_SIZE }, (_, i) =>
      createContact(`Imported ${i + 1}`, 'bulk'),
    );
    // One group: its progress is in every status, and it is cancelled as one.
    const { warning } = await sluice.enqueueMany(jobs, `import-${Date.now()}`);
    if (warning) state.textContent = warning;
  });

  cancelButton.addEventListener('click', async () => {
    const status = await sluice.snapshot();
    for (const group of status.groups.filter((g) => g.pending > 0)) {
      await sluice.cancel(group.id);
    }
  });

  for (const button of [addButton, importButton]) button.disabled = false;
  document.body.dataset.ready = 'true';
}

main().catch((error: unknown) => {
  state.textContent = `Sluice did not start: ${error instanceof Error ? error.message : String(error)}`;
  document.body.dataset.ready = 'error';
});
