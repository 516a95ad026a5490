/**
 * `fleet up` notices a child's death by its exit, not by its stdout closing: a process the
 * child started (a tool's command run with stdio "inherit", a helper a --tools module spawned)
 * keeps that pipe open after the child is gone. Before, a worker SIGKILLed while such a helper
 * lived was never restarted (the fleet went on with no worker), and `fleet up` stopped by
 * SIGTERM did not exit until the helper ended.
 */
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFleetEnv, FLEET_BIN, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("fleet up with a child whose stdout outlives it", () => {
  let fleet: FleetEnv;
  const helpers: number[] = [];
  beforeAll(async () => {
    fleet = await createFleetEnv("upholdsstdout");
  });
  afterAll(async () => {
    for (const pid of helpers) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    await fleet?.close();
  });

  it("restarts a killed worker and exits on SIGTERM while the worker's helper still runs", async () => {
    const up = spawn(
      process.execPath,
      [FLEET_BIN, "up", "--workers", "1", "--tools", "test/fixtures/stdout-helper-tools.mjs"],
      { env: { ...process.env, ...fleet.env, PORT: "0" }, stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    up.stdout.on("data", (d) => {
      out += d;
    });
    up.stderr.on("data", (d) => {
      out += d;
    });
    const pids = (name: string) =>
      [...out.matchAll(new RegExp(`fleet up: (?:started|restarted) ${name} \\(pid (\\d+)\\)`, "g"))].map(
        (m) => Number(m[1]),
      );
    const collectHelpers = () => {
      for (const m of out.matchAll(/stdout helper pid (\d+)/g))
        if (!helpers.includes(Number(m[1]))) helpers.push(Number(m[1]));
    };
    try {
      await waitFor(() => /fleet up: API on/.test(out), 60_000, "fleet up to start");
      collectHelpers();
      expect(helpers).toHaveLength(1);
      process.kill(pids("worker 0")[0]!, "SIGKILL");
      await waitFor(() => pids("worker 0").length === 2, 30_000, `worker 0 to be restarted:\n${out}`);
      expect(out).toMatch(/fleet up: worker 0 exited \(SIGKILL\) after [\d.]+ s; restarting it in 1\.0 s/);
      await waitFor(() => (out.match(/fleet worker ready/g) ?? []).length === 2, 60_000, "the new worker");
      collectHelpers();
      up.kill("SIGTERM");
      await waitFor(() => up.exitCode !== null, 60_000, `fleet up to exit:\n${out}`);
      expect(up.exitCode).toBe(0);
      // The helpers the workers started are still running: only the exit was waited for.
      for (const pid of helpers) expect(() => process.kill(pid, 0)).not.toThrow();
    } finally {
      if (up.exitCode === null) up.kill("SIGKILL");
      collectHelpers();
    }
  }, 180_000);
});
