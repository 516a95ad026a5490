/**
 * A tool whose clean-up on abort fails — a listener on its `signal` that throws, or an async one
 * (`signal.onabort = async () => …`) that rejects — at its time limit (the same holds for a
 * cancel, a shutdown, a lost lease). Node reports such a throw as an uncaught exception, and the
 * worker's last resort stopped the whole process (exit 70) at the first such call: every other
 * run on it was cut off and resumed elsewhere, and the call was answered as interrupted though
 * its time limit had been reached. Extensions' hooks were guarded so already
 * (test/hook-abort-listeners.test.ts); a tool's signal was not. Now the listener's failure is
 * logged, the call is answered as timed out, and the worker goes on. A real worker process
 * (with test/fixtures/abort-listener-tools.mjs), the API, Postgres and Redis.
 */
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { toolTimedOutText } from "../src/worker/tools/time-limit.js";
import { createFleetEnv, type FleetEnv, ROOT, type WorkerProcess } from "./support/fleet-env.js";
import { runCalls } from "./support/scripted-calls.js";

const TOOLS = join(ROOT, "test/fixtures/abort-listener-tools.mjs");

describe("a tool's abort listener that fails", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;

  beforeAll(async () => {
    fleet = await createFleetEnv("toolabortlisteners");
    ({ client } = await fleet.startApi());
    worker = await fleet.spawnWorker({}, ["--tools", TOOLS]);
  }, 60_000);
  afterAll(async () => fleet?.close());

  for (const tool of ["cleanup_throws", "cleanup_rejects"]) {
    it(`${tool}: the call is answered as timed out and the worker goes on`, async () => {
      const { endedReason, results } = await runCalls(client, [{ id: "t", name: tool, arguments: {} }], {
        timeoutMs: 20_000,
        onTimeout: () => `worker: ${worker.output().slice(-600)}`,
      });
      expect(worker.output()).not.toContain("uncaught exception");
      expect(worker.child.exitCode).toBeNull();
      expect(endedReason).toBe("completed");
      expect(results).toMatchObject([{ toolCallId: "t", success: false, content: toolTimedOutText(300) }]);
      expect(worker.output()).toContain("tool abort listener failed");
    }, 60_000);
  }
});
