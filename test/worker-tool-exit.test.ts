/**
 * A tool that calls `process.exit(0)` in a real `fleet worker`: the worker exits 70, the code
 * of its last-resort stop, with one line saying why. Before, it exited 0 — a clean stop to a
 * supervisor, which systemd's `Restart=on-failure` does not restart — though no stop was asked
 * and its sessions were left mid-run. The session is resumed by the sweeper as after any crash:
 * the call answered with the spec's text, the tool never run again. A worker's own stop still
 * exits 0.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";
import { sendOneCall } from "./support/scripted-calls.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";

const TOOLS = ["--tools", join(ROOT, "test/fixtures/exiting-tool.ts")];

describe("a tool that calls process.exit(0) in fleet worker", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;

  beforeAll(async () => {
    fleet = await createFleetEnv("toolexit");
    ({ client } = await fleet.startApi());
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  it("makes the worker exit 70 saying so; its session is resumed with the call answered as interrupted", async () => {
    const quitting = await fleet.spawnWorker({}, TOOLS);
    const { id } = await sendOneCall(client, "quit", "q1");
    expect(await quitting.exited, quitting.output()).toBe(70);
    expect(quitting.output()).toContain(
      "fleet worker: exit code 0 asked for while the worker ran (process.exit by a tool, an extension hook or a module it loaded); exiting 70 instead so that a supervisor restarts it",
    );

    const rescuer = await fleet.spawnWorker({}, TOOLS);
    await waitFor(
      async () => (await client.getSession(id)).messages.at(-1)?.content === "done",
      60_000,
      "the session resumed and completed on the other worker",
    );
    const session = await client.getSession(id);
    const results = session.messages.filter((m) => m.role === "tool");
    expect(results).toEqual([
      expect.objectContaining({ toolCallId: "q1", success: false, content: INTERRUPTED_TEXT }),
    ]);
    expect(await readFile(join(fleet.config.toolDir, "quit-calls.log"), "utf8")).toBe("q1\n");

    // Its own stop, asked by SIGTERM, still exits 0.
    rescuer.child.kill("SIGTERM");
    expect(await rescuer.exited).toBe(0);
    expect(rescuer.output()).not.toContain("exiting 70 instead");
  }, 180_000);
});
