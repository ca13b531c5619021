//! The TypeScript declarations of the JS API (`sluice_client.d.ts`), beside the Rust that
//! implements it: wasm-bindgen writes this text into the typings as it stands.

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
export type Lane = "interactive" | "bulk" | "background";
export type JobKind = "create" | "patch" | "delete" | "custom";
export type JobState = "queued" | "sending" | "retry-wait" | "done" | "failed" | "cancelled" | "conflict";

/** A job as a page writes it. Only `url` is required. */
export interface JobInput {
  /** The job's id. Default: a fresh UUID, fixed before the first send, so that a request sent
   * again after a lost reply names the same job and is not saved twice. */
  id?: string;
  /** Absolute, or relative to the page. */
  url: string;
  /** Default: POST when there is a body, GET otherwise. */
  method?: string;
  /** Budget name; default: the budget whose `matchPrefixes` cover the URL. */
  budget?: string;
  /** Default "bulk". */
  lane?: Lane;
  /** Jobs with the same key run one at a time, in order. */
  key?: string | null;
  /** Default "custom". A "create" gets an Idempotency-Key. */
  kind?: JobKind;
  headers?: Record<string, string> | [string, string][];
  /** A string is sent as is; plain data (objects, arrays, numbers, booleans) as JSON
   * (Content-Type: application/json), the values `JSON.stringify` writes; a Blob, FormData or
   * Date is refused (make it a string first). */
  body?: unknown;
  groupId?: string | null;
  /** What it spends of its budget's resources besides one request, an estimate the answer may
   * correct: `{ tokens: 1200 }`. Default: each resource's `defaultCost`. */
  cost?: Record<string, number>;
  /** Send it with `If-Match` and the `ETag` of the last answer to a job of its `key` (when one
   * is known and it names no `If-Match` itself): queued edits each apply to the version the one
   * before produced, and someone else's change in between is a `conflict`. Needs a `key`. */
  ifMatchFromKey?: boolean;
  /** Ids of earlier jobs (as `enqueue` returned them) to wait for: it is sent once they are
   * done, with their answers filled into its URL, headers and body where it refers to them:
   * `{{job:<id>.body.<path>}}` (keys and array indices, `body.data.0.id`; `body` alone is the
   * whole body), `{{job:<id>.header.<name>}}`, `{{job:<id>.status}}`. A job referred to is
   * waited for whether named here or not. If one fails, is cancelled or dismissed, this job
   * fails (or is cancelled) with it. */
  after?: string[];
  /** As in `fetch`; default "same-origin". */
  credentials?: "omit" | "same-origin" | "include";
  /** As in `fetch`; default "cors". "no-cors" is refused: its answer cannot be read. */
  mode?: "cors" | "same-origin";
  /** As in `fetch`; default "follow". */
  redirect?: "follow" | "error" | "manual";
  referrerPolicy?: ReferrerPolicy;
  /** A subresource-integrity string the response must match. */
  integrity?: string;
}

