/**
 * `fleet up` runs the whole fleet as real processes (migrate, API, sweeper, workers that
 * are restarted when they die) and stops on SIGTERM; `--tools FILE` adds user tools.
 */
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, waitFor } from "./support/fleet-env.js";

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}

describe("fleet up", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("up");
  });
  afterAll(async () => fleet?.close());

  it("serves the API, runs sessions with user tools, replaces a dead worker, and stops on SIGTERM", async () => {
    const port = await freePort();
    const child = spawn(
      process.execPath,
      [FLEET_BIN, "up", "--workers", "1", "--tools", "test/fixtures/extra-tools.ts"],
      { env: { ...process.env, ...fleet.env, PORT: String(port) }, stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
    });
    child.stderr.on("data", (d) => {
      out += d;
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    try {
      await waitFor(() => /fleet worker ready/.test(out), 30_000, "fleet up to start a worker");
      expect(out).toMatch(/fleet up: API on http:\/\/127\.0\.0\.1:\d+, 1 worker processes, a sweeper/);
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

      // A worker that dies is replaced.
      const workerPid = Number(/fleet worker ready: \S+-(\d+)-\w+,/.exec(out)![1]);
      process.kill(workerPid, "SIGKILL");
      await waitFor(
        () => (out.match(/fleet worker ready/g) ?? []).length >= 2,
        30_000,
        "a replacement worker",
      );
      expect(out).toMatch(/a worker exited \(SIGKILL\); starting another/);
    } finally {
      child.kill("SIGTERM");
    }
    expect(await exited).toBe(0);
  }, 90_000);
});
