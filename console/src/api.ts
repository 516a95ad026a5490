/**
 * The console's only way to the fleet: the same `/v1` routes any client uses, with the key
 * entered in the page (kept in sessionStorage, for this browser tab's session) sent as
 * `Authorization: Bearer`. Without a key the request goes as it is (the loopback dev mode).
 */

import { codePointLabel } from "./invisible";
import { retryAfterSeconds } from "./retry-wait";

const KEY_STORAGE = "agent-fleet.console.key";

/**
 * Why `key` (as typed, trimmed) cannot be an API key, or null. It is sent in a header, which
 * holds no space and no character past Latin-1: fetch refuses such a request in the browser,
 * and every read of the page failed as if the network were down, tried again for ever.
 */
export function keyProblem(key: string): string | null {
  if (/\s/.test(key))
    return "An API key holds no spaces: paste the key alone (the page sends it as `Bearer KEY` itself).";
  const odd = [...key].find((char) => !/[\x21-\x7e\xa1-\xff]/.test(char));
  return odd === undefined
    ? null
    : `This key holds ${codePointLabel(odd)}, which no API key holds (copied along with it?): paste the key alone.`;
}

export function storedKey(): string | null {
  try {
    return sessionStorage.getItem(KEY_STORAGE);
  } catch {
    return null;
  }
}

export function storeKey(key: string | null): void {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

/**
 * Listeners told when the API answers 401: the page then asks for a key. `refused`: the
 * API's words when the request carried a key (mistyped, revoked), else null (none was sent).
 */
type AuthListener = (refused: string | null) => void;
const authListeners = new Set<AuthListener>();
export function onAuthRequired(listener: AuthListener): () => void {
  authListeners.add(listener);
  return () => authListeners.delete(listener);
}

/** An answer other than 2xx: the API's `{ error: { code, message, reason?, field? } }`. */
export class ApiError extends Error {
  override name = "ApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly reason?: string,
    readonly field?: string,
    /** The seconds its `Retry-After` asks to wait (a 429, a 503), when it has one that can be read. */
    readonly retryAfter?: number,
  ) {
    super(message);
  }
}

/** The headers of a request sent with `key` (the stored key unless told otherwise). */
export function authHeaders(extra: Record<string, string> = {}, key = storedKey()): Record<string, string> {
  return key ? { ...extra, authorization: `Bearer ${key}` } : extra;
}

/**
 * Turns a non-2xx answer into an ApiError, and tells the page when it is a 401 to a request
 * sent with the key still in use (`sentKey`). A 401 to one sent before a key was entered or
 * changed says nothing of the new key, and must not ask for a key again.
 */
export async function failure(response: Response, sentKey: string | null): Promise<ApiError> {
  let body: { error?: { code?: string; message?: string; reason?: string; field?: string } } = {};
  try {
    body = await response.json();
  } catch {
    // Not the API's error shape (a proxy's page, a cut connection): the status says enough.
  }
  const error = body.error ?? {};
  const failed = new ApiError(
    response.status,
    error.code ?? "http_error",
    error.message ?? `${response.status} ${response.statusText}`,
    error.reason,
    error.field,
    retryAfterSeconds(response.headers.get("retry-after")),
  );
  if (response.status === 401 && sentKey === storedKey())
    for (const listener of authListeners) listener(sentKey === null ? null : failed.message);
  return failed;
}

/**
 * How long a read may take before it is given up (and the page's next poll or refresh asks
 * again): a read that never answers, say through a proxy that holds it, must not freeze the
 * page's one-read-at-a-time loading. Writes are not timed out: they may have been done.
 */
export const READ_TIMEOUT_MS = 15_000;

/**
 * A new Idempotency-Key (1 to 255 visible ASCII characters): 128 random bits in hex. Not
 * `crypto.randomUUID`, which a page served over plain http from another host lacks.
 */
export function newIdempotencyKey(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `console-${Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("")}`;
}

/** `idempotencyKey`: sent as `Idempotency-Key`, so that sending the same request again acts once. */
export async function api<T>(
  method: "GET" | "POST",
  path: string,
  body?: unknown,
  options: { idempotencyKey?: string } = {},
): Promise<T> {
  const key = storedKey();
  const headers: Record<string, string> = body === undefined ? {} : { "content-type": "application/json" };
  if (options.idempotencyKey) headers["idempotency-key"] = options.idempotencyKey;
  const response = await fetch(path, {
    method,
    headers: authHeaders(headers, key),
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    signal: method === "GET" ? AbortSignal.timeout(READ_TIMEOUT_MS) : undefined,
  });
  if (!response.ok) throw await failure(response, key);
  return (await response.json()) as T;
}