/** The server's final answer to a done job. Header names are lower-case. */
export interface JobOutcome {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface Enqueued {
  /** The job's id (the earlier job's id when this one was folded into it). */
  id: string;
  coalesced: boolean;
  state: JobState;
  /** Resolves when the job is done; rejects with a SluiceError when it failed or was cancelled. */
  done: Promise<JobOutcome>;
}

export interface EnqueuedMany {
  ids: string[];
  /** Set when the group needs more than a whole window's budget. */
  warning: string | null;
}

export interface Retried {
  id: string;
  done: Promise<JobOutcome>;
}

export interface RegisterOptions {
  /** Default "/". */
  scope?: string;
  /** How the worker script is loaded. Default "classic". */
  type?: "classic" | "module";
  /** Resend an unanswered request after this long (enqueues after 10/3 as long). Default 3000. */
  resendAfterMs?: number;
  /** Send keepAlive this often while work is pending. Default 10000. */
  keepAliveMs?: number;
  /** How long to wait for the worker to start and take control of the page; past it, or as
   * soon as the worker says it cannot start, `register` rejects with the reason. Default 10000. */
  controlTimeoutMs?: number;
}

/** Every rejection of this client is a SluiceError (`error instanceof SluiceError`), with a
 * stable `code` besides the message. */
export class SluiceError extends Error {
  /** The worker's code (e.g. "unknown-budget", "not-found", "cannot-start"), "no-answer",
   * "invalid-job", "unsupported", "registration", "decode", "closed"; for a job's `done`:
   * "failed", "conflict", "cancelled", "discarded" (a page dismissed it: its record is deleted)
   * or "gone" (the worker no longer knows it: it expired). */
  code: string;
  /** The worker's error object, when the worker refused the request. */
  detail?: unknown;
  /** For a job's `done`. */
  jobId?: string;
  state?: JobState | null;
  status?: number | null;
  /** For a job's `done` that ended in a conflict (409, 412): the server's answer (often the
   * record as it is now), in the tab that enqueued the job. Resolve it with `retry` (as it
   * was, or with a new body or headers) or `dismiss`. */
  outcome?: JobOutcome;
}

/** What `retry` changes of a failed job or a conflict; without it, it goes again as it was. */
export interface RetryOptions {
  /** Replaces the body: a string, or plain data sent as JSON. */
  body?: unknown;
  /** Set over the job's headers by name (e.g. `{"If-Match": etag}`); the others stay. */
  headers?: Record<string, string> | [string, string][];
}

export interface JobError { status: number | null; message: string; }
export interface JobUpdate {
  id: string; state: JobState; lane: Lane; key: string | null; groupId: string | null;
  budget: string; attempts: number; notBefore: number; coalesced: number;
  lastError: JobError | null;
  /** Only in the update of the tab that enqueued the job, and in answers to `jobs`. */
  outcome: { status: number; headers: [string, string][]; body: string } | null;
  /** True in a broadcast to another tab: the outcome and the server's words are left out. */
  withheld: boolean;
  /** The jobs it still waits for (`after`); empty once it may be sent. */
  waitingFor: string[];
}
export interface RateWindow { limit: number; lengthMs: number; }
export interface BudgetStatus {
  name: string; windows: RateWindow[]; concurrency: number; inFlight: number; pending: number;
  pausedUntil: number | null; pauseReason: string | null; trouble: string | null;
  /** Set while the server refused the credentials the budget's jobs went with: nothing is
   * sent until a page calls setCredentials(budget, headers) with new ones. */
  credentialsNeeded: string | null;
  /** Requests out far longer than answers take (a lost answer, a hung connection). */
  overdue: string | null;
  serverRemaining: number | null; serverResetAt: number | null; etaMs: number | null;
  requests: number; rateLimited: number; retries: number; rateLimitedPer1000: number;
  achievedShare: number;
  /** The budget's other resources (tokens, points): each one's window closest to full. */
  resources: ResourceStatus[];
  /** What is closest to its limit: "requests" or a resource's name; null without resources. */
  tightest: string | null;
}
export interface ResourceStatus {
  name: string; limit: number; windowMs: number; used: number; remaining: number;
  /** When that window is empty again (epoch ms). */
  freesAt: number;
}
export interface GroupStatus {
  id: string; total: number; done: number; failed: number; cancelled: number;
  /** Not finished: waiting or sending. */
  pending: number;
  /** Waiting to be sent (queued, or waiting to retry). */
  waiting: number;
  /** Jobs the server answered with a conflict, waiting for the page to resolve them. */
  conflicts: number;
  /** By when its budget will have sent what it has pending, this group's jobs included (0 when
   * the group has nothing pending; null while the budget is held for trouble or waits for
   * credentials). */
  etaMs: number | null;
  warning: string | null;
}
export interface LaneStatus { lane: Lane; waiting: number; waitP50Ms: number | null; waitP95Ms: number | null; }
export interface Status {
  now: number;
  counts: { queued: number; sending: number; retryWait: number; done: number; failed: number; cancelled: number; conflict: number };
  budgets: BudgetStatus[]; groups: GroupStatus[]; lanes: LaneStatus[];
  etaMs: number | null; attemptsPerJob: number; offline: boolean;
  /** Things to act on: a budget that is not configured, storage that is full, a setting the
   * worker could not use. */
  warnings: string[];
  /** Information, nothing to fix: how long a bulk job needs at the limit, or that a budget's
   * concurrency (not its limit) sets the pace, with the concurrency that would not. */
  notes: string[];
}
export interface BudgetConfig {
  name: string; windows: RateWindow[]; concurrency?: number;
  algorithm?: "sliding-log" | "token-bucket" | "gcra" | "fixed-window";
  matchPrefixes?: string[]; targetUtilization?: number; pacing?: boolean;
  /** The API counts CORS preflights (OPTIONS) against the limit: count them as starts. */
  countPreflights?: boolean;
  /** The API's Access-Control-Max-Age in ms (default 5000, the browser's without it). */
  preflightMaxAgeMs?: number;
  /** What the API says about limits only in an answer's JSON body; the first match decides. */
  bodyRules?: BodyRule[];
  /** What else the API counts besides requests (tokens, points), each with its windows. */
  resources?: ResourceConfig[];
  /** Statuses that mean "these credentials were refused" (default [401]): the budget waits for
   * `setCredentials` instead of failing the job. */
  waitForCredentialsOn?: number[];
  /** The API's batch endpoints: jobs a rule takes go together, each keeping its own outcome. */
  batches?: BatchRule[];
}
/** One batch endpoint: which jobs it takes and how it carries and answers for them. */
export interface BatchRule {
  /** The method of the jobs it takes ("PATCH"). */
  method: string;
  /** The URL of the jobs it takes: a path ("/api/contacts/:id") or an absolute URL; a
   * ":name" segment matches any one segment. */
  url: string;
  /** Where a batch goes: a path on the jobs' origin, or an absolute URL. */
  endpoint: string;
  /** Default "POST". */
  endpointMethod?: string;
  /** "array" (default): a JSON array of bodies, answered by per-item results in order.
   * "inputs": `{inputs: [{id, ...body}]}` answered by results and errors matched by id
   * (HubSpot). "requests": whole sub-requests, `$batch` (Microsoft Graph). */
  shape?: "array" | "inputs" | "requests";
  /** Most items per request (default 100). */
  maxItems?: number;
  /** How long a job that is not interactive waits for companions (default 20 ms). */
  lingerMs?: number;
  /** "inputs": the key items go under (default "inputs"), the id's field (default "id"), the
   * URL parameter that holds it (default "id"), where results and errors are listed (default
   * "results" and "errors"). */
  itemsKey?: string; idField?: string; idParam?: string; resultsKey?: string; errorsKey?: string;
}
/** A unit the API counts besides requests; jobs spend their `cost` of it. */
export interface ResourceConfig {
  /** As the API's headers name it ("tokens", "input-tokens") and as jobs' `cost` names it. */
  name: string;
  windows: RateWindow[];
  /** What a job that names no cost of it spends (default 1). */
  defaultCost?: number;
  /** Dot path of what the job really spent in a successful answer's JSON body. */
  costPath?: string;
}
/** "This status and this JSON value mean rate limited (or: too many at once)". */
export interface BodyRule {
  /** Statuses whose bodies the rule reads (default: every status). */
  status?: number[];
  /** Dot path of the value that says it: "error.code", "errors[0].type". */
  path: string;
  /** The value there that means it, compared as text with case ignored (default: any value). */
  equals?: string;
  /** "rate-limited" (default): paused and retried as a 429; "concurrency": fewer in flight for
   * a while, no pause. */
  means?: "rate-limited" | "concurrency";
  /** Dot path of how long to wait, in `waitUnit` (default "seconds"). */
  waitPath?: string;
  waitUnit?: "seconds" | "milliseconds";
  /** Dot path of the limit: words ("2 calls per second") or a number per `limitWindowMs`. */
  limitPath?: string;
  limitWindowMs?: number;
}
export interface EngineConfig {
  budgets?: BudgetConfig[];
  retry?: { maxAttempts?: number; baseDelayMs?: number; maxDelayMs?: number; retryRatio?: number;
            retryReserve?: number; defaultPauseMs?: number; timeoutMs?: number };
  aging?: { bulkMs?: number; backgroundMs?: number };
  retentionMs?: number;
  maxBodyBytes?: number;
  /** Where jobs may go; read from the worker script only (a page's is ignored). */
  allow?: string[];
  /** Clear a job's request headers when it fails for good (its record stays). Default false. */
  dropFailedHeaders?: boolean;
}
/** What subscribers receive: every job-state and status broadcast of the worker, and the
 * worker's own errors (also logged in the page's console). A new subscriber gets the last
 * status at once. */
export type WorkerBroadcast =
  | { type: "jobs"; updates: JobUpdate[]; /** Jobs the worker forgot (expired, dismissed). */ removed: string[];
      /** Jobs a page dismissed (their `done` rejects with code "discarded"). */ discarded: string[] }
  | { type: "status"; status: Status }
  | { type: "error"; requestId: null;
      /** "cannot-start": a new worker version could not start (its wasm, its configuration);
       * the working one, if any, goes on. "crashed": the worker stopped after an error and
       * restarts from storage with the next event. */
      error: { code: "cannot-start" | "crashed"; message: string } };

/** A rate-limit route for `fetch` calls the worker takes off the network and queues. */
export interface InterceptRoute {
  /** URL prefix, absolute or relative to the worker's origin (e.g. "/api/"). */
  prefix: string;
  /** Default "*" (any method). */
  method?: string;
  /** Only requests carrying this header are queued (page code opts in per request). */
  header?: string;
}

/** `self.SLUICE_CONFIG` in the service worker script, checked strictly: an unknown or
 * misspelled key stops the worker from installing, and `register()` rejects with where it
 * stands and the key it most likely meant. In a `sw.ts`:
 * `declare const self: { SLUICE_CONFIG: SluiceWorkerConfig };` */
export interface SluiceWorkerConfig extends EngineConfig {
  /** Where this package's files (sluice-worker.js and its wasm) are served, a folder.
   * Default: the worker script's folder. */
  packageUrl?: string;
  /** `fetch` calls to queue instead of sending (answered 202 with the job id). */
  intercept?: InterceptRoute[];
  /** Current headers for a budget's requests (an `Authorization` read from IndexedDB), asked
   * before each request and set over the job's own; after a 401 the budget waits until it
   * gives different ones. May be async; `undefined` adds nothing. */
  credentials?: (
    budget: string,
  ) => Record<string, string> | undefined | Promise<Record<string, string> | undefined>;
}
"#;
