/**
 * The few error classes of agent-fleet. Each one has a consumer:
 * - `ValidationError`: bad input; the HTTP layer answers 400 naming the field, the CLI exits 2,
 *   the queue fails the job once without retries.
 *   `FleetStateError` is one that depends on the fleet (its tools, its limits), not the input.
 * - `AgentResumeError`: a resume was asked for a session with nothing to resume; HTTP 409.
 * - `FencedError`: a worker lost its lease; it stops at once and appends nothing more.
 * - `NotFoundError`: an unknown session; HTTP 404. One with `fleetState` (what the operator's
 *   settings leave out) is, like a FleetStateError, not kept for an Idempotency-Key.
 * - `TooManyRequestsError`: a tenant is over one of its limits (contracts §10); HTTP 429
 *   with `Retry-After`, and the client and `fleet batch` wait that long and try again.
 */
import type { RefusalReason } from "./resume-reasons.js";

export class ValidationError extends Error {
  override name = "ValidationError";
  /** Where the problem is, e.g. `messages[2].stopReason`; empty when it is the whole input. */
  readonly field: string;
  constructor(field: string, message: string) {
    super(field ? `${field}: ${message}` : message);
    this.field = field;
  }
}

/**
 * A request valid in itself that the fleet as it stands refuses (400 naming the field, as any
 * ValidationError): an agent listing a tool no worker has registered yet, more sessions at
 * once than the tenant's cap. The same request may pass once the operator acts, so an
 * `Idempotency-Key` does not keep this answer (idempotency-hooks.ts), as it keeps no 429.
 * Also a MODEL the operator's settings refuse: an endpoint not declared in
 * FLEET_MODEL_ENDPOINTS, a baseUrl outside FLEET_ALLOWED_BASE_URLS, no price in FLEET_PRICES;
 * and a batch webhook they refuse: no FLEET_WEBHOOK_SECRET, a URL outside
 * FLEET_WEBHOOK_ALLOWED_URLS, a private address under FLEET_WEBHOOK_DENY_PRIVATE.
 */
export class FleetStateError extends ValidationError {
  override name = "FleetStateError";
}

export class AgentResumeError extends Error {
  override name = "AgentResumeError";
  readonly reason: RefusalReason;
  constructor(reason: RefusalReason, detail?: string) {
    super(detail ? `nothing to resume (${reason}): ${detail}` : `nothing to resume (${reason})`);
    this.reason = reason;
  }
}

export class FencedError extends Error {
  override name = "FencedError";
  constructor(
    readonly sessionId: string,
    readonly epoch: number,
  ) {
    super(`session ${sessionId}: lease epoch ${epoch} is no longer current; this worker was fenced out`);
  }
}

export class NotFoundError extends Error {
  override name = "NotFoundError";
  /** `message`: a whole sentence for what is not there, where "WHAT not found" would not read. */
  /**
   * Whether what is missing is missing by the operator's settings, not the caller's input (a
   * webhook secret per tenant while FLEET_WEBHOOK_SECRET_PER_TENANT is off): the same request
   * may find it once the operator acts, so an Idempotency-Key does not keep this 404.
   */
  readonly fleetState: boolean;
  constructor(what: string, message = `${what} not found`, options: { fleetState?: boolean } = {}) {
    super(message);
    this.fleetState = options.fleetState ?? false;
  }
}

/**
 * Whether an error refuses a request by the fleet as it stands (pure): a FleetStateError, or a
 * NotFoundError of something the operator's settings leave out. Its answer is not kept for an
 * Idempotency-Key (idempotency-hooks.ts).
 */
export function refusedByFleetState(error: unknown): boolean {
  return error instanceof FleetStateError || (error instanceof NotFoundError && error.fleetState);
}

/**
 * Which limit a 429 is about (contracts §10); `auth_failures` is a client address's, not a
 * tenant's (auth-failures.ts); `queued_runs` a session's (queued-runs.ts); `big_bodies` one API
 * process's (big-bodies.ts: big request bodies worked on and waiting), as is `big_answers` (the
 * same places, taken by whole answers of big sessions); `results_reads` a tenant's batch results
 * reads open on one API process (tenant-read-slots.ts).
 */
export const TENANT_LIMITS = [
  "active_sessions",
  "request_rate",
  "event_streams",
  "auth_failures",
  "queued_runs",
  "big_bodies",
  "big_answers",
  "results_reads",
] as const;
export type TenantLimit = (typeof TENANT_LIMITS)[number];

export class TooManyRequestsError extends Error {
  override name = "TooManyRequestsError";
  constructor(
    readonly limit: TenantLimit,
    /** Whole seconds to wait before trying again (at least 1). */
    readonly retryAfterSeconds: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The request conflicts with the state of what it names (contracts §9): an Idempotency-Key
 * reused with another body, a batch that takes no more sessions. HTTP 409 with `reason`.
 */
export class ConflictError extends Error {
  override name = "ConflictError";
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}
