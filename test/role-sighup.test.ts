/**
 * SIGHUP stops a role gracefully, as SIGTERM does. A terminal that closes (an ssh session
 * that drops, a tmux window killed) sends SIGHUP to the roles started in it, and Node's
 * default for a SIGHUP with no listener is to end the process at once: before, a worker died
 * on the spot with its sessions inside their tools, no "fleet worker stopped", its work left
 * to crash recovery. Now it stops as on SIGTERM: running work let finish for
 * SHUTDOWN_GRACE_MS, then aborted and handed back, exit 0; a second SIGHUP while it stops is
 * ignored, as a second SIGTERM is.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFleetEnv, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";

describe("SIGHUP to a role", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("rolesighup");
  });
  afterAll(async () => fleet?.close());

  it("stops the worker gracefully: its running work aborted and handed back, exit 0", async () => {
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

    worker.child.kill("SIGHUP");
    await waitFor(() => /worker stopping/.test(worker.output()), 30_000, "the worker's stop to begin");
    worker.child.kill("SIGHUP");
    expect(await worker.exited, worker.output()).toBe(0);
    expect(worker.output()).toMatch(/grace period over: aborting running work/);
    expect(worker.output()).toMatch(/fleet worker stopped/);
    expect((await client.getRun(runId)).endedReason).toBe("cancelled");
  }, 120_000);
});
