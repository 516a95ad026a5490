/**
 * One model step: stream the response into an assistant message. A failed request is
 * retried only while no output has arrived (bounded, exponential backoff with jitter,
 * honouring retry-after). Once output has started, a fault ends the step as `interrupted`
 * with the partial text kept — never a silent retry that would duplicate text. One attempt
 * (its stream read, and cut when idle, too long or too big) is model-attempt.ts.
 *
 * This is the one boundary every provider passes through, so it is where model output is
 * made storable (contracts.md §12): NUL and lone surrogates in the text, the tool calls
 * (ids, names, argument keys and values) and the stop reason become U+FFFD. The text is
 * sanitised once, whole, so a surrogate pair split across two deltas is kept, while one cut
 * in half by a broken stream is not stored half (step-message.ts).
 *
 * A whole step keeps the provider's `providerState` (sanitised the same way); a step cut
 * short (`interrupted`) keeps none (contracts §13). When the model has a price (FLEET_PRICES,
 * carried by `provider.identity.price`), reported usage gains its `costUsd`, and a step with
 * unknown usage gets an `estimatedCostUsd` for the budget (never stored).
 *
 * An attempt that failed before any output after its provider reported usage (Anthropic's
 * `message_start`, then an `overloaded_error` event) was billed all the same: what it reported
 * is added to the step its retry stores (its usage, or its estimate), or, when no step comes of
 * the call, handed back as `billed` for the run to count (agent-loop.ts). The caller is told of
 * each such attempt as it fails (`billedAttempt`), before anything else is sent: its tokens are
 * stored then, so a worker killed before the run's end loses none. Each retry is asked
 * of `reserveRetry` with it, so repeated failing attempts cannot spend past `agent.budget`;
 * a rate-limit answer of a gated endpoint that came after such a report is one of them, not a
 * free wait for capacity.
 *
 * Provider limits (contracts §15, endpoint-gate.ts): a request that must wait for its
 * endpoint's capacity longer than the gate allows throws `CapacityWait` out of this call (the
 * job is handed back; nothing was sent, nothing is counted but what earlier attempts of the
 * call were billed for, which it carries as `billed`), and a 429/529/overloaded answer
 * from a gated endpoint is asked again through the gate — which waits out the fleet-wide
 * pause — without counting an attempt: waiting for capacity is not failing. After
 * `MAX_RATE_LIMITED` such answers in one call the job is handed back like a long wait (they
 * never count as attempts, so a 429 storm parks nothing and spends no budget).
 */
import type { AssistantMessage, Usage } from "../shared/messages.js";
import { costOf } from "../shared/prices.js";
import { estimateStepUsage, sumUsage } from "../shared/usage.js";
import { CapacityWait, EndpointRateLimited } from "./endpoint-gate.js";
import { attempt } from "./model-attempt.js";
import { type ModelProvider, type ModelRequest, ProviderError } from "./models/provider.js";
import { sanitizeText } from "./models/sanitize-text.js";
import type { Sleep } from "./models/scripted.js";
import { tenantErrorText } from "./models/tenant-error-text.js";
import { assistant } from "./step-message.js";

export type RetryPolicy = {
  /** Attempts in all, the first included. Default 4. */
  maxAttempts: number;
  /** First backoff; doubles each time. Default 250 ms. */
  baseDelayMs: number;
  /** Cap on one backoff (and on a provider's retry-after). Default 10 s. */
  maxDelayMs: number;
  /**
   * A stream that sends nothing for this long is treated as broken (retried before output,
   * `interrupted` after), so a hung connection never holds a session forever. Default 120 s.
   */
  idleTimeoutMs?: number;
  /**
   * The longest one request may stream, however steadily it sends: a provider trickling a
   * character a second never trips `idleTimeoutMs`, and would hold the session (and a worker
   * slot) forever. Past it the stream is treated as broken, like an idle one. Default 10 min
   * (FLEET_MODEL_STEP_TIMEOUT_MS).
   */
  maxStepMs?: number;
  /**
   * The most text one request may stream. A provider that sends more (a 600 MB body) is cut
   * there like a broken stream: the step is `interrupted` with the text so far kept, instead
   * of hundreds of MB held in memory, parsed while every lease on the worker lapses, and
   * stored. Default 4,000,000 (FLEET_MODEL_MAX_OUTPUT_CHARS).
   */
  maxOutputChars?: number;
};

