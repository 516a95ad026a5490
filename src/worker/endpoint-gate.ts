/**
 * The gate in front of a declared endpoint (contracts §15): every request to it asks the
 * fleet-wide limits (provider-limits.ts) for a slot first, and a 429/529/overloaded answer
 * pauses the endpoint for every worker.
 *
 * - A slot within `maxWaitMs`: the request waits for it here, is checked again right before
 *   it leaves (`ProviderLimits.confirm`: a 429 another worker got since the grant, or a
 *   concurrency permit that lapsed while this process was held up), then goes. One that fails
 *   the check is given back unsent and waits like a refused one (`afterConfirm`).
 * - No slot within `maxWaitMs`: the request throws `CapacityWait` before anything is sent;
 *   the session job hands its job back to the queue (session-job.ts, worker.ts) until its
 *   place on the calendar comes. Waiting is not failing: no attempt, no budget, no parking.
 * - A rate-limit answer throws `EndpointRateLimited`; call-model.ts asks again through the
 *   gate (which now waits for the pause) without counting an attempt.
 *
 * Visible as `fleet_endpoint_wait_seconds{endpoint}` (from the first ask to the slot, hand-backs
 * included), `fleet_model_requests_total{endpoint,outcome}` and the run's `usage.waitedMs`.
 */
import type { Usage } from "../shared/messages.js";
import type { FleetMetrics } from "../shared/metrics.js";
import type { Confirmed, EndpointLimits, ProviderLimits, TenantShares } from "../shared/provider-limits.js";
import { shareOf } from "../shared/provider-limits.js";
import { estimateStepUsage } from "../shared/usage.js";
import { type ModelProvider, type ModelRequest, ProviderError } from "./models/provider.js";
import type { Sleep } from "./models/scripted.js";

/** The request could not get a slot soon: hand the job back for `retryInMs`. */
export class CapacityWait extends Error {
  override name = "CapacityWait";
  /**
   * What the call's earlier attempts were billed for, having failed without output after
   * their provider reported usage (call-model.ts sets it, priced): in the session's token
   * count already, and in the run's usage once the run is handed back (hand-back.ts).
   */
  billed?: Usage;
  constructor(
    readonly endpoint: string,
    readonly retryInMs: number,
    /** When the request first asked (epoch ms): its wait goes on from there after the hand-back. */
    readonly askedAt: number,
  ) {
    super(`endpoint "${endpoint}" has no capacity for ${retryInMs} ms; the job is handed back`);
  }
}

/**
 * The endpoint answered 429/529/overloaded; it is paused fleet-wide for `pausedMs` (the
 * answer's retry-after capped at `maxPauseMs`: what a hand-back waits, never the raw header).
 * Not a failed attempt.
 */
export class EndpointRateLimited extends Error {
  override name = "EndpointRateLimited";
  constructor(
    readonly endpoint: string,
    override readonly cause: ProviderError,
    readonly pausedMs: number,
  ) {
    super(cause.message);
  }
}

/**
 * Whether a provider error means "too many requests / overloaded": 429, 529, or such a type;
 * not a 429 the provider means for good (an account out of quota: not retryable).
 */
export function isRateLimited(error: unknown): error is ProviderError {
  if (!(error instanceof ProviderError) || !error.retryable) return false;
  const { status, type } = error.info;
  if (status === 429 || status === 529) return true;
  return /overloaded|rate_?limit|too_many_requests/i.test(type ?? "");
}

/** What a run has waited so far (kept across hand-backs in the run's usage JSON). */
export type WaitLedger = {
  waitedMs: number;
  /** The pending request's first ask, while it waits. */
  askedAt?: number;
  /** Whether the run's model goes through a gate (its usage then says `waitedMs`, 0 included). */
  gated?: boolean;
  /**
   * The endpoint whose limits count the run's request as waiting (it was refused, and has not
   * been granted or forgotten since): a run that ends so is forgotten there (session-job.ts).
   */
  waitingOn?: string;
};

export type GateMetrics = Pick<FleetMetrics, "endpointWait" | "modelRequests">;

export type EndpointGateDeps = {
  limits: ProviderLimits;
  shares: TenantShares;
  metrics: GateMetrics;
  sleep: Sleep;
};

/**
 * The tokens one request is counted for against `tokensPerMinute` (pure): its estimate before it
 * is sent, and what it reported once answered, each at most one minute's worth. A provider
 * refuses a request larger than its per-minute limit anyway; counted whole, one request of a
 * huge history (or a report of 1e12 tokens) pushed the endpoint's next slot hours ahead for
 * every tenant, and a request the provider refused never gave its estimate back.
 */
function oneMinuteAtMost(tokens: number, tokensPerMinute: number): number {
  return Math.min(tokens, tokensPerMinute);
}

/** What a granted request does after its check right before sending (`ProviderLimits.confirm`). */
export type AfterConfirm =
  | { kind: "send" }
  /** Paused since its grant, longer than the gate still waits: the job is handed back. */
  | { kind: "hand_back"; retryInMs: number }
  /** Paused since its grant: wait the pause out here, then ask again. */
  | { kind: "wait"; ms: number }
  /** Its concurrency permit lapsed while it was held up: ask again at once. */
  | { kind: "ask_again" };

/**
 * The decision after the check (pure). A pause found there is waited like a refusal: here
 * while the request's waits in the worker stay within `maxWaitMs`, else by a hand-back.
 * Nothing was sent either way: no attempt, no budget.
 */
