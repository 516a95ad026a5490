/**
 * A SIGTERM that comes again while a role stops does not cut its stop short. systemd's
 * default KillMode=control-group sends SIGTERM to every process of the unit, so each child of
 * a `fleet up` there gets it twice: from systemd and from `fleet up`; an operator's `kill`
 * sent again does the same. Before, the first SIGTERM removed the role's listener and the
 * second ended the process at once (exit by signal, 143): a worker's running work was neither
 * let finish nor handed back, but left for crash recovery. The stop is bounded by itself
 * (exitDeadlineMs), so the second SIGTERM is not needed to end it.
 *
 * SIGHUP stops a role the same way. A terminal that closes (an ssh session that drops, a tmux
 * window killed) sends SIGHUP to the roles started in it, and Node's default for a SIGHUP with
 * no listener is to end the process at once: before, a worker died on the spot with its
 * sessions inside their tools, no "fleet worker stopped", its work left to crash recovery.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";
import { sendOneCall } from "./support/scripted-calls.js";

describe("a stop signal, and the same signal again while a role stops", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  beforeAll(async () => {
    fleet = await createFleetEnv("repeatedsigterm");
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => fleet?.close());

  for (const signal of ["SIGTERM", "SIGHUP"] as const) {
    it(`${signal}: lets the worker's stop run to its end: the running work aborted and handed back, exit 0`, async () => {
      const worker = await fleet.spawnWorker({ LOG_LEVEL: "info", SHUTDOWN_GRACE_MS: "3000" }, [
        "--tools",
        join(ROOT, "test/fixtures/hanging-tool.ts"),
      ]);
      const callId = `h-${signal}`;
      const { runId } = await sendOneCall(client, "hang", callId);
      await waitFor(
        () => existsSync(join(fleet.env.FLEET_TOOL_DIR!, `hang-${callId}`)),
        30_000,
        "the tool running",
      );

      worker.child.kill(signal);
      await waitFor(() => /worker stopping/.test(worker.output()), 30_000, "the worker's stop to begin");
      worker.child.kill(signal);
      expect(await worker.exited, worker.output()).toBe(0);
      expect(worker.output()).toMatch(/grace period over: aborting running work/);
      expect(worker.output()).toMatch(/fleet worker stopped/);
      expect((await client.getRun(runId)).endedReason).toBe("cancelled");
    }, 120_000);
  }
});
