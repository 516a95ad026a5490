/**
 * `fleet up` runs the whole fleet as real processes (migrate, then the API, the sweeper and
 * the workers each as a child process that is restarted when it dies) and stops them all on
 * SIGTERM; `--tools FILE` adds user tools; `--metrics-port-base N` gives each worker a
 * metrics port of its own.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { exitedWithOutput } from "./support/child-exit.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, waitFor } from "./support/fleet-env.js";

async function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, host, () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}

/** A base port with `count` free ports from it (checked by listening on each). */
async function freeRange(count: number): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 40_000);
    const servers: Server[] = [];
    try {
      for (let i = 0; i < count; i++) {
        const server = createServer();
        await new Promise<void>((resolve, reject) => {
          server.once("error", reject);
          server.listen(base + i, "0.0.0.0", () => resolve());
        });
        servers.push(server);
      }
      return base;
    } catch {
      // taken: another base
    } finally {
      await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
    }
  }
  throw new Error("no free port range");
}

/** Starts `fleet up` with its output collected; `pids` reads the children it reported. */
function startUp(args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, [FLEET_BIN, "up", ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d) => {
    out += d;
  });
  child.stderr.on("data", (d) => {
    out += d;
  });
  const exited = exitedWithOutput(child);
  /** The pid of each start of a child: "api" → [first, after the first restart, ...]. */
  const pids = (name: string): number[] =>
    [...out.matchAll(new RegExp(`fleet up: (?:started|restarted) ${name} \\(pid (\\d+)\\)`, "g"))].map((m) =>
      Number(m[1]),
    );
  return { child, output: () => out, exited, pids };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function metricsAnswer(port: number): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    return response.status === 200 && (await response.text()).includes("fleet_");
  } catch {
    return false;
  }
}

function stop(child: ChildProcess): void {
  if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
}

describe("fleet up", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("up");
  });
  afterAll(async () => fleet?.close());

  // One `fleet up` for what were two cases (user tools and a dead worker replaced, with one
  // worker; metrics ports and restarts of each role, with two): every case's `fleet up` starts
  // an API, a sweeper and workers, each a process of its own, so the second start was five
  // more processes (~1-3 s of CPU each), and the roles killed one after another waited out
  // one restart delay (1 s) each.
  it("serves the API and user tools, gives workers distinct metrics ports, restarts a killed sweeper, worker or API, and stops every child on SIGTERM", async () => {
    const port = await freePort();
    const base = await freeRange(3);
    const up = startUp(
      ["--workers", "2", "--tools", "test/fixtures/extra-tools.ts", "--metrics-port-base", String(base)],
      {
        ...fleet.env,
        PORT: String(port),
        // Set for every child: `up` gives each its own port from the base instead.
        METRICS_PORT: String(base),
      },
    );
    const { child, exited } = up;
    const pids = () => ["api", "sweeper", "worker 0", "worker 1"].flatMap((name) => up.pids(name));
    try {
      await waitFor(() => /fleet up: API on/.test(up.output()), 30_000, "fleet up to start");
      expect(up.output()).toContain(
        `fleet up: API on http://127.0.0.1:${port}, 2 worker processes, a sweeper (metrics: workers on ports ${base}, ${base + 1}; sweeper on port ${base + 2})`,
      );
      expect(up.output()).toMatch(/fleet worker ready/);
      for (const p of [base, base + 1, base + 2])
        expect(await metricsAnswer(p), `/metrics on ${p}`).toBe(true);
      // Each role is a child process of its own, not `fleet up` itself.
      const [api] = up.pids("api");
      expect(api).toBeGreaterThan(0);
      expect(api).not.toBe(child.pid);
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);

      // The workers run the user tools of --tools.
      const client = new FleetClient({ baseUrl: `http://127.0.0.1:${port}` });
      const { id } = await client.createSession({
        agent: {
          model: {
            provider: "scripted",
            steps: [
              { toolCalls: [{ id: "s1", name: "shout", arguments: { text: "hi" } }] },
              { text: "done" },
            ],
          },
          tools: ["shout"],
        },
      });
      const { runId } = await client.send(id, "shout hi");
      expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
      const session = await client.getSession(id);
      expect(session.messages[2]).toMatchObject({ role: "tool", content: "HI (s1)", success: true });

      // A dead worker, a dead sweeper and a dead API are replaced (killed together: one restart
      // delay); worker 0 keeps running meanwhile.
      const [worker1] = up.pids("worker 1");
      // The worker's id names its pid: the process `up` reported is the worker itself.
      expect(up.output()).toMatch(new RegExp(`fleet worker ready: \\S+-${worker1}-\\w+,`));
      const killed = [
        ["sweeper", base + 2],
        ["worker 1", base + 1],
      ] as const;
      for (const [name] of killed) process.kill(up.pids(name)[0]!, "SIGKILL");
      process.kill(api!, "SIGKILL");
      for (const [name, metricsPort] of killed) {
        await waitFor(() => up.pids(name).length === 2, 20_000, `${name} to be restarted`);
        expect(up.output()).toMatch(
          new RegExp(
            `fleet up: ${name} exited \\(SIGKILL\\) after [\\d.]+ s; restarting it in 1\\.0 s \\(restart 1\\)`,
          ),
        );
        await waitFor(() => metricsAnswer(metricsPort), 20_000, `${name}'s metrics on ${metricsPort} again`);
      }
      await waitFor(
        () => (up.output().match(/fleet worker ready/g) ?? []).length >= 3,
        30_000,
        "a replacement worker",
      );
      await waitFor(() => up.pids("api").length === 2, 20_000, "the API to be restarted");
      expect(up.output()).toMatch(
        /fleet up: api exited \(SIGKILL\) after [\d.]+ s; restarting it in 1\.0 s \(restart 1\)/,
      );
      await waitFor(
        async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null))?.status === 200,
        20_000,
        "the API to answer again",
      );
      expect(await metricsAnswer(base)).toBe(true);
      expect(up.pids("worker 0")).toHaveLength(1);
    } finally {
      stop(child);
    }
    expect(await exited).toBe(0);
    const started = pids();
    expect(started).toHaveLength(7);
    expect(started.filter(alive), up.output()).toEqual([]);
    // Each child's stop, then its own, said last (before, its last line was `stopping`).
    expect(up.output()).toMatch(/fleet api stopped\n/);
    expect(up.output().trimEnd().split("\n").at(-1)).toBe("fleet up: stopped");
  }, 120_000);

  it("stops and exits non-zero when a role cannot start (the API's port is taken)", async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", () => resolve()));
    const address = taken.address();
    const port = typeof address === "object" && address ? address.port : 0;
    try {
      const up = startUp(["--workers", "1"], { ...fleet.env, PORT: String(port) });
      const code = await up.exited;
      expect(code, up.output()).toBe(2);
      expect(up.output()).toMatch(
        new RegExp(`fleet api: PORT: port ${port} on 127\\.0\\.0\\.1 is already in use`),
      );
      expect(up.output()).toMatch(/fleet up: api could not start \(exit code 2\); stopping the others/);
      const started = ["api", "sweeper", "worker 0"].flatMap((name) => up.pids(name));
      expect(started).toHaveLength(3);
      expect(started.filter(alive)).toEqual([]);
    } finally {
      taken.close();
    }
  }, 60_000);
});
