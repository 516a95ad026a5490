/**
 * An event id past the newest event of its stream (`Last-Event-ID: 99999999999999-0`, a typo,
 * an id made up, or one from a stream since lost) is answered `410` `expired` as before
 * (contracts §7; README Events: "any id past the stream's last entry: 410", so a client whose
 * stream was lost reads it again), but in words that are true: it was told the id was "older
 * than the events kept", of an id 3,000 years from now. The answer now says the id is past the
 * stream's newest event (naming it), that this stream never sent it, and, when its time has not
 * come, so (its time). An id older than what is kept keeps its words.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const FUTURE = "99999999999999-0";

type Gone = { error: { code: string; reason: string; message: string } };

describe("an event id past the stream's newest event", () => {
  let fleet: FleetEnv;
  let base: string;
  let client: FleetClient;
  let key: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("events-future-id");
    key = (await new ApiKeys(fleet.database).create("acme")).key;
    base = (await fleet.startApi()).api.url;
    client = new FleetClient({ baseUrl: base, apiKey: key });
  }, 60_000);
  afterAll(() => fleet?.close());

  const read = (path: string, after: string) =>
    readSse(`${base}${path}`, {
      after,
      headers: { authorization: `Bearer ${key}` },
      stop: () => true,
      timeoutMs: 5_000,
    });

  it("of a session is a 410 saying the id is past the newest event, not older than the events kept", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, { maxEvents: 10, maxAgeMs: 3_600_000 });
    for (let i = 0; i < 50; i++) await writer.write(id, [], [{ type: "SESSION_PARKED", reason: `r${i}` }]);
    const rows = await fleet.redis.xrevrange(eventStreamKey(fleet.config.prefix, id), "+", "-", "COUNT", 1);
    const newest = rows[0]![0];

    const future = await read(`/v1/sessions/${id}/events`, FUTURE);
    expect(future.status).toBe(410);
    const said = (future.body as Gone).error;
    expect(said).toMatchObject({ code: "gone", reason: "expired" });
    expect(said.message).not.toMatch(/older than/);
    expect(said.message).toContain(`event ${FUTURE} is past the newest event of this stream (${newest})`);
    expect(said.message).toContain("its time, 5138-11-16T09:46:39.999Z, has not come");

    // Just past the newest (as from a stream since lost): the same, without a time to come.
    const [ms, seq] = newest.split("-") as [string, string];
    const next = `${ms}-${Number(seq) + 1}`;
    const lost = ((await read(`/v1/sessions/${id}/events`, next)).body as Gone).error;
    expect(lost.message).toContain(`event ${next} is past the newest event of this stream (${newest})`);
    expect(lost.message).not.toMatch(/older than|has not come/);

    // An id trimmed away is still older than the events kept.
    const old = ((await read(`/v1/sessions/${id}/events`, "1-0")).body as Gone).error;
    expect(old.message).toMatch(/^event 1-0 is older than the events kept/);
  }, 30_000);

  it("of a batch is a 410 saying the same", async () => {
    const batch = await client.createBatch([{ agent: AGENT }], { open: true });
    const future = await read(`/v1/batches/${batch.id}/events`, FUTURE);
    expect(future.status).toBe(410);
    const said = (future.body as Gone).error;
    expect(said).toMatchObject({ code: "gone", reason: "expired" });
    expect(said.message).not.toMatch(/older than/);
    expect(said.message).toContain(`event ${FUTURE} is past the newest event of this stream`);
  }, 30_000);
});
