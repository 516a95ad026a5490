/**
 * Redis restarted without its data (a failover with no persistence) under a session's event
 * stream: the next writer rebuilds the stream from Postgres, every stored message again under
 * new ids. A reader that reconnects with the id of the last event it had must not be served
 * that rebuilt history after its id — it would see every message a second time (contracts
 * §7: no gap, no duplicate) — but `410 expired`, and then reads the whole history once, each
 * message with the run that committed it.
 */
import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";
import { readSse, sseClients } from "./support/sse.js";

describe("event streams when Redis loses its data", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  let redis: ChildProcess;
  let port: number;

  beforeAll(async () => {
    port = await freePort();
    redis = await startRedis(port);
    fleet = await createFleetEnv("eventsredisloss", { redisUrl: `redis://127.0.0.1:${port}` });
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  });
  afterAll(async () => {
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  it("answers 410 to an id from before the loss, not the rebuilt history a second time", async () => {
    await fleet.spawnWorker();
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "first" }, { text: "second" }] } },
    });
    const url = `${base}/v1/sessions/${id}/events`;
    const first = await client.send(id, "one");
    await client.waitForRun(first.runId, { timeoutMs: 15_000 });
    const before = await readSse(url, { stop: (event) => event.type === "RUN_COMPLETED" });
    const seen = before.events.flatMap((e) =>
      e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
    );
    expect(seen).toEqual([1, 2]);

    await stopRedis(redis);
    redis = await startRedis(port); // empty
    const second = await client.send(id, "two");
    await client.waitForRun(second.runId, { timeoutMs: 30_000 });

    const again = await readSse(url, {
      after: before.events.at(-1)!.id,
      stop: (event) => event.type === "RUN_COMPLETED",
    });
    expect(again.status).toBe(410);
    expect(again.body).toMatchObject({ error: { code: "gone", reason: "expired" } });
    // From the start: every stored message once.
    const whole = await readSse(`${url}?after=0-0`, {
      stop: (event, all) =>
        event.type === "RUN_COMPLETED" && all.filter((e) => e.type === "MESSAGE").length >= 4,
    });
    const seqs = whole.events.flatMap((e) =>
      e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
    );
    expect(seqs).toEqual([1, 2, 3, 4]);
    // The messages of the first run, put back by the second run's job, carry their own run
    // (contracts §7: run events carry `runId`), not null for "not this job's".
    const runs = whole.events.flatMap((e) => (e.type === "MESSAGE" ? [e.data.runId] : []));
    expect(runs).toEqual([first.runId, first.runId, second.runId, second.runId]);
  }, 60_000);

  it("ends a stream open across the loss instead of serving the rebuilt history after its old position", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "first" }, { text: "second" }] } },
    });
    const url = `${base}/v1/sessions/${id}/events`;
    await client.waitForRun((await client.send(id, "one")).runId, { timeoutMs: 15_000 });
    const { events } = await readSse(url, { stop: (event) => event.type === "RUN_COMPLETED" });
    let second = "";
    // Open before the loss, positioned after what it has; it reads every second or when woken.
    const open = readSse(url, {
      after: events.at(-1)!.id,
      stop: (event) => event.type === "RUN_COMPLETED" && event.data.runId === second,
      timeoutMs: 30_000,
    });
    let openEnded = false;
    void open.finally(() => {
      openEnded = true;
    });
    await waitFor(async () => (await sseClients(base)) === 1, 10_000, "the reader's stream open");
    await stopRedis(redis);
    redis = await startRedis(port); // empty
    // Its first look after the API's Redis came back ends it (rather than a fixed wait for that look).
    await waitFor(() => openEnded, 20_000, "the open stream ended after the loss");
    expect(await sseClients(base)).toBe(0);
    second = (await client.send(id, "two")).runId;
    await client.waitForRun(second, { timeoutMs: 30_000 });
    const seqs = (await open).events.flatMap((e) =>
      e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : [],
    );
    // Whatever it got after its position, never a message it had (seq 1 and 2).
    expect(seqs.filter((seq) => seq <= 2)).toEqual([]);
  }, 60_000);
});
