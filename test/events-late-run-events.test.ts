/**
 * The events of a run written by a worker that lost it: a worker frozen past its lease (then
 * woken) still has its run's text deltas, tool events and RUN_STARTED queued, and writes them
 * after its run ended (the sweeper or a repair wrote its RUN_COMPLETED) or after a resume's
 * RUN_STARTED. Postgres fences its messages; these go to Redis only, and must not land in the
 * stream after its run ended or in the middle of a later run (APPEND_SCRIPT's `d:RUN_ID`).
 * The run a stream has started last still gets its own events, also in the write that starts
 * it, and so does a run of a stream that holds no RUN_STARTED (turned on, or rebuilt).
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, type SessionEventInput } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { SessionEventLog } from "../src/shared/session-event-log.js";
import { sharedRedisForFile } from "./support/shared-redis.js";

const PREFIX = `late-run-${randomUUID().slice(0, 8)}`;
const shared = sharedRedisForFile(PREFIX);

const at = (seq: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, seq)).toISOString();
const user = (seq: number, content: string): StoredMessage => ({
  role: "user",
  content,
  seq,
  createdAt: at(seq),
});

/** Each entry of the stream as "TYPE runId". */
async function stream(sessionId: string): Promise<string[]> {
  const rows = (await shared.redis.xrange(eventStreamKey(PREFIX, sessionId), "-", "+")) as [
    string,
    string[],
  ][];
  return rows.map(([, fields]) => {
    const data = JSON.parse(fields[fields.indexOf("data") + 1]!) as { runId?: string };
    return `${fields[fields.indexOf("type") + 1]!} ${data.runId ?? "-"}`;
  });
}

const started = (runId: string, kind: "run" | "resume" = "run"): SessionEventInput => ({
  type: "RUN_STARTED",
  runId,
  kind,
  resumeKind: kind === "resume" ? "recover_tools" : null,
  trigger: kind === "resume" ? "sweeper" : "api",
});
const delta = (runId: string, text = "late text"): SessionEventInput => ({
  type: "MESSAGE_DELTA",
  runId,
  text,
});
const ended = (runId: string, outcome = "stalled"): SessionEventInput => ({
  type: "RUN_COMPLETED",
  runId,
  outcome,
});

/** The run events a woken worker may still have queued besides its deltas. */
const toolEvents = (runId: string): SessionEventInput[] => [
  { type: "TOOL_STARTED", runId, toolCallId: "c1", name: "sleep" },
  { type: "TOOL_FINISHED", runId, toolCallId: "c1", name: "sleep", success: true },
  { type: "MODEL_STOPPED", runId, stopReason: "max_tokens" },
];