// The shapes of contracts §1, §2, §4, §9 (as far as the console reads them).

export type ToolCall = { id: string; name: string; arguments: Record<string, unknown> };
export type Message = {
  seq: number;
  createdAt: string;
  role: "user" | "assistant" | "tool" | "internal";
  content: string;
  toolCalls?: ToolCall[];
  stopReason?: string;
  toolCallId?: string;
  name?: string;
  success?: boolean;
  usage?: Record<string, unknown> | null;
};
export type Run = {
  id: string;
  kind: "run" | "resume";
  resumeKind: string | null;
  trigger: string;
  status: "queued" | "running" | "ended";
  endedReason: string | null;
  error: string | null;
  workerId: string | null;
  /** The MODEL it was asked to use in the agent's model's place (a resume's, a fallback's), or null. */
  model?: unknown;
  usage: unknown;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
  timings?: Record<string, unknown>;
};
export type Session = {
  id: string;
  status: string;
  tailState: string;
  parkedReason: string | null;
  agent: unknown;
  metadata: Record<string, unknown>;
  messages: Message[];
  runs: Run[];
  /** With `runsLimit`: the cursor of the runs older than those read (null: none). */
  nextRunsBefore?: string | null;
  /** With `limit`: the `afterSeq` of the next page of messages (null: this page has the last). */
  nextAfterSeq?: number | null;
  usage?: Record<string, number>;
  createdAt: string;
  updatedAt: string;
};
export type SessionSummary = {
  id: string;
  batchId: string | null;
  customId: string | null;
  /** What it is doing (`running`, `interrupted`, …), as a session read says. */
  status: string;
  parked: boolean;
  tailState: string;
  parkedReason: string | null;
  metadata: Record<string, unknown>;
  updatedAt: string;
};
export type SessionPage = { sessions: SessionSummary[]; nextCursor?: string | null };
export type ResumePoint =
  | { resumable: true; kind: string; description: string; unansweredToolCalls: ToolCall[] }
  | { resumable: false; reason: string };
export type Batch = {
  id: string;
  status: "running" | "ended" | "cancelled";
  counts: {
    total: number;
    queued: number;
    running: number;
    completed: number;
    parked: number;
    cancelled: number;
  };
  createdAt: string;
  endedAt?: string | null;
};

/** One page of `POST /v1/batches/:id/resume`. */
export type BatchResumePage = {
  resumed: { sessionId: string; runId: string; kind: string }[];
  refused: { sessionId: string; reason: string }[];
  nextCursor: string | null;
  retryAfterSeconds?: number;
};

const enc = encodeURIComponent;
export const paths = {
  sessions: (query: URLSearchParams) => `/v1/sessions${query.size > 0 ? `?${query}` : ""}`,
  /**
   * `afterSeq`: only the messages after it (the page has the others); `runsLimit`: only the
   * latest runs (the page has the older ones); `limit`: at most that many messages (a page,
   * with `nextAfterSeq`).
   */
  session: (id: string, afterSeq = 0, runsLimit = 0, limit = 0) => {
    const query = new URLSearchParams();
    if (afterSeq > 0) query.set("afterSeq", String(afterSeq));
    if (runsLimit > 0) query.set("runsLimit", String(runsLimit));
    if (limit > 0) query.set("limit", String(limit));
    return `/v1/sessions/${enc(id)}${query.size > 0 ? `?${query}` : ""}`;
  },
  resumePoint: (id: string) => `/v1/sessions/${enc(id)}/resume-point`,
  events: (id: string) => `/v1/sessions/${enc(id)}/events`,
  resume: (id: string) => `/v1/sessions/${enc(id)}/resume`,
  cancel: (id: string) => `/v1/sessions/${enc(id)}/cancel`,
  messages: (id: string) => `/v1/sessions/${enc(id)}/messages`,
  batch: (id: string) => `/v1/batches/${enc(id)}`,
  batchResults: (id: string) => `/v1/batches/${enc(id)}/results`,
  batchCancel: (id: string) => `/v1/batches/${enc(id)}/cancel`,
  batchResume: (id: string) => `/v1/batches/${enc(id)}/resume`,
};
