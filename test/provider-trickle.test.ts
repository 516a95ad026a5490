/**
 * A provider that never finishes but never goes quiet either: it streams a character every
 * 200 ms, forever. `idleTimeoutMs` (120 s of silence) never trips, so before
 * FLEET_MODEL_STEP_TIMEOUT_MS the run stayed `running` for as long as the server kept
 * trickling — one model call, a worker slot and the session held without end, never
 * resumed or parked. Now a request that streams past the limit is a broken stream: the step
 * is `interrupted` with its partial text kept, and the resume policy bounds the rest.
 * Real API, real worker process, in-process sweeper, local fake OpenAI-compatible server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const MAX_ATTEMPTS = 2;

describe("a stream that trickles forever", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;
  let fake: FakeOpenAI;

  beforeAll(async () => {
    fake = await startFakeOpenAI([], {
      respond: () => ({ text: Array.from({ length: 100_000 }, () => "."), chunkDelayMs: 200 }),
    });
    fleet = await createFleetEnv("trickle", { env: { FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1" } });
    ({ client } = await fleet.startApi());
    const env = { ...fleet.env, SWEEPER_MAX_ATTEMPTS: String(MAX_ATTEMPTS), SWEEPER_BACKOFF_MS: "100" };
    fleet.env.SWEEPER_MAX_ATTEMPTS = env.SWEEPER_MAX_ATTEMPTS;
    fleet.env.SWEEPER_BACKOFF_MS = env.SWEEPER_BACKOFF_MS;
    sweeper = await startSweeper({ ...loadConfig(env), logLevel: "silent" }, { serveMetrics: false });
    await fleet.spawnWorker({ FLEET_MODEL_STEP_TIMEOUT_MS: "1500" });
  });
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
    await fake?.close();
  });

  it("each request ends interrupted at the step limit; the session is parked after MAX_ATTEMPTS + 1 calls", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "openai", model: "m", baseUrl: fake.url } },
    });
    const { runId } = await client.send(id, "hi");
    const first = await client.waitForRun(runId, { timeoutMs: 10_000 });
    expect(first.endedReason).toBe("interrupted");
    let session = await client.getSession(id);
    await waitFor(
      async () => {
        session = await client.getSession(id);
        return session.status === "parked";
      },
      30_000,
      "the session to be parked",
    );
    expect(session.parkedReason).toMatch(/^attempts_exhausted/);
    const steps = session.messages.filter((m) => m.role === "assistant");
    expect(steps).toHaveLength(MAX_ATTEMPTS + 1);
    for (const step of steps) {
      expect(step).toMatchObject({ stopReason: "interrupted" });
      expect(step.content).toMatch(/^\.+$/);
    }
    expect(fake.requests).toHaveLength(MAX_ATTEMPTS + 1);
  });
});