export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  maxAttempts: 4,
  baseDelayMs: 250,
  maxDelayMs: 10_000,
  idleTimeoutMs: 120_000,
  maxStepMs: 600_000,
  maxOutputChars: 4_000_000,
};

export type ModelStep =
  | {
      ok: true;
      message: AssistantMessage;
      attempts: number;
      /**
       * Only when the provider reported no usage (`message.usage` is `null` or absent, as for
       * a step cut short): a conservative estimate of the step's tokens (usage.ts), for
       * `agent.budget.maxTokens` to count instead of 0. Never stored as the step's usage.
       */
      estimatedUsage?: Usage;
      /** The estimate's cost, when the model has a price (for `agent.budget.maxCostUsd`). */
      estimatedCostUsd?: number;
    }
  | {
      ok: false;
      aborted: boolean;
      error: string;
      attempts: number;
      /**
       * The provider refused the request in a way it would refuse it again (a non-retryable
       * ProviderError: a 400/401/403/404, a key that is not set, a refused redirect), as
       * opposed to attempts that ran out on errors that may pass.
       */
      rejected?: true;
      /** `deps.reserveRetry` refused a retry: why (the part of `agent.budget` that is spent). */
      budgetSpent?: string;
      /**
       * What the failed attempts reported before they failed without output (summed, with its
       * `costUsd` when the model has a price): billed, and stored in no step.
       */
      billed?: Usage;
    };

/** Rate-limit answers of a gated endpoint one call asks again without counting an attempt. */
export const MAX_RATE_LIMITED = 50;
/** The least a job waits once handed back after MAX_RATE_LIMITED refusals in one call. */
const RATE_LIMITED_HAND_BACK_MS = 1_000;

export function backoffMs(
  policy: RetryPolicy,
  attempt: number,
  random: () => number,
  retryAfterMs?: number,
): number {
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, policy.maxDelayMs);
  const exp = Math.min(policy.baseDelayMs * 2 ** (attempt - 1), policy.maxDelayMs);
  return Math.round(exp / 2 + (random() * exp) / 2);
}

/**
 * A step's estimated usage (usage.ts) and, when the model has a price, its cost. `reported`:
 * what the provider reported before the step was cut; each count is at least that, since the
 * provider bills what it reported whatever the estimate says.
 */
function estimated(
  request: ModelRequest,
  message: AssistantMessage,
  price: NonNullable<ModelProvider["identity"]>["price"],
  reported?: Usage,
  billed?: Usage,
): { estimatedUsage: Usage; estimatedCostUsd?: number } {
  const estimate = estimateStepUsage(request, message);
  const own = reported
    ? {
        ...reported,
        inputTokens: Math.max(estimate.inputTokens, reported.inputTokens),
        outputTokens: Math.max(estimate.outputTokens, reported.outputTokens),
      }
    : estimate;
  const estimatedUsage = billed ? sumUsage(billed, own) : own;
  return { estimatedUsage, ...(price ? { estimatedCostUsd: costOf(estimatedUsage, price) } : {}) };
}

/** A hand-back that carries what the call's failed attempts were billed for (the run counts it). */
function withBilled(wait: CapacityWait, billed: { billed?: Usage }): CapacityWait {
  if (billed.billed) wait.billed = billed.billed;
  return wait;
}

