/**
 * The console's waits (console/src/abortable-sleep.ts: live.ts's backoff between connections
 * and its polling, a wait a second while it polls) leave nothing on the page's signal once
 * they are over. Each added an abort listener that stayed until the page stopped following
 * the session: a page polling for a day held 86,400 of them, each with its closure.
 */
import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import { sleep } from "../console/src/abortable-sleep.js";

describe("the console's waits", () => {
  it("leave no listener on the signal once over, and end at once when it aborts", async () => {
    const controller = new AbortController();
    for (let i = 0; i < 50; i++) await sleep(1, controller.signal);
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);

    // A minute's wait ends with the abort (the test's 5 s limit would fail it otherwise).
    const waiting = sleep(60_000, controller.signal);
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(1);
    controller.abort();
    await waiting;
    expect(getEventListeners(controller.signal, "abort")).toHaveLength(0);
    await sleep(60_000, controller.signal);
  });
});
