/**
 * A `beforeRun` that throws ends its run `failed` with the hook's message recorded (contracts
 * §8), which its tenant reads (GET /v1/sessions/:id, GET /v1/runs/:id, the console). A hook's
 * own words are the operator's to say; a system error its code let escape — reading a file
 * that is not there, a service of the operator's that refused the connection — names the
 * worker's places (`open '/srv/fleet/ext/config.json'`, `connect ECONNREFUSED 10.0.3.7:5000`),
 * which its tenant reads without them, as a failed job's error is (job-failure.ts); the
 * worker's "extension hook failed" line keeps them. Real API, worker (in this process),
 * Postgres and Redis, and real errors of the file system and the network.
 */
import { readFile } from "node:fs/promises";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { defineExtension } from "../src/worker/extensions.js";
import { WORKER_ADDRESS, WORKER_PATH } from "../src/worker/job-failure.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
let closedPort = 0;
const lines: Record<string, unknown>[] = [];
const logger = pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
const MISSING = join(tmpdir(), `fleet-hook-places-${process.pid}`, "team-config.json");

/** Connects to `port` on 127.0.0.1; rejects with the refusal. */
function connectTo(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => {
      socket.destroy();
      resolve();
    });
    socket.on("error", reject);
  });
}

const gate = defineExtension({
  name: "gate",
  async beforeRun(ctx) {
    const which = (ctx.metadata as { fault?: string }).fault;
    if (which === "file") await readFile(MISSING);
    if (which === "network") await connectTo(closedPort);
    if (which === "words") throw new Error("team quota used up: ask your admin");
  },
});

beforeAll(async () => {
  // A port nothing listens on: one a server had, closed again.
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closedPort = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  fleet = await createFleetEnv("hook-error-places");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, extensions: [gate], logger },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

async function failedRun(fault: string): Promise<string | null> {
  const agent = { model: { provider: "scripted" as const, steps: [{ text: "never" }] } };
  const session = await client.createSession({ agent, metadata: { fault } });
  const { runId } = await client.send(session.id, "go");
  const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
  expect(run.endedReason).toBe("failed");
  return run.error;
}

describe("a beforeRun that lets a system error escape", () => {
  it("a missing file: the run's error names no path of the worker's; the log does", async () => {
    const error = await failedRun("file");
    // Before: "… failed: ENOENT: no such file or directory, open '/tmp/fleet-hook-places-…/team-config.json'"
    expect(error).toBe(
      `beforeRun hook of extension "gate" failed: ENOENT: no such file or directory, open '${WORKER_PATH}'`,
    );
    const logged = lines.filter((l) => l.msg === "extension hook failed").map((l) => JSON.stringify(l));
    expect(logged.some((line) => line.includes(MISSING))).toBe(true);
  }, 60_000);

  it("a refused connection: no address of the worker's network", async () => {
    const error = await failedRun("network");
    // Before: "… failed: connect ECONNREFUSED 127.0.0.1:PORT"
    expect(error).toBe(`beforeRun hook of extension "gate" failed: connect ECONNREFUSED ${WORKER_ADDRESS}`);
  }, 60_000);

  it("the hook's own words are kept as they were", async () => {
    expect(await failedRun("words")).toBe(
      'beforeRun hook of extension "gate" failed: team quota used up: ask your admin',
    );
  }, 60_000);
});