describe("events of a run its worker lost", () => {
  it("a dead run's deltas are not written after its RUN_COMPLETED or after a later run's RUN_STARTED", async () => {
    const writer = new EventWriter(shared.redis, PREFIX);
    const sessionId = randomUUID();
    const m1 = user(1, "go");
    await writer.writeEntries(sessionId, [started("A"), { type: "MESSAGE", runId: "A", message: m1 }]);
    // The sweeper ended A (its worker frozen past its lease) and wrote its end.
    await writer.writeEntries(sessionId, [ended("A")], m1);
    // A's worker wakes and flushes the text it had gathered.
    expect(await writer.writeEntries(sessionId, [delta("A")], m1)).toMatchObject({ ok: true, written: 0 });
    // The resume starts and streams; A's worker still writes text of A.
    await writer.writeEntries(sessionId, [started("B", "resume"), delta("B", "resumed")], m1);
    expect(await writer.writeEntries(sessionId, [delta("A")], m1)).toMatchObject({ ok: true, written: 0 });
    await writer.writeEntries(sessionId, [delta("B", " and on")], m1);
    expect(await stream(sessionId)).toEqual([
      "RUN_STARTED A",
      "MESSAGE A",
      "RUN_COMPLETED A",
      "RUN_STARTED B",
      "MESSAGE_DELTA B",
      "MESSAGE_DELTA B",
    ]);
  });

  it("a run not ended yet loses its deltas once a later run started", async () => {
    const writer = new EventWriter(shared.redis, PREFIX);
    const sessionId = randomUUID();
    await writer.writeEntries(sessionId, [started("A"), delta("A", "first")]);
    await writer.writeEntries(sessionId, [started("B", "resume")]);
    expect(await writer.writeEntries(sessionId, [delta("A")])).toMatchObject({ ok: true, written: 0 });
    expect(await stream(sessionId)).toEqual(["RUN_STARTED A", "MESSAGE_DELTA A", "RUN_STARTED B"]);
  });

  it("a run's deltas go into a stream that holds no RUN_STARTED (turned on or rebuilt mid-run)", async () => {
    const writer = new EventWriter(shared.redis, PREFIX);
    const sessionId = randomUUID();
    const m1 = user(1, "go");
    await writer.writeEntries(sessionId, [{ type: "MESSAGE", runId: null, message: m1 }]);
    expect(await writer.writeEntries(sessionId, [delta("A", "text")], m1)).toMatchObject({
      ok: true,
      written: 1,
    });
  });

  it("a dead run's tool events and MODEL_STOPPED are not written after its end or in a later run", async () => {
    const writer = new EventWriter(shared.redis, PREFIX);
    const sessionId = randomUUID();
    await writer.writeEntries(sessionId, [started("A")]);
    await writer.writeEntries(sessionId, [ended("A")]);
    expect(await writer.writeEntries(sessionId, toolEvents("A"))).toMatchObject({ ok: true, written: 0 });
    await writer.writeEntries(sessionId, [started("B", "resume"), ...toolEvents("B")]);
    expect(await writer.writeEntries(sessionId, toolEvents("A"))).toMatchObject({ ok: true, written: 0 });
    expect(await stream(sessionId)).toEqual([
      "RUN_STARTED A",
      "RUN_COMPLETED A",
      "RUN_STARTED B",
      "TOOL_STARTED B",
      "TOOL_FINISHED B",
      "MODEL_STOPPED B",
    ]);
  });

  it("a dead run's late RUN_STARTED is not written: after its own end, or from a writer behind the stream", async () => {
    const writer = new EventWriter(shared.redis, PREFIX);
    const sessionId = randomUUID();
    const m1 = user(1, "first");
    const m2 = user(2, "second");
    const m3 = user(3, "third");
    await writer.writeEntries(sessionId, [{ type: "MESSAGE", runId: null, message: m1 }]);
    // A's worker committed its input (m2) and froze before writing its start; the sweeper
    // ended A and the repair wrote m2 and A's end; the resume B started.
    await writer.writeEntries(sessionId, [{ type: "MESSAGE", runId: "A", message: m2 }, ended("A")], m1);
    await writer.writeEntries(sessionId, [started("B", "resume")], m2);
    // A's worker wakes and writes its start with its input.
    expect(
      await writer.writeEntries(sessionId, [started("A"), { type: "MESSAGE", runId: "A", message: m2 }], m1),
    ).toMatchObject({ ok: true, written: 0 });
    // B goes on: its events are still its run's, and a reader finds B as the latest run.
    await writer.writeEntries(
      sessionId,
      [delta("B", "resumed"), { type: "MESSAGE", runId: "B", message: m3 }, ended("B", "completed")],
      m2,
    );
    expect(await shared.redis.hget(`${PREFIX}:events-seq:${sessionId}`, "started")).toMatch(/^B /);
    // Later still (B ended: A is no longer the run ended last), A's writer is behind the stream.
    expect(
      await writer.writeEntries(sessionId, [started("A"), { type: "MESSAGE", runId: "A", message: m2 }], m1),
    ).toMatchObject({ ok: true, written: 0 });
    expect(await stream(sessionId)).toEqual([
      "MESSAGE -",
      "MESSAGE A",
      "RUN_COMPLETED A",
      "RUN_STARTED B",
      "MESSAGE_DELTA B",
      "MESSAGE B",
      "RUN_COMPLETED B",
    ]);
  });

  it("a dead run's late RUN_STARTED and RUN_COMPLETED are not written after a later run that stored no message", async () => {
    const writer = new EventWriter(shared.redis, PREFIX);
    const sessionId = randomUUID();
    const m1 = user(1, "first");
    const m2 = user(2, "second");
    await writer.writeEntries(sessionId, [{ type: "MESSAGE", runId: null, message: m1 }]);
    // A's input (m2) and end went in by the repair; the resume B started and ended at once
    // (its model call refused): no message, so the stream's last message is still A's input.
    await writer.writeEntries(sessionId, [{ type: "MESSAGE", runId: "A", message: m2 }, ended("A")], m1);
    await writer.writeEntries(sessionId, [started("B", "resume"), ended("B", "failed")], m2);
    // A's writers wake: its worker's start (with its input), the first sweeper's end. Neither
    // is behind the stream, and B's end is the last written (`done`).
    expect(
      await writer.writeEntries(sessionId, [started("A"), { type: "MESSAGE", runId: "A", message: m2 }], m1),
    ).toMatchObject({ ok: true, written: 0 });
    expect(await writer.writeEntries(sessionId, [ended("A")], m2)).toMatchObject({ ok: true, written: 0 });
    expect(await stream(sessionId)).toEqual([
      "MESSAGE -",
      "MESSAGE A",
      "RUN_COMPLETED A",
      "RUN_STARTED B",
      "RUN_COMPLETED B",
    ]);
  });

  it("a job behind the stream it first reads writes no late RUN_STARTED (its log checks its last stored message)", async () => {
    const writer = new EventWriter(shared.redis, PREFIX);
    const sessionId = randomUUID();
    const [m1, m2, m3, m4] = [user(1, "a"), user(2, "b"), user(3, "c"), user(4, "d")];
    // A ended by the sweeper (m2 its input, written by the repair), then B ran and ended.
    await writer.writeEntries(sessionId, [
      { type: "MESSAGE", runId: null, message: m1 },
      { type: "MESSAGE", runId: "A", message: m2 },
      ended("A"),
      started("B", "resume"),
      { type: "MESSAGE", runId: "B", message: m3 },
      { type: "MESSAGE", runId: "B", message: m4 },
      ended("B", "completed"),
    ]);
    const before = await stream(sessionId);
    // A's job (history through m2, the stream's seq not read yet) wakes and writes its start.
    const errors: unknown[] = [];
    const log = new SessionEventLog(
      writer,
      sessionId,
      [m1, m2],
      () => "A",
      (e) => errors.push(e),
      null,
    );
    await log.emit([started("A")], 1);
    log.delta("A", "late text");
    await log.emit([]);
    expect(errors).toEqual([]);
    expect(await stream(sessionId)).toEqual(before);
    expect(await shared.redis.hget(`${PREFIX}:events-seq:${sessionId}`, "started")).toMatch(/^B /);
  });
});
