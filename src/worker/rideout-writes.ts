/**
 * The writes of a run in progress, each riding out a short Postgres outage (db-rideout.ts
 * `rideOut`): a run's end, a model call's reservation and a failed attempt's billed tokens
 * sent again as they are (keyed: counted once), and an append sent again only after it looks
 * for its own commit, so that it is never stored twice. The other writes fail at once.
 */
import { randomUUID } from "node:crypto";
import { FencedError } from "../shared/errors.js";
import type { Fence, FencedWrites } from "../shared/store/fenced-writes.js";
import { type RideoutDeps, rideOut } from "./db-rideout.js";

/** The writes a run in progress makes, as the ride-out wraps them. */
type RunWrites = Partial<
  Pick<
    FencedWrites,
    | "append"
    | "appendStep"
    | "appendAndEndRun"
    | "endRun"
    | "reserveModelCall"
    | "countBilledTokens"
    | "findCommitted"
  >
>;

/**
 * `writes` with the writes of a run in progress riding out an outage (`rideOut`); the others
 * (a claim, a run's start) fail at once as before. A retried append first looks for its own
 * commit (`findCommitted`); without that method, appends are not retried (a retry could not
 * tell its own commit from a move and would stop as fenced).
 */
export function ridingOutWrites<W extends object>(writes: W, deps: RideoutDeps): W {
  if (deps.windowMs <= 0) return writes;
  const w = writes as W & RunWrites;
  const find = w.findCommitted?.bind(w);
  // Filled in by assignment from `{}`, not built with spreads: a literal that starts with a
  // spread gets a new hidden class for each property it adds (with-fields.ts), and every
  // property read through the proxy below would then miss its inline cache.
  const wrapped: RunWrites = {};
  if (w.endRun)
    wrapped.endRun = (...args: Parameters<FencedWrites["endRun"]>) =>
      rideOut("endRun", () => w.endRun!(...args), deps);
  if (w.reserveModelCall)
    // Every try carries the same key: a try whose commit went through but whose answer
    // was lost is found by the next, not counted twice against the budget.
    wrapped.reserveModelCall = (fence: Fence, max: number, key: string = randomUUID()) =>
      rideOut("reserveModelCall", () => w.reserveModelCall!(fence, max, key), deps);
  if (w.countBilledTokens)
    // Keyed the same way: a failed attempt's tokens are added once, however often they are sent.
    wrapped.countBilledTokens = (fence: Fence, tokens: number, key: string = randomUUID()) =>
      rideOut("countBilledTokens", () => w.countBilledTokens!(fence, tokens, key), deps);
  if (find) {
    if (w.appendStep)
      wrapped.appendStep = (fence, cursor, runId, messages, ...rest) =>
        rideOut(
          "append",
          (retry) =>
            sentOnce(
              retry,
              () => find(fence, cursor, runId, messages),
              () => w.appendStep!(fence, cursor, runId, messages, ...rest),
            ),
          deps,
        );
    if (w.append)
      wrapped.append = (fence, cursor, runId, messages, ...rest) =>
        rideOut(
          "append",
          (retry) =>
            sentOnce(
              retry,
              async () => (await find(fence, cursor, runId, messages))?.stored ?? null,
              () => w.append!(fence, cursor, runId, messages, ...rest),
            ),
          deps,
        );
    if (w.appendAndEndRun && w.endRun)
      wrapped.appendAndEndRun = (fence, cursor, runId, last, outcome, detail) =>
        rideOut(
          "appendAndEndRun",
          (retry) =>
            sentOnce(
              retry,
              async () => {
                const found = await find(fence, cursor, runId, [last.message]);
                if (!found) return null;
                // The message and the run's end committed together: the run is ended, and
                // endRun, which changes nothing on an ended run, answers the session's next
                // queued run and whether the ending statement ended it `cancelled`.
                const { next, cancelled } = await w.endRun!(fence, runId, outcome, detail);
                return { stored: found.stored, next, cancelled, sessionEvents: found.sessionEvents };
              },
              () => w.appendAndEndRun!(fence, cursor, runId, last, outcome, detail),
            ),
          deps,
        );
  }
  return new Proxy(writes, {
    get(target, property, receiver) {
      const own = (wrapped as Record<PropertyKey, unknown>)[property];
      return own ?? Reflect.get(target, property, receiver);
    },
  });
}

/**
 * One try of an append (`send`), the first or a retry. A retry first looks for the append's
 * own commit (`find`: its answer was lost). And when the retry is refused as fenced, it looks
 * again: the first try may still have been running in Postgres when `find` read (it was
 * waiting for the session's row lock when its connection died), and committed just before the
 * retry's own statement, which then met its `last_seq` moved. That is this holder's own
 * append, stored once: found, not taken for a move (the run wrongly ended, its message taken
 * for not stored). `find` throws FencedError itself when the epoch or the history did move.
 */
async function sentOnce<T>(
  retry: boolean,
  find: () => Promise<T | null>,
  send: () => Promise<T>,
): Promise<T> {
  if (!retry) return send();
  const found = await find();
  if (found !== null) return found;
  try {
    return await send();
  } catch (error) {
    if (!(error instanceof FencedError)) throw error;
    const late = await find();
    if (late !== null) return late;
    throw error;
  }
}
