/**
 * A `beforeRun` that throws ends its run `failed` "with the hook's message recorded"
 * (contracts §8). A hook's message can be anything its code threw: `throw new Error(await
 * response.text())` after a failed call quotes a whole error page. That text was stored whole
 * as the run's error — 8,000,000 characters here, in the runs row, every GET of the session
 * and the run's log line, again at every resume the hook refuses — where a provider's error
 * is clipped to MAX_ERROR_CHARS (models/provider.ts). Now the hook's message is clipped the
 * same way, saying how long it was. Real API, worker (in this process), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { MAX_ERROR_CHARS } from "../src/shared/failure-text.js";
import { defineExtension } from "../src/worker/extensions.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
const PAGE = `<html>${"x".repeat(8_000_000)}</html>`;

const gate = defineExtension({
  name: "gate",
  beforeRun() {
    throw new Error(PAGE);
  },
});

beforeAll(async () => {
  fleet = await createFleetEnv("hook-error-size");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, extensions: [gate] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

describe("a beforeRun that throws a huge message", () => {
  it("ends the run failed with the message clipped, saying how long it was", async () => {
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "never" }] } };
    const session = await client.createSession({ agent });
    const { runId } = await client.send(session.id, "go");
    const run = await client.waitForRun(runId, { timeoutMs: 30_000 });
    expect(run.endedReason).toBe("failed");
    expect(run.error).toMatch(
      /^beforeRun hook of extension "gate" failed: <html>x+… \(8000013 characters in all\)$/,
    );
    // Before: 8,000,050 characters.
    expect(run.error!.length).toBeLessThan(MAX_ERROR_CHARS + 100);
    const [stored] = await fleet.database.sql<{ n: number }[]>`
      select length(error) as n from runs where id = ${runId}`;
    expect(stored!.n).toBe(run.error!.length);
  }, 60_000);
});