export async function callModel(
  provider: ModelProvider,
  request: ModelRequest,
  deps: {
    sleep: Sleep;
    random?: () => number;
    policy?: RetryPolicy;
    /**
     * Asked before each retry of a failed request, with what the failed attempts so far
     * reported (`billed`, priced): a retry is a model call like the first, so
     * `agent.budget.maxModelCalls` counts it, and the billed tokens count against `maxTokens`
     * and `maxCostUsd` (agent-loop.ts). A text: why the budget is spent; the request is not
     * sent again.
     */
    reserveRetry?: (billed: Usage | undefined) => Promise<string | null>;
    /**
     * Told, and awaited, as each attempt fails before any output after its provider reported
     * usage, with that report: the caller counts its tokens in the session at once.
     */
    billedAttempt?: (reported: Usage) => Promise<void>;
  },
): Promise<ModelStep> {
  const policy = deps.policy ?? DEFAULT_RETRY_POLICY;
  const random = deps.random ?? Math.random;
  let rateLimited = 0;
  /** What the attempts that failed before any output reported (see the file comment). */
  let billed: Usage | undefined;
  const price = provider.identity?.price;
  const priced = (usage: Usage): Usage => (price ? { ...usage, costUsd: costOf(usage, price) } : usage);
  const billedSoFar = () => (billed ? { billed: priced(billed) } : {});
  for (let n = 1; ; n++) {
    const result = await attempt(
      provider,
      request,
      policy.idleTimeoutMs ?? DEFAULT_RETRY_POLICY.idleTimeoutMs!,
      policy.maxStepMs ?? DEFAULT_RETRY_POLICY.maxStepMs!,
      policy.maxOutputChars ?? DEFAULT_RETRY_POLICY.maxOutputChars!,
    );
    if ("message" in result) {
      const { message } = result;
      // No usage at all (null: the provider sent none; absent: the scripted model) is unknown.
      if (message.usage == null)
        return { ok: true, message, attempts: n, ...estimated(request, message, price, undefined, billed) };
      if (price || billed) message.usage = priced(billed ? sumUsage(billed, message.usage) : message.usage);
      return { ok: true, message, attempts: n };
    }
    const { error } = result;
    // Nothing was sent: the job is handed back (session-job.ts) and this step taken again later.
    if (error instanceof CapacityWait && !request.signal.aborted) throw withBilled(error, billedSoFar());
    if (!result.outputStarted && result.reported) {
      billed = sumUsage(billed, result.reported);
      await deps.billedAttempt?.(result.reported);
    }
    // One the provider reported usage for (an overloaded_error event after message_start) was
    // processed and billed: an attempt like any failed one (below), its retry asked of the budget.
    if (
      error instanceof EndpointRateLimited &&
      !result.outputStarted &&
      !result.reported &&
      !request.signal.aborted
    ) {
      if (rateLimited < MAX_RATE_LIMITED) {
        rateLimited++;
        n--; // the gate now waits out the endpoint's pause for every worker: not an attempt
        continue;
      }
      // Still refused: the job is handed back (session-job.ts) rather than holding the slot,
      // and the refusals count as nothing, however long the provider keeps answering 429. It
      // waits the pause the gate applied (capped): a retry-after of a century put the job
      // in the delayed set for a century.
      throw withBilled(
        new CapacityWait(error.endpoint, Math.max(RATE_LIMITED_HAND_BACK_MS, error.pausedMs), Date.now()),
        billedSoFar(),
      );
    }
    const cause = error instanceof EndpointRateLimited ? error.cause : error;
    // The error may be stored as a park reason, and may quote what the provider sent: its
    // tenant reads it without the origins of the operator's endpoint (tenant-error-text.ts).
    const messageText = sanitizeText(
      tenantErrorText(
        error instanceof Error ? error.message : String(error),
        cause instanceof ProviderError ? cause.info : undefined,
      ),
    );
    if (request.signal.aborted)
      return { ok: false, aborted: true, error: messageText, attempts: n, ...billedSoFar() };
    if (result.outputStarted) {
      // Half-formed tool calls are dropped: they were never whole, so they never run.
      const message = assistant(result.partial, [], "interrupted");
      // The request was sent and partly answered, so it was billed, though no usage came:
      // the budget counts an estimate of it (the request and the part that arrived), or a
      // model whose answers keep breaking could spend past `maxTokens` one cut at a time.
      return {
        ok: true,
        message,
        attempts: n,
        ...estimated(request, message, price, result.reported, billed),
      };
    }
    const retryable = cause instanceof ProviderError ? cause.retryable : true;
    const failed = { ok: false as const, aborted: false, error: messageText, attempts: n, ...billedSoFar() };
    if (!retryable) return { ...failed, rejected: true };
    if (n >= policy.maxAttempts) return failed;
    const retryAfter = cause instanceof ProviderError ? cause.retryAfterMs : undefined;
    try {
      await deps.sleep(backoffMs(policy, n, random, retryAfter), request.signal);
    } catch {
      return { ...failed, aborted: true };
    }
    const spent = deps.reserveRetry ? await deps.reserveRetry(billedSoFar().billed) : null;
    if (spent !== null) return { ...failed, budgetSpent: spent };
  }
}
