/**
 * `fleet demo` stopped by Ctrl-C (SIGINT) while its batch runs: it cancels the batch, stops
 * its worker processes, empties its queue namespace in Redis, says so in a last line and exits
 * 130. Before, Node's default ended it at once, its `finally` unrun: the worker processes ran
 * on (until they noticed), the batch's jobs stayed in Redis and its sessions unfinished in the
 * demo's database, and the next `fleet demo` ran them beside its own (a report that said
 * every session was clean, exit 1).
 */
import { execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { demoDatabaseUrl } from "../src/commands/demo.js";
import { databaseName } from "../src/shared/db/client.js";
import { exitedWithOutput } from "./support/child-exit.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";

const run = promisify(execFile);

/** Whether process `pid` still exists. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("fleet demo stopped by SIGINT", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("demo-interrupt");
  });
  afterAll(async () => {
    if (fleet) {
      await fleet.database.sql.unsafe(
        `drop database if exists "${databaseName(demoDatabaseUrl(fleet.config.databaseUrl))}" with (force)`,
      );
      await fleet.close();
    }
  });

  it("cancels its batch, stops its workers, leaves nothing in Redis, and exits 130 saying so", async () => {
    const child = spawn(process.execPath, [FLEET_BIN, "demo", "--sessions", "200", "--no-kill"], {
      cwd: ROOT,
      env: { ...process.env, ...fleet.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => {
      stdout += d;
    });
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    const exited = exitedWithOutput(child);
    // Its batch is created and followed: each session sleeps 1.5 s in a tool, so none has ended.
    await waitFor(() => /completed \d+\/200 sessions/.test(stdout), 90_000, "the batch followed");
    // Its two workers (in a checkout run through tsx, esbuild's service is a child too).
    const { stdout: ps } = await run("ps", ["-o", "pid=,args=", "--ppid", String(child.pid)]);
    const workers = ps
      .split("\n")
      .filter((line) => / worker\b/.test(line))
      .map((line) => Number.parseInt(line, 10));
    expect(workers).toHaveLength(2);
    child.kill("SIGINT");
    const code = await exited;

    expect(code, `${stdout}\n${stderr}`).toBe(130);
    expect(stderr.trimEnd().split("\n").at(-1)).toMatch(
      /^fleet demo: stopped by SIGINT; its batch \S+ was cancelled and its processes stopped$/,
    );
    expect(workers.filter(alive)).toEqual([]);
    const prefix = /queue prefix (\S+)/.exec(stdout)![1]!;
    expect(await fleet.redis.keys(`${prefix}:*`)).toEqual([]);
    // Nothing is left for a sweeper (the next demo's) to resume.
    const demo = postgres(demoDatabaseUrl(fleet.config.databaseUrl), { max: 1, onnotice: () => {} });
    try {
      const [row] = await demo<{ n: number }[]>`select count(*)::int as n from runs where status <> 'ended'`;
      expect(row!.n).toBe(0);
    } finally {
      await demo.end();
    }
  }, 180_000);
});
