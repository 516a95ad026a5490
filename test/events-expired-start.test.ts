/**
 * A session's event stream that expired whole (a day without a write) is started again by the
 * session's next run. Contracts §7 asks of it only what its readers can ask for: a reader
 * without an id starts at the latest run's RUN_STARTED, and an id of the expired stream gets
 * 410. So the new stream starts at that RUN_STARTED: the stored messages before it are not
 * written again (before, a 5,000-message session's next run first wrote all 5,000 into Redis).
 * The seq key keeps where the stream starts, and a reader from `0-0` gets 410, as from a
 * trimmed stream, instead of a stream that seems to begin at that run.
 *
 * Prints the events written and the time of the first write for a 5,000-message session.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, type SessionEventInput, seqKey } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { SessionEventLog, startPoint } from "../src/shared/session-event-log.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";

const RETENTION = { maxEvents: 100_000, maxAgeMs: 600_000 };
const SESSION_MESSAGES = 5_000;

const started = (runId: string): SessionEventInput => ({
  type: "RUN_STARTED",
  runId,
  kind: "run",
  resumeKind: null,
  trigger: "api",
});

const message = (seq: number, content: string, createdAt: string): StoredMessage => ({
  seq,
  role: "user",
  content,
  createdAt,
});

function history(count: number, bytes = 200): StoredMessage[] {
  const text = "x".repeat(bytes);
  return Array.from({ length: count }, (_, i) =>
    message(i + 1, `${i + 1} ${text}`, new Date(Date.UTC(2026, 0, 1, 0, 0, 0, i)).toISOString()),
  );
}

describe("startPoint (pure)", () => {
  it("is the `through` of the first part that starts a run, and that run; else 0", () => {
    expect(startPoint([])).toEqual({ seq: 0, runId: null });
    expect(startPoint([{ through: 7, events: [] }])).toEqual({ seq: 0, runId: null });
    expect(
      startPoint([
        { through: 0, events: [{ type: "MESSAGE_DELTA", runId: "r0", text: "x" }] },
        { through: 12, events: [started("r1")] },
        { through: 14, events: [started("r2")] },
      ]),
    ).toEqual({ seq: 12, runId: "r1" });
  });
});

describe("a long session's stream started again after it expired", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("eventsexpiredstart");
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

  /** A session in Postgres, with a run that started before when `ranBefore` (so it had a stream). */
  const session = async (ranBefore: boolean) => {
    const id = randomUUID();
    const { sql } = fleet.database;
    await sql`insert into sessions (id, agent) values (${id}, ${JSON.stringify({ model: { provider: "scripted", steps: [] } })}::jsonb)`;
    if (ranBefore)
      await sql`insert into runs (id, session_id, kind, trigger, status, started_at)
                values (${randomUUID()}, ${id}, 'run', 'api', 'ended', now() - interval '2 days')`;
    return id;
  };
  const writerOf = () =>
    new EventWriter(fleet.redis, fleet.config.prefix, RETENTION, undefined, true, 0, {
      database: fleet.database,
    });

  it("writes from the next run's RUN_STARTED, not every stored message, and later writers follow it", async () => {
    const sessionId = await session(true);
    const messages = history(SESSION_MESSAGES);
    const writer = writerOf();
    const errors: unknown[] = [];
    // A job of the next run, with no stream in Redis (it expired): it learns so at its first write.
    const log = new SessionEventLog(
      writer,
      sessionId,
      messages,
      () => null,
      (error) => errors.push(error),
      null,
    );
    const t0 = performance.now();
    // As startRun does: RUN_STARTED after every earlier message, then the run's first message.
    const first = log.emit([started("next")], SESSION_MESSAGES);
    messages.push(message(SESSION_MESSAGES + 1, "next day", new Date().toISOString()));
    await Promise.all([first, log.emit()]);
    const ms = performance.now() - t0;
    const written = await streamOf(sessionId);
    const bytes = await fleet.redis.call("MEMORY", "USAGE", eventStreamKey(fleet.config.prefix, sessionId));
    console.log(
      `first write of a ${SESSION_MESSAGES}-message session's next run into an expired stream: ${written.length} events written in ${ms.toFixed(1)} ms, stream ${bytes} bytes in Redis`,
    );
    expect(errors).toEqual([]);
    expect(written).toEqual(["RUN_STARTED", `MESSAGE ${SESSION_MESSAGES + 1}`]);
    const kept = await fleet.redis.hgetall(seqKey(fleet.config.prefix, sessionId));
    expect(kept).toMatchObject({ seq: String(SESSION_MESSAGES + 1), start: String(SESSION_MESSAGES) });

    // The run goes on: its next message follows, and a writer that reads the stream from
    // Postgres's side (a sweeper ending it) sends from seq 1 and has the ones before skipped.
    messages.push(message(SESSION_MESSAGES + 2, "and more", new Date().toISOString()));
    await log.emit();
    const late = await writer.write(
      sessionId,
      messages.map((message) => ({ runId: null, message })),
      [{ type: "RUN_COMPLETED", runId: "next", outcome: "completed" }],
    );
    expect(late.ok).toBe(true);
    expect(await streamOf(sessionId)).toEqual([
      "RUN_STARTED",
      `MESSAGE ${SESSION_MESSAGES + 1}`,
      `MESSAGE ${SESSION_MESSAGES + 2}`,
      "RUN_COMPLETED",
    ]);
  });

  it("the first run of an imported history, and a write that starts no run, write every stored message as before", async () => {
    const imported = await session(false);
    const log = new SessionEventLog(
      writerOf(),
      imported,
      history(5),
      () => null,
      () => {},
      null,
    );
    await log.emit([started("first")], 5);
    expect(await streamOf(imported)).toEqual(
      [1, 2, 3, 4, 5].map((s) => `MESSAGE ${s}`).concat("RUN_STARTED"),
    );
    expect(await fleet.redis.hexists(seqKey(fleet.config.prefix, imported), "start")).toBe(0);

    const sessionId = await session(true);
    const ending = new SessionEventLog(
      writerOf(),
      sessionId,
      history(5),
      () => null,
      () => {},
      null,
    );
    await ending.emit([{ type: "RUN_COMPLETED", runId: "r", outcome: "completed" }]);
    expect(await streamOf(sessionId)).toEqual(
      [1, 2, 3, 4, 5].map((s) => `MESSAGE ${s}`).concat("RUN_COMPLETED"),
    );
    expect(await fleet.redis.hexists(seqKey(fleet.config.prefix, sessionId), "start")).toBe(0);
  });

  it("a reader from 0-0 gets 410; one that waited from 0-0 while there was no stream is ended when it starts part-way", async () => {
    const { api } = await fleet.startApi();
    const sessionId = await session(true);
    const url = `${api.url}/v1/sessions/${sessionId}/events`;
    // Connected while the session has no stream (it expired): served (200), nothing to read yet.
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 15_000);
    const waiting = await fetch(url, { headers: { "last-event-id": "0-0" }, signal: controller.signal });
    expect(waiting.status).toBe(200);
    const messages = history(3);
    const log = new SessionEventLog(
      writerOf(),
      sessionId,
      messages,
      () => null,
      () => {},
      null,
    );
    const first = log.emit([started("next")], 3);
    messages.push(message(4, "next day", new Date().toISOString()));
    await Promise.all([first, log.emit()]);
    // Ended with nothing (before, it read the stream as if it began at seq 4), and told 410 now.
    const body = await waiting.text();
    clearTimeout(timer);
    expect(body).not.toMatch(/^event:/m);
    const again = await readSse(url, { after: "0-0", stop: () => true });
    expect(again).toMatchObject({ status: 410, body: { error: { reason: "expired" } } });
  });

  it("a stream that exists keeps its messages contiguous: a start sent to it is ignored", async () => {
    const sessionId = await session(true);
    const messages = history(6);
    const writer = writerOf();
    await writer.write(
      sessionId,
      messages.slice(0, 2).map((message) => ({ runId: null, message })),
      [],
    );
    // A writer that believed there was no stream: its start (after seq 4) is ignored, and its
    // messages from 5 on are a gap the writer fills.
    const result = await writer.writeEntries(
      sessionId,
      [started("r"), { type: "MESSAGE", runId: "r", message: messages[4]! }],
      undefined,
      messages[3],
    );
    expect(result).toEqual({ ok: false, last: 2 });
    const log = new SessionEventLog(
      writer,
      sessionId,
      messages,
      () => null,
      () => {},
      null,
    );
    await log.emit([started("r")], 6);
    expect(await streamOf(sessionId)).toEqual([
      "MESSAGE 1",
      "MESSAGE 2",
      "MESSAGE 3",
      "MESSAGE 4",
      "MESSAGE 5",
      "MESSAGE 6",
      "RUN_STARTED",
    ]);
  });
});
