/**
 * A stream turned on (`PATCH … {"sessionEvents": true}`) holds every stored message when the
 * answer comes (README, session-events-switch.ts), so a reader from `0-0` reads the history.
 * A run that starts in the moment between the API lifting the `off` marker and writing the
 * history (a job that learnt "on" from its append) found no stream, so it started one at its
 * RUN_STARTED (`start`, as after an expiry): the API's history write then only followed it,
 * and `0-0` got 410 instead of the history. The marker the API leaves until it has written
 * refuses that start: the job's write is a gap it fills from the first message.
 *
 * And a start not taken because a stream began meanwhile with fewer messages (the history of
 * a stream turned on, written in chunks) was ignored: a RUN_STARTED written alone went in
 * after the messages there so far, and the rest of the history came after it — a reader
 * without an id read old messages as the run's. It is a gap now, filled before the event.
 *
 * The same for a stream dropped because Postgres was restored to an earlier point (its
 * messages are not the stored ones): the one who drops it writes every stored message again,
 * and a run starting in between started the stream at its RUN_STARTED instead (0-0: 410).
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, type SessionEventInput, seqKey } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { SessionEventLog } from "../src/shared/session-event-log.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const RETENTION = { maxEvents: 100_000, maxAgeMs: 600_000 };

const started = (runId: string): SessionEventInput => ({
  type: "RUN_STARTED",
  runId,
  kind: "run",
  resumeKind: null,
  trigger: "api",
});

describe("a run that starts a stream while its history is written", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  beforeAll(async () => {
    fleet = await createFleetEnv("evstartrace");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const streamOf = async (sessionId: string) => {
    const rows = (await fleet.redis.xrange(eventStreamKey(fleet.config.prefix, sessionId), "-", "+")) as [
      string,
      string[],
    ][];
    return rows.map(([, fields]) => {
      const data = JSON.parse(fields[3]!) as { type: string; message?: { seq: number } };
      return data.type === "MESSAGE" ? `MESSAGE ${data.message!.seq}` : data.type;
    });
  };

  it("holds every stored message when turned on, also when a run's first write lands between the marker and the history", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "five" }] } },
      sessionEvents: false,
      messages: [
        { role: "user", content: "one" },
        { role: "assistant", content: "two", stopReason: "end_turn" },
        { role: "user", content: "three" },
        { role: "assistant", content: "four", stopReason: "end_turn" },
      ],
    });
    // A run of the session started before (it had a stream once, or could have had).
    await fleet.database.sql`insert into runs (id, session_id, kind, trigger, status, started_at)
      values (${randomUUID()}, ${id}, 'run', 'api', 'ended', now() - interval '1 hour')`;
    const history = (await client.getSession(id)).messages as StoredMessage[];
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, RETENTION, undefined, true, 0, {
      database: fleet.database,
    });
    // Off, as PATCH {"sessionEvents": false} left it; then PATCH on commits the setting.
    await writer.dropStream(id);
    await fleet.database.sql`update sessions set session_events = true where id = ${id}`;
    // The job of the next run, which learns "on" from its append and writes its RUN_STARTED
    // after the four stored messages (the run's own user message follows it).
    const errors: unknown[] = [];
    const job = new SessionEventLog(
      writer,
      id,
      history,
      () => null,
      (e) => errors.push(e),
      null,
    );
    const writeHistory = writer.writeAfterSync.bind(writer);
    writer.writeAfterSync = async (...args) => {
      await job.emit([started("next")], 4);
      return writeHistory(...args);
    };
    await writer.startStream(fleet.database, id);

    expect(errors).toEqual([]);
    expect(await fleet.redis.hexists(seqKey(fleet.config.prefix, id), "start")).toBe(0);
    expect(await streamOf(id)).toEqual(["MESSAGE 1", "MESSAGE 2", "MESSAGE 3", "MESSAGE 4", "RUN_STARTED"]);
    const read = await readSse(`${base}/v1/sessions/${id}/events`, {
      after: "0-0",
      stop: (_e, all) => all.length === 5,
      timeoutMs: 10_000,
    });
    expect(read.status).toBe(200);
  });

  it("a RUN_STARTED whose start is not taken waits for the messages before it", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "five" }] } },
      messages: [1, 2, 3, 4].map((n) =>
        n % 2 === 1
          ? { role: "user" as const, content: `m${n}` }
          : { role: "assistant" as const, content: `m${n}`, stopReason: "end_turn" },
      ),
    });
    await fleet.database.sql`insert into runs (id, session_id, kind, trigger, status, started_at)
      values (${randomUUID()}, ${id}, 'run', 'api', 'ended', now() - interval '1 hour')`;
    const history = (await client.getSession(id)).messages as StoredMessage[];
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, RETENTION, undefined, true, 0, {
      database: fleet.database,
    });
    // The job found no stream; before its first write lands, the first chunk of the history
    // (messages 1 and 2) does.
    const writeEntries = writer.writeEntries.bind(writer);
    let chunk = true;
    writer.writeEntries = async (...args) => {
      if (chunk) {
        chunk = false;
        await writer.write(
          id,
          history.slice(0, 2).map((message) => ({ runId: null, message })),
          [],
        );
      }
      return writeEntries(...args);
    };
    const errors: unknown[] = [];
    const job = new SessionEventLog(
      writer,
      id,
      history,
      () => null,
      (e) => errors.push(e),
      null,
    );
    await job.emit([started("next")], 4);
    expect(errors).toEqual([]);
    expect(await streamOf(id)).toEqual(["MESSAGE 1", "MESSAGE 2", "MESSAGE 3", "MESSAGE 4", "RUN_STARTED"]);
    expect(await fleet.redis.hexists(seqKey(fleet.config.prefix, id), "start")).toBe(0);
  });

  it("a stream dropped as stale is written whole again, also when a run starts between the drop and the rewrite", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "five" }] } },
      messages: [1, 2, 3, 4].map((n) =>
        n % 2 === 1
          ? { role: "user" as const, content: `m${n}` }
          : { role: "assistant" as const, content: `m${n}`, stopReason: "end_turn" },
      ),
    });
    const runId = randomUUID();
    await fleet.database
      .sql`insert into runs (id, session_id, kind, trigger, status, started_at, ended_at, ended_reason)
      values (${runId}, ${id}, 'run', 'api', 'ended', now() - interval '1 hour', now(), 'crashed')`;
    const history = (await client.getSession(id)).messages as StoredMessage[];
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, RETENTION, undefined, true, 0, {
      database: fleet.database,
    });
    // The stream of a timeline Postgres no longer has (restored to an earlier point): six
    // messages, none of them the stored ones.
    const lost = [1, 2, 3, 4, 5, 6].map(
      (seq): StoredMessage => ({
        seq,
        role: "user",
        content: `lost ${seq}`,
        createdAt: "2020-01-01T00:00:00.000Z",
      }),
    );
    await writer.write(
      id,
      lost.map((message) => ({ runId: null, message })),
      [],
    );
    // The sweeper ends the crashed run (writeAfterSync drops the stale stream, then writes
    // every stored message and the end); the session's resume job starts in between.
    const errors: unknown[] = [];
    const job = new SessionEventLog(
      writer,
      id,
      history,
      () => null,
      (e) => errors.push(e),
      null,
    );
    const dropIfStale = writer.dropIfStale.bind(writer);
    writer.dropIfStale = async (...args) => {
      const dropped = await dropIfStale(...args);
      if (dropped) await job.emit([started("resume")], 4);
      return dropped;
    };
    await writer.writeAfterSync(fleet.database, id, [{ type: "RUN_COMPLETED", runId, outcome: "crashed" }]);

    expect(errors).toEqual([]);
    expect(await fleet.redis.hexists(seqKey(fleet.config.prefix, id), "start")).toBe(0);
    expect((await streamOf(id)).filter((e) => e.startsWith("MESSAGE"))).toEqual([
      "MESSAGE 1",
      "MESSAGE 2",
      "MESSAGE 3",
      "MESSAGE 4",
    ]);
    const read = await readSse(`${base}/v1/sessions/${id}/events`, {
      after: "0-0",
      stop: (_e, all) => all.length === 6,
      timeoutMs: 10_000,
    });
    expect(read.status).toBe(200);
  });

  it("a deleted session's tombstone is only the tombstone, also of a stream that started late or was marked whole", async () => {
    const ids: string[] = [];
    for (const late of [true, false]) {
      const { id } = await client.createSession({
        agent: { model: { provider: "scripted", steps: [{ text: "five" }] } },
        messages: [{ role: "user", content: "m1" }],
      });
      ids.push(id);
      await fleet.database.sql`insert into runs (id, session_id, kind, trigger, status, started_at)
        values (${randomUUID()}, ${id}, 'run', 'api', 'ended', now() - interval '1 hour')`;
      const writer = new EventWriter(fleet.redis, fleet.config.prefix, RETENTION, undefined, true, 0, {
        database: fleet.database,
      });
      if (late) {
        // Started at a run's RUN_STARTED after an expiry: the seq key keeps `start`.
        const history = (await client.getSession(id)).messages as StoredMessage[];
        await new SessionEventLog(
          writer,
          id,
          history,
          () => null,
          () => {},
          null,
        ).emit([started("next")], 1);
        expect(await fleet.redis.hget(seqKey(fleet.config.prefix, id), "start")).toBe("1");
      } else {
        // Turned on, its history not written yet: the seq key is the `whole` mark.
        await fleet.redis.eval(
          "redis.call('HSET', KEYS[1], 'whole', '1') redis.call('PEXPIRE', KEYS[1], 600000)",
          1,
          seqKey(fleet.config.prefix, id),
        );
      }
      await client.deleteSession(id);
    }
    for (const id of ids)
      expect(await fleet.redis.hgetall(seqKey(fleet.config.prefix, id))).toEqual({ deleted: "1" });
  });

  it("a run whose start cannot be looked up (Postgres away for that query) writes the history first, not nothing", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "five" }] } },
      messages: [{ role: "user", content: "m1" }],
    });
    const history = (await client.getSession(id)).messages as StoredMessage[];
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, RETENTION, undefined, true, 0, {
      database: fleet.database,
    });
    writer.ranBefore = async () => {
      throw new Error("Connection terminated unexpectedly");
    };
    const errors: unknown[] = [];
    const job = new SessionEventLog(
      writer,
      id,
      history,
      () => null,
      (e) => errors.push(e),
      null,
    );
    await job.emit([started("next")], 1);
    // Before, the write was lost whole: the run's RUN_STARTED never reached the stream.
    expect(errors).toEqual([]);
    expect(await streamOf(id)).toEqual(["MESSAGE 1", "RUN_STARTED"]);
  });
});
