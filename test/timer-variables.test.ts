/**
 * Every `*_MS` variable that feeds a timer is at most the longest delay a Node timer takes
 * (2^31-1 ms): a longer one fires after 1 ms, so a huge value meant as "never" acted at once
 * (SWEEP_INTERVAL_MS=3000000000: a sweep every millisecond; FLEET_SSE_HEARTBEAT_MS: a comment
 * line every millisecond on every stream). Read from the schema, so a new variable is covered.
 */
import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { CONFIG_VARIABLES, MAX_TIMER_MS } from "../src/shared/config-schema.js";

/** `*_MS` variables that no timer waits on, or that have a lower bound of their own. */
const NOT_TIMERS: Record<string, string> = {
  FLEET_EVENTS_MAX_AGE_MS: "compared with event ids' times; Redis takes the expiry",
  FLEET_RUN_STUCK_AFTER_MS: "compared with the last append's time",
  WORKER_GATHER_MS: "at most 50",
  FLEET_PREFLIGHT_TIMEOUT_MS: "at most 600,000",
  FLEET_SCRIPTED_MAX_DELAY_MS: "at most 600,000 (a scripted step's own bound)",
  SHUTDOWN_GRACE_MS: "at most 2^31-1 less 2 min (deadlines are added to it)",
};

const timers = CONFIG_VARIABLES.filter((name) => name.endsWith("_MS") && !(name in NOT_TIMERS));

describe("timer variables", () => {
  it("are the ones expected (a new *_MS variable is bounded unless listed here)", () => {
    expect(timers.length).toBeGreaterThanOrEqual(13);
    for (const name of Object.keys(NOT_TIMERS)) expect(CONFIG_VARIABLES).toContain(name);
  });

  it.each(timers)("%s: the longest timer is taken, a longer value refused naming the variable", (name) => {
    expect(() => loadConfig({ [name]: String(MAX_TIMER_MS) })).not.toThrow();
    expect(() => loadConfig({ [name]: "3000000000" })).toThrow(
      new RegExp(`${name}: at most ${MAX_TIMER_MS} \\(about 24\\.8 days`),
    );
  });
});
