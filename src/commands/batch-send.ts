/**
 * How `fleet batch submit` sends one part: again after a network error, a 5xx or a 409 of a
 * key still in use, with the same Idempotency-Key (the part acts once); and again after a
 * 429 until the tenant limit leaves room. The waits are a pure function (`partRetryDelayMs`)
 * and the sleep is injectable, so a test counts the waits asked for instead of timing them.
 */
import type { Writable } from "node:stream";
import { FleetApiError } from "../producer/client.js";
import { write } from "./api-client.js";

/** A failure that may pass: the API not reached, or a 5xx. */
export const unreachableOr5xx = (error: unknown): boolean =>
  !(error instanceof FleetApiError) || error.status >= 500;

/** How long `submit` waits for a tenant limit to leave room for one part. */
const LIMIT_WAIT_MS = 10 * 60_000;
/** Tries of one part after network errors, 5xx and 409s (the first one included). */
export const PART_TRIES = 6;
/** The longest wait between two tries: the last step of the backoff (250 ms · 2^5). */
export const PART_RETRY_CAP_MS = 250 * 2 ** (PART_TRIES - 1);
/** The shortest wait, even when a server asks for none: a hot loop helps no server back up. */
export const PART_RETRY_FLOOR_MS = 100;

/**
 * The wait before try `attempt + 1` (attempt ≥ 1). A 5xx's Retry-After (the API answers its
 * 503s `Retry-After: 1` while Postgres or Redis is away) is the server's own estimate and is
 * honoured, bounded to [PART_RETRY_FLOOR_MS, PART_RETRY_CAP_MS] so that a proxy's
 * `Retry-After: 3600` does not hang the command for an hour; without one (no answer, a 502
 * of a proxy, a 409), 250 ms · 2^attempt — 0.5, 1, 2, 4, 8 s, 15.5 s in all. Before, the
 * backoff was used always, so a 503 asking for 1 s still got 15.5 s of waits.
 */
export function partRetryDelayMs(attempt: number, retryAfterSeconds: number | undefined): number {
  const backoff = Math.min(PART_RETRY_CAP_MS, 250 * 2 ** attempt);
  if (retryAfterSeconds === undefined || !Number.isFinite(retryAfterSeconds)) return backoff;
  return Math.min(PART_RETRY_CAP_MS, Math.max(PART_RETRY_FLOOR_MS, retryAfterSeconds * 1_000));
}

/** The first wait after a 429 that names no Retry-After. */
const LIMIT_RETRY_FIRST_MS = 5_000;
/** The longest wait the growing backoff reaches after 429s (a longer Retry-After is honoured). */
export const LIMIT_RETRY_CAP_MS = 30_000;

/**
 * The wait after the `limited`-th 429 (≥ 1) of one part (pure): the server's Retry-After (5 s
 * without one; at least 1 s) doubled at each 429 of the part, up to 30 s, and never under the
 * Retry-After itself. Each try sends the whole part again (up to 8 MiB, 50,000 messages) and
 * the API reads and parses it before its limit can refuse it (the cap on active sessions
 * depends on how many of the part's sessions have input); at a constant 5 s, a limit that
 * lasted 10 minutes had the part sent and parsed 121 times.
 */
export function limitRetryDelayMs(limited: number, retryAfterSeconds: number | undefined): number {
  const asked =
    retryAfterSeconds === undefined || !Number.isFinite(retryAfterSeconds)
      ? LIMIT_RETRY_FIRST_MS
      : Math.max(1_000, retryAfterSeconds * 1_000);
  return Math.max(asked, Math.min(LIMIT_RETRY_CAP_MS, asked * 2 ** (limited - 1)));
}

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Sends one part, again after a network error or a 5xx, with the same Idempotency-Key; and
 * again after a 429 (a tenant limit: nothing was done), for up to LIMIT_WAIT_MS, saying so
 * once on stderr and waiting longer at each 429 (limitRetryDelayMs) — the batch's own sessions make room as they end, and an open batch whose
 * next part is never sent would never end.
 */
export async function sendPart<T>(
  send: () => Promise<T>,
  io: { stderr: Writable },
  sleep: (ms: number) => Promise<void> = pause,
  /** false: only 429s are waited out; anything else is thrown at once (`fleet batch resume`). */
  retryFailures = true,
): Promise<T> {
  let limitedSince: number | undefined;
  let limited = 0;
  for (let attempt = 1; ; ) {
    try {
      return await send();
    } catch (error) {
      if (error instanceof FleetApiError && error.status === 429) {
        if (limitedSince === undefined) {
          limitedSince = Date.now();
          await write(io.stderr, `a tenant limit was reached (${error.message}); waiting for room\n`);
        } else if (Date.now() - limitedSince > LIMIT_WAIT_MS) throw error;
        limited++;
        await sleep(limitRetryDelayMs(limited, error.retryAfter));
        continue;
      }
      if (!retryFailures) throw error;
      const retriable = unreachableOr5xx(error) || (error as FleetApiError).status === 409;
      const inUse = error instanceof FleetApiError && error.reason === "idempotency_key_in_use";
      if (
        !retriable ||
        attempt >= PART_TRIES ||
        (error instanceof FleetApiError && error.status === 409 && !inUse)
      )
        throw error;
      const serverAsked =
        error instanceof FleetApiError && error.status >= 500 ? error.retryAfter : undefined;
      await sleep(partRetryDelayMs(attempt, serverAsked));
      attempt++;
    }
  }
}
