/**
 * FLEET_HOOK_TIMEOUT_MS past the longest Node timer (2^31-1 ms, about 24.8 days). An operator
 * who set a huge value to mean "no limit" got the opposite: Node fires such a timer after
 * 1 ms, so every hook "did not finish within 3000000000 ms" at once, every `beforeRun` ended
 * its run `failed`, and every session was parked after its resumes failed the same way.
 */
import { describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { Extensions } from "../src/worker/hook-runner.js";

const metrics = { hookFailures: { inc() {} } } as never;
const log = { warn() {} };

describe("FLEET_HOOK_TIMEOUT_MS", () => {
  it("is refused at start past the longest timer, like FLEET_TOOL_TIMEOUT_MS", () => {
    expect(loadConfig({ FLEET_HOOK_TIMEOUT_MS: "2147483647" }).hookTimeoutMs).toBe(2_147_483_647);
    expect(() => loadConfig({ FLEET_HOOK_TIMEOUT_MS: "3000000000" })).toThrow(/FLEET_HOOK_TIMEOUT_MS/);
  });

  it("given to the worker from code past that, waits for a hook as long as a timer can", async () => {
    const quick = () => new Promise((resolve) => setTimeout(resolve, 50));
    const extensions = new Extensions([{ name: "quick", beforeRun: quick }], metrics, log, 3_000_000_000);
    expect(await extensions.beforeRun({} as never)).toBeNull();
    let signal: AbortSignal | undefined;
    await extensions.sessionDeleted("s", { tenant: "t", deletedAt: new Date(), attempt: 1 });
    const deleting = new Extensions(
      [
        {
          name: "d",
          onSessionDeleted: async (_id, ctx) => {
            signal = ctx.signal;
            await quick();
          },
        },
      ],
      metrics,
      log,
      3_000_000_000,
    );
    await deleting.sessionDeleted("s", { tenant: "t", deletedAt: new Date(), attempt: 1 });
    expect(signal?.aborted).toBe(false);
  });
});
