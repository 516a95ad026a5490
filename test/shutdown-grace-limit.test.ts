/**
 * SHUTDOWN_GRACE_MS past what a Node timer can wait. The grace (worker.ts) and the worker's
 * exit deadline (shutdown.ts: grace + 21 s) are timers, and Node fires a timer over 2^31-1 ms
 * after 1 ms: an operator who set a huge grace so that SIGTERM let running tools finish got
 * the opposite, every running call aborted at once and the process ended by its deadline.
 */
import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { exitDeadlineMs, supervisorStopMs } from "../src/shared/shutdown.js";
import { MAX_TIMER_MS } from "../src/worker/tools/time-limit.js";

describe("SHUTDOWN_GRACE_MS", () => {
  it("is refused at start when its grace or a deadline after it could not be a timer", () => {
    expect(() => loadConfig({ SHUTDOWN_GRACE_MS: "3000000000" })).toThrow(/SHUTDOWN_GRACE_MS/);
    expect(() => loadConfig({ SHUTDOWN_GRACE_MS: String(MAX_TIMER_MS) })).toThrow(/SHUTDOWN_GRACE_MS/);
  });

  it("takes the largest value whose deadlines all fit in a timer", () => {
    const { shutdownGraceMs } = loadConfig({ SHUTDOWN_GRACE_MS: "2000000000" });
    expect(shutdownGraceMs).toBe(2_000_000_000);
    expect(exitDeadlineMs("worker", shutdownGraceMs)).toBeLessThanOrEqual(MAX_TIMER_MS);
    expect(supervisorStopMs(shutdownGraceMs)).toBeLessThanOrEqual(MAX_TIMER_MS);
  });
});
