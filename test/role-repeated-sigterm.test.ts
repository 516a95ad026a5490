/**
 * A SIGTERM that comes again while a role stops does not cut its stop short. systemd's
 * default KillMode=control-group sends SIGTERM to every process of the unit, so each child of
 * a `fleet up` there gets it twice: from systemd and from `fleet up`; an operator's `kill`
 * sent again does the same. Before, the first SIGTERM removed the role's listener and the
 * second ended the process at once (exit by signal, 143): a worker's running work was neither
 * let finish nor handed back, but left for crash recovery. The stop is bounded by itself
 * (exitDeadlineMs), so the second SIGTERM is not needed to end it.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFleetEnv, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";

describe("a second SIGTERM while a role stops", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("repeatedsigterm");
  });
  afterAll(async () => fleet?.close());

  it("lets the worker's stop run to its end: the running work aborted and handed back, exit 0", async () => {
    const worker = await fleet.spawnWorker({ LOG_LEVEL: "info", SHUTDOWN_GRACE_MS: "3000" }, [
      "--tools",
      join(ROOT, "test/fixtures/hanging-tool.ts"),
    ]);
    const { client } = await fleet.startApi();
    const steps = [{ toolCalls: [{ id: "h1", name: "hang", arguments: {} }] }, { text: "never reached" }];
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps }, tools: ["hang"] },
    });
    const { runId } = await client.send(id, "go");
    await waitFor(() => existsSync(join(fleet.env.FLEET_TOOL_DIR!, "hang-h1")), 30_000, "the tool running");

    worker.child.kill("SIGTERM");
    await waitFor(() => /worker stopping/.test(worker.output()), 30_000, "the worker's stop to begin");
    worker.child.kill("SIGTERM");
    expect(await worker.exited, worker.output()).toBe(0);
    expect(worker.output()).toMatch(/grace period over: aborting running work/);
    expect((await client.getRun(runId)).endedReason).toBe("cancelled");
  }, 120_000);
});
