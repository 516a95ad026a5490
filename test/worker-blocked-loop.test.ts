/**
 * A tool that holds `fleet worker`'s event loop for good (a busy loop): the worker's watchdog
 * thread (worker/loop-watchdog.ts) ends the process by SIGALRM once the loop has not turned
 * for FLEET_WORKER_BLOCKED_EXIT_MS, with one line on stderr naming the function that holds
 * it. Before, the process never exited: the sweeper resumed its sessions elsewhere, but it
 * kept its connections and slots and looked alive to its supervisor. Its session is resumed
 * as after any crash: the interrupted call answered with the spec's text, never run again.
 * A worker whose loop turns is left alone by the same watchdog, and stops on SIGTERM as ever.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";
import { sendOneCall } from "./support/scripted-calls.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";

const TOOLS = ["--tools", join(ROOT, "test/fixtures/blocking-tool.ts")];
const WATCHDOG = { FLEET_WORKER_BLOCKED_EXIT_MS: "3000" };

describe("a tool that blocks the worker's event loop for good", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;

  beforeAll(async () => {
    fleet = await createFleetEnv("blockedloop");
    ({ client } = await fleet.startApi());
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  it("ends the worker by SIGALRM naming the tool's function; its session is resumed with the call answered as interrupted", async () => {
    const blocked = await fleet.spawnWorker(WATCHDOG, TOOLS);
    const { id } = await sendOneCall(client, "spin", "s1");
    const spinLog = join(fleet.config.toolDir, "spin-calls.log");
    await waitFor(() => existsSync(spinLog), 60_000, "the tool running");
    const spinAt = Date.now();
    const exit = await Promise.race([
      blocked.exited,
      new Promise((resolve) => setTimeout(() => resolve("still running after 60 s"), 60_000).unref()),
    ]);
    expect(exit, blocked.output()).toBe("SIGALRM");
    console.log(
      `the blocked worker exited ${Date.now() - spinAt} ms after its tool began to spin (bound 3000 ms)`,
    );
    const lines = blocked.output().split("\n");
    const said = lines.filter((line) => line.includes("the event loop has not turned"));
    expect(said, blocked.output()).toHaveLength(1);
    expect(said[0]).toMatch(
      /^fleet worker: the event loop has not turned for \d+ s \(FLEET_WORKER_BLOCKED_EXIT_MS 3000\): .* at spinForever \(\S*\/test\/fixtures\/blocking-tool\.ts:\d+:\d+\) < run \(\S*\/blocking-tool\.ts:\d+:\d+\) < .*; exiting by SIGALRM so that a supervisor restarts it$/,
    );

    // Another worker, with the same watchdog: its loop turns, so it lives on and resumes the session.
    const rescuer = await fleet.spawnWorker(WATCHDOG, TOOLS);
    await waitFor(
      async () => (await client.getSession(id)).messages.at(-1)?.content === "done",
      60_000,
      "the session resumed and completed on the other worker",
    );
    const session = await client.getSession(id);
    const results = session.messages.filter((m) => m.role === "tool");
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ toolCallId: "s1", success: false, content: INTERRUPTED_TEXT });
    // `stalled` when the sweeper saw its lease lapse (LEASE_TTL_MS 2 s) before the process was
    // gone, `crashed` after: either way resumed once, by the sweeper.
    const [first, resume] = session.runs;
    expect(["stalled", "crashed"]).toContain(first!.endedReason);
    expect(resume).toMatchObject({ kind: "resume", trigger: "sweeper", endedReason: "completed" });
    expect(session.runs).toHaveLength(2);
    // The tool ran once, on the worker it blocked.
    expect(await readFile(spinLog, "utf8")).toBe("s1\n");

    // Idle for longer than its watchdog's bound, the rescuer is still there, and stops on SIGTERM.
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    expect(rescuer.child.exitCode).toBeNull();
    rescuer.child.kill("SIGTERM");
    expect(await rescuer.exited).toBe(0);
    expect(rescuer.output()).not.toContain("the event loop has not turned");
  }, 180_000);

  it("ends a worker whose --tools module holds the loop at its import, before it is ready", async () => {
    const child = spawn(
      process.execPath,
      [FLEET_BIN, "worker", "--tools", join(ROOT, "test/fixtures/blocking-module.ts")],
      { env: { ...process.env, ...fleet.env, ...WATCHDOG }, stdio: ["ignore", "pipe", "pipe"] },
    );
    let output = "";
    child.stdout.on("data", (d) => {
      output += d;
    });
    child.stderr.on("data", (d) => {
      output += d;
    });
    const exit = await new Promise((resolve) => {
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        resolve("still running after 60 s");
      }, 60_000);
      child.on("exit", (code, signal) => {
        clearTimeout(timer);
        resolve(signal ?? code);
      });
    });
    expect(exit, output).toBe("SIGALRM");
    expect(output).toMatch(
      /the event loop has not turned for \d+ s .* at \S+ \(\S*\/test\/fixtures\/blocking-module\.ts:/,
    );
    expect(output).not.toContain("fleet worker ready");
  }, 90_000);

  it("leaves a worker frozen (SIGSTOP) for longer than its bound alone once it runs again", async () => {
    const frozen = await fleet.spawnWorker(WATCHDOG);
    frozen.child.kill("SIGSTOP");
    await new Promise((resolve) => setTimeout(resolve, 7_000));
    frozen.child.kill("SIGCONT");
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    expect(frozen.child.signalCode, frozen.output()).toBeNull();
    frozen.child.kill("SIGTERM");
    expect(await frozen.exited).toBe(0);
    expect(frozen.output()).not.toContain("the event loop has not turned");
  }, 90_000);
});

describe("FLEET_WORKER_BLOCKED_EXIT_MS", () => {
  it("is 30 s by default, 0 turns the watchdog off, and a bound under 3 s (the heartbeat is 1 s) is refused", () => {
    expect(loadConfig({}).workerBlockedExitMs).toBe(30_000);
    expect(loadConfig({ FLEET_WORKER_BLOCKED_EXIT_MS: "0" }).workerBlockedExitMs).toBe(0);
    expect(loadConfig({ FLEET_WORKER_BLOCKED_EXIT_MS: "3000" }).workerBlockedExitMs).toBe(3_000);
    expect(() => loadConfig({ FLEET_WORKER_BLOCKED_EXIT_MS: "1000" })).toThrow(
      "FLEET_WORKER_BLOCKED_EXIT_MS: 0 (no watchdog) or at least 3000",
    );
  });
});
