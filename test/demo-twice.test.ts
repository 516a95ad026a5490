/**
 * `fleet demo` started again while one runs (a second terminal, the same environment): both
 * took the same database, queue namespace and files. The second emptied the first's folder
 * of files, their workers ran each other's sessions and appended to one log, and the reports
 * said `append_file twice   N sessions (every session's log line was written MORE THAN
 * ONCE)`, exit 1: the guarantee the demo shows, reported broken. The first to end then
 * deleted the other's queues from Redis.
 */
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { demoDatabaseUrl } from "../src/commands/demo.js";
import { databaseName } from "../src/shared/db/client.js";
import { RunQueues } from "../src/shared/queues.js";
import { exitedWithOutput } from "./support/child-exit.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";

describe("fleet demo while another runs on the same database", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("demo-twice");
  });
  afterAll(async () => {
    if (fleet) {
      await fleet.database.sql.unsafe(
        `drop database if exists "${databaseName(demoDatabaseUrl(fleet.config.databaseUrl))}" with (force)`,
      );
      await fleet.close();
    }
  });

  it("is refused with one line, exit 2, and the running one ends clean", async () => {
    const env = { ...process.env, ...fleet.env, FLEET_DEBUG: undefined };
    // The first demo's queues (its prefix: FLEET_PREFIX + `-demo`) paused before it starts:
    // its sessions wait queued until the second has been tried.
    const queues = new RunQueues(fleet.redis, `${fleet.config.prefix}-demo`);
    await Promise.all(queues.all().map((queue) => queue.pause()));
    const first = spawn(
      process.execPath,
      [FLEET_BIN, "demo", "--sessions", "6", "--workers", "1", "--no-kill"],
      {
        cwd: ROOT,
        env,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stdout = "";
    let stderr = "";
    first.stdout.on("data", (d) => {
      stdout += d;
    });
    first.stderr.on("data", (d) => {
      stderr += d;
    });
    const firstExit = exitedWithOutput(first);
    try {
      // Its batch is submitted (its first progress line).
      await waitFor(
        () => /completed 0\/6 sessions/.test(stdout) || first.exitCode !== null,
        90_000,
        "the first demo's batch",
      );
      expect(first.exitCode, stdout + stderr).toBeNull();
      const second = await runFleetCli(
        ["demo", "--sessions", "2", "--workers", "1", "--no-kill"],
        env,
        90_000,
      );
      await Promise.all(queues.all().map((queue) => queue.resume()));
      const demoDb = databaseName(demoDatabaseUrl(fleet.config.databaseUrl));
      expect(second.code, second.stdout + second.stderr).toBe(2);
      expect(second.stdout).toBe("");
      expect(second.stderr.trim()).toBe(
        `fleet demo: another \`fleet demo\` is running on database "${demoDb}": wait for it to end (two demos on one database run each other's sessions and write the same files)`,
      );
      expect(await firstExit, stdout + stderr).toBe(0);
      expect(stdout).toMatch(/^sessions +6 \(6 completed, 0 parked\)$/m);
      expect(stdout).toMatch(/every session's log line was written exactly once/);
    } finally {
      first.kill("SIGKILL");
      await Promise.all(queues.all().map((queue) => queue.close()));
    }
  }, 180_000);
});