export function afterConfirm(confirmed: Confirmed, waitedHereMs: number, maxWaitMs: number): AfterConfirm {
  if (confirmed.ok) return { kind: "send" };
  switch (confirmed.reason) {
    case "paused":
      return waitedHereMs + confirmed.pausedMs > maxWaitMs
        ? { kind: "hand_back", retryInMs: confirmed.pausedMs }
        : { kind: "wait", ms: confirmed.pausedMs };
    case "permit_lost":
      return { kind: "ask_again" };
    default: {
      const never: never = confirmed;
      throw new Error(`unknown check answer ${JSON.stringify(never)}`);
    }
  }
}

/** `model` behind the gate of `endpoint`. */
export function gatedModel(
  model: ModelProvider,
  input: {
    endpoint: string;
    limits: EndpointLimits | undefined;
    tenant: string;
    /** The waiting request's name: the run's id (one request of a run waits at a time). */
    request: string;
    ledger: WaitLedger;
  },
  deps: EndpointGateDeps,
): ModelProvider {
  const { endpoint, ledger } = input;
  const limits = input.limits ?? {};
  const { tuning } = deps.limits;
  async function* stream(request: ModelRequest) {
    const askedAt = ledger.askedAt ?? Date.now();
    const estimated =
      limits.tokensPerMinute !== undefined
        ? oneMinuteAtMost(
            estimateStepUsage(request, { content: "" }).inputTokens + tuning.expectedOutputTokens,
            limits.tokensPerMinute,
          )
        : 1;
    let permit: string;
    let waitedHere = 0;
    for (;;) {
      const asked = await deps.limits.acquire({
        endpoint,
        limits,
        tenant: input.tenant,
        weight: shareOf(deps.shares, input.tenant),
        request: input.request,
        estimatedTokens: estimated,
      });
      if (asked.granted) {
        permit = asked.permit;
        ledger.waitingOn = undefined;
        if (asked.waitMs > 0) {
          try {
            await deps.sleep(asked.waitMs, request.signal);
          } catch (error) {
            await deps.limits.release(endpoint, permit).catch(() => {});
            throw error;
          }
        }
        // The grant is an answer from before the wait (and before however long this process
        // took to act on it): asked again right before the request leaves, across workers.
        const confirmed = await deps.limits
          .confirm(endpoint, limits.maxConcurrent !== undefined ? permit : undefined)
          .catch((error: unknown) => {
            void deps.limits.release(endpoint, permit).catch(() => {});
            throw error;
          });
        const next = afterConfirm(confirmed, waitedHere, tuning.maxWaitMs);
        if (next.kind === "send") break;
        await deps.limits.release(endpoint, permit).catch(() => {});
        if (next.kind === "hand_back") {
          ledger.askedAt = askedAt;
          throw new CapacityWait(endpoint, next.retryInMs, askedAt);
        }
        if (next.kind === "wait") {
          await deps.sleep(next.ms, request.signal);
          waitedHere += next.ms;
        }
        continue;
      }
      ledger.waitingOn = endpoint;
      if (waitedHere + asked.retryInMs > tuning.maxWaitMs) {
        ledger.askedAt = askedAt;
        throw new CapacityWait(endpoint, asked.retryInMs, askedAt);
      }
      try {
        await deps.sleep(Math.max(10, asked.retryInMs), request.signal);
      } catch (error) {
        // It waits no more (its run was cancelled, or lost its lease): its tenant stops
        // counting it as waiting at once, not once its place has passed.
        await deps.limits.forget(endpoint, input.tenant, [input.request]).catch(() => {});
        ledger.waitingOn = undefined;
        throw error;
      }
      waitedHere += Math.max(10, asked.retryInMs);
    }
    const waited = Math.max(0, Date.now() - askedAt);
    ledger.waitedMs += waited;
    ledger.askedAt = undefined;
    deps.metrics.endpointWait.observe({ endpoint }, waited / 1000);
    const renew =
      limits.maxConcurrent !== undefined
        ? setInterval(
            () => void deps.limits.renew(endpoint, permit).catch(() => {}),
            Math.max(200, Math.floor(tuning.permitTtlMs / 3)),
          )
        : undefined;
    let outcome: "ok" | "rate_limited" | "error" = "error";
    try {
      for await (const event of model.stream(request)) {
        if (event.type === "done") {
          outcome = "ok";
          if (event.usage && limits.tokensPerMinute !== undefined) {
            const actual = oneMinuteAtMost(
              event.usage.inputTokens + event.usage.outputTokens,
              limits.tokensPerMinute,
            );
            await deps.limits.correctTokens(endpoint, limits, actual - estimated).catch(() => {});
          }
        }
        yield event;
      }
    } catch (error) {
      if (isRateLimited(error)) {
        outcome = "rate_limited";
        const pausedMs = await deps.limits
          .pause(endpoint, error.retryAfterMs)
          .catch(() => Math.min(tuning.maxPauseMs, error.retryAfterMs ?? tuning.defaultPauseMs));
        throw new EndpointRateLimited(endpoint, error, pausedMs);
      }
      throw error;
    } finally {
      clearInterval(renew);
      deps.metrics.modelRequests.inc({ endpoint, outcome });
      if (limits.maxConcurrent !== undefined) await deps.limits.release(endpoint, permit).catch(() => {});
    }
  }
  return { ...(model.identity ? { identity: model.identity } : {}), stream };
}
