/**
 * The signal each `onSessionDeleted` hook is given (aborted at FLEET_HOOK_TIMEOUT_MS or when
 * the worker stops) no longer leaves an entry behind on the worker's stop signal. It was
 * `AbortSignal.any([AbortSignal.timeout(…), stop])`: on Node 20 each such call adds a WeakRef
 * to the stop signal's dependants, which outlives the signal it refers to, so a worker that
 * ran the hooks for 10,000 deleted sessions kept 10,000 entries on a signal that lives as long
 * as the worker (measured here: the set's size after the hooks have run and been collected).
 */
import { describe, expect, it } from "vitest";
import { Extensions } from "../src/worker/hook-runner.js";

const metrics = { hookFailures: { inc() {} } } as never;
const log = { warn() {} };

/** The entries Node keeps on `signal` for the composite signals made from it (0: none kept). */
function dependants(signal: AbortSignal): number {
  const symbol = Object.getOwnPropertySymbols(signal).find((s) => s.description === "kDependantSignals");
  const set = symbol === undefined ? undefined : (signal as unknown as Record<symbol, Set<unknown>>)[symbol];
  return set?.size ?? 0;
}

describe("onSessionDeleted's signal", () => {
  it("adds nothing to the worker's stop signal per deleted session", async () => {
    const signals: AbortSignal[] = [];
    const extensions = new Extensions(
      [{ name: "d", onSessionDeleted: (_id, ctx) => void signals.push(ctx.signal) }],
      metrics,
      log,
      60_000,
    );
    const stop = new AbortController();
    for (let i = 0; i < 1_000; i++)
      await extensions.sessionDeleted(
        `s${i}`,
        { tenant: "t", deletedAt: new Date(), attempt: 1 },
        stop.signal,
      );
    expect(signals).toHaveLength(1_000);
    expect(signals.every((signal) => !signal.aborted)).toBe(true);
    signals.length = 0;
    expect(dependants(stop.signal)).toBeLessThan(10);
  });

  it("is aborted when the worker stops while a hook runs, and at the hook's time limit", async () => {
    const stop = new AbortController();
    let seen: AbortSignal | undefined;
    const slow = new Extensions(
      [
        {
          name: "d",
          onSessionDeleted: (_id, ctx) => {
            seen = ctx.signal;
            stop.abort(new Error("stopping"));
          },
        },
      ],
      metrics,
      log,
      60_000,
    );
    await slow.sessionDeleted("s", { tenant: "t", deletedAt: new Date(), attempt: 1 }, stop.signal);
    expect(seen?.aborted).toBe(true);
    let timed: AbortSignal | undefined;
    const quick = new Extensions(
      [
        {
          name: "d",
          onSessionDeleted: async (_id, ctx) => {
            timed = ctx.signal;
            await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
          },
        },
      ],
      metrics,
      log,
      50,
    );
    await quick.sessionDeleted(
      "s",
      { tenant: "t", deletedAt: new Date(), attempt: 1 },
      new AbortController().signal,
    );
    const signal = timed!;
    if (!signal.aborted) await new Promise((resolve) => signal.addEventListener("abort", resolve));
    expect((signal.reason as DOMException).name).toBe("TimeoutError");
  });
});
