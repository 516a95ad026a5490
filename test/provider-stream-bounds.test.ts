/**
 * Streams a provider never finishes, or finishes too big.
 *
 * A provider that never finishes but never goes quiet either: it streams a character every
 * 200 ms, forever. `idleTimeoutMs` (120 s of silence) never trips, so before
 * FLEET_MODEL_STEP_TIMEOUT_MS the run stayed `running` for as long as the server kept
 * trickling — one model call, a worker slot and the session held without end, never
 * resumed or parked. Now a request that streams past the limit is a broken stream: the step
 * is `interrupted` with its partial text kept, and the resume policy bounds the rest.
 *
 * A provider that answers with hundreds of MB of text: before FLEET_MODEL_MAX_OUTPUT_CHARS
 * all of it was held, parsed (600 MB blocked the worker's event loop past its lease TTL, so
 * every session on that worker was abandoned as `stalled` and resumed, each spending an
 * automatic-resume attempt) and stored (200 MB in one message, 1.4 GB of RSS in the API for
 * one GET). Now the text is cut at the limit and the step is `interrupted`.
 * Real API, real worker process, in-process sweeper, local fake OpenAI-compatible server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const MAX_ATTEMPTS = 2;

describe("streams that never finish, or finish too big", () => {
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
    await fleet.spawnWorker({ FLEET_MODEL_STEP_TIMEOUT_MS: "1500", FLEET_MODEL_MAX_OUTPUT_CHARS: "100000" });
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
    // One request per run, each carrying the steps before it. The worker sends a request
    // again only when nothing at all had arrived by the step limit (retried before output, as
    // callModel does by design: call-model-unit.test.ts): on a loaded machine the first "."
    // can take longer than the 1.5 s to reach the worker. Such a repeat is the same request,
    // sent before the next run's. So the runs are the distinct requests, in order.
    const asked = fake.requests.map((r) => JSON.stringify(r.body.messages));
    const distinct = [...new Set(asked)];
    expect(distinct).toHaveLength(MAX_ATTEMPTS + 1);
    expect(asked).toEqual(distinct.flatMap((d) => asked.filter((a) => a === d)));
    // Each run's request carries the steps the runs before it kept, with the note to redo them.
    const histories = distinct.map((d) => JSON.parse(d) as { role: string; content: string }[]);
    for (const [k, history] of histories.slice(1).entries()) {
      expect(history.slice(0, -2)).toEqual(histories[k]);
      expect(history.at(-2)).toEqual({ role: "assistant", content: steps[k]!.content });
      expect(history.at(-1)).toMatchObject({ role: "user" });
    }
    console.log(`${asked.length - distinct.length} request(s) sent again before any output arrived`);
  });

  it("an answer of 20 MB is cut at FLEET_MODEL_MAX_OUTPUT_CHARS: interrupted, the first 100,000 characters kept", async () => {
    const big = await startFakeOpenAI([], {
      respond: () => ({ text: Array.from({ length: 20 }, () => "B".repeat(1 << 20)) }),
    });
    try {
      const { id } = await client.createSession({
        agent: { model: { provider: "openai", model: "m", baseUrl: big.url } },
      });
      const { runId } = await client.send(id, "hi");
      const run = await client.waitForRun(runId, { timeoutMs: 10_000 });
      expect(run.endedReason).toBe("interrupted");
      const session = await client.getSession(id);
      const step = session.messages.find((m) => m.role === "assistant");
      expect(step).toMatchObject({ stopReason: "interrupted" });
      expect(step?.content.length).toBe(100_000);
    } finally {
      await big.close();
    }
  });
});
