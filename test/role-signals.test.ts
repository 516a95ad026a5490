/**
 * `fleet api`, `fleet worker` and `fleet sweeper` listen for SIGTERM before they print their
 * ready line: whoever reads that line (a supervisor, a test, `fleet up`) may stop the role at
 * once, and a signal that arrived before the listener would kill the process outright, with
 * no graceful stop (test/worker-shutdown.test.ts once saw exactly that under load). Each role
 * runs here in this process; when it prints its line, the listener it added is already there,
 * and calling it stops the role with exit code 0 and a last line that says so.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { apiCommand, sweeperCommand, workerCommand } from "../src/commands/serve.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("roles listen for SIGTERM before they say ready", () => {
  let fleet: FleetEnv;
  const saved: Record<string, string | undefined> = {};
  beforeAll(async () => {
    fleet = await createFleetEnv("rolesignals");
    for (const [key, value] of Object.entries({ ...fleet.env, PORT: "0", LOG_LEVEL: "silent" })) {
      saved[key] = process.env[key];
      process.env[key] = value;
    }
  });
  afterAll(async () => {
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
    await fleet?.close();
  });

  const roles: [string, () => Promise<number>][] = [
    ["api", () => apiCommand({ port: 0 })],
    ["worker", () => workerCommand({ metricsPort: 0 })],
    ["sweeper", () => sweeperCommand({ metricsPort: 0 })],
  ];
  for (const [role, command] of roles) {
    it(`fleet ${role}`, async () => {
      const before = new Set(process.listeners("SIGTERM"));
      let atReady: NodeJS.SignalsListener[] | undefined;
      const lines: unknown[] = [];
      const log = vi.spyOn(console, "log").mockImplementation((line: unknown) => {
        lines.push(line);
        if (typeof line === "string" && line.startsWith(`fleet ${role} ready`))
          atReady = process.listeners("SIGTERM").filter((l) => !before.has(l));
      });
      try {
        const exited = command();
        await vi.waitFor(() => expect(atReady).toBeDefined(), { timeout: 20_000, interval: 20 });
        expect(atReady).toHaveLength(1);
        // What the signal would do: only the role's own listener, not the test process's.
        atReady![0]!("SIGTERM");
        expect(await exited).toBe(0);
        // Its last line says the stop is over (the API's and the sweeper's said nothing: their
        // last line was their start's, whether they stopped or were killed).
        expect(lines.at(-1)).toBe(`fleet ${role} stopped`);
        expect(process.listeners("SIGTERM").filter((l) => !before.has(l))).toEqual([]);
      } finally {
        log.mockRestore();
      }
    });
  }
});
