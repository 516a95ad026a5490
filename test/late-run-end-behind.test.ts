/**
 * A run's RUN_COMPLETED from a writer that fell behind its stream: a worker frozen between
 * committing its run's end and writing the event, while the sweeper wrote the lost end
 * (`missingRunEnd`) and a resume ran and ended. Its late write must not add a second end for
 * its run after the later run's events (found by `npm run chaos`, seed 1672608789: "run … has
 * 2 RUN_COMPLETED"); `done` only remembers the later run by then.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { sharedRedisForFile } from "./support/shared-redis.js";

const PREFIX = `behind-${randomUUID().slice(0, 8)}`;
const shared = sharedRedisForFile(PREFIX);

const at = (seq: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, seq)).toISOString();
const user = (seq: number, content: string): StoredMessage => ({
  role: "user",
  content,
  seq,
  createdAt: at(seq),
});
const answer = (seq: number, content: string): StoredMessage => ({
  role: "assistant",
  content,
  stopReason: "end_turn",
  seq,
  createdAt: at(seq),
});

/** Each entry of the stream as [type, runId, seq]. */
async function stream(sessionId: string): Promise<[string, string, number | undefined][]> {
  const rows = (await shared.redis.xrange(eventStreamKey(PREFIX, sessionId), "-", "+")) as [
    string,
    string[],
  ][];
  return rows.map(([, fields]) => {
    const data = JSON.parse(fields[fields.indexOf("data") + 1]!) as {
      runId: string;
      message?: { seq: number };
    };
    return [fields[fields.indexOf("type") + 1]!, data.runId, data.message?.seq];
  });
}

describe("a late RUN_COMPLETED from a writer behind the stream", () => {
  it("is not written after a later run's events; a writer at the stream's end still writes its own", async () => {
    const writer = new EventWriter(shared.redis, PREFIX);
    const sessionId = randomUUID();
    const m1 = user(1, "go");
    const m2 = answer(2, "done");
    const m3 = user(3, "again");
    const m4 = answer(4, "done again");
    // Run A's worker wrote its start and first message, committed m2 and its end, then froze.
    await writer.writeEntries(sessionId, [
      { type: "RUN_STARTED", runId: "A", kind: "run", resumeKind: null, trigger: "api" },
      { type: "MESSAGE", runId: "A", message: m1 },
    ]);
    // The repair (missingRunEnd's write: after the stored messages the stream lacks).
    await writer.writeEntries(
      sessionId,
      [
        { type: "MESSAGE", runId: "A", message: m2 },
        { type: "RUN_COMPLETED", runId: "A", outcome: "completed" },
      ],
      m1,
    );
    // Run B, on another worker, from start to end.
    await writer.writeEntries(
      sessionId,
      [
        { type: "RUN_STARTED", runId: "B", kind: "run", resumeKind: null, trigger: "api" },
        { type: "MESSAGE", runId: "B", message: m3 },
        { type: "MESSAGE", runId: "B", message: m4 },
        { type: "RUN_COMPLETED", runId: "B", outcome: "completed" },
      ],
      m2,
    );
    // A's worker wakes and sends what it owed: m2 and its end, believing the stream ends at m1.
    const late = await writer.writeEntries(
      sessionId,
      [
        { type: "MESSAGE", runId: "A", message: m2 },
        { type: "RUN_COMPLETED", runId: "A", outcome: "completed" },
      ],
      m1,
    );
    expect(late).toMatchObject({ ok: true, written: 0 });
    expect(await stream(sessionId)).toEqual([
      ["RUN_STARTED", "A", undefined],
      ["MESSAGE", "A", 1],
      ["MESSAGE", "A", 2],
      ["RUN_COMPLETED", "A", undefined],
      ["RUN_STARTED", "B", undefined],
      ["MESSAGE", "B", 3],
      ["MESSAGE", "B", 4],
      ["RUN_COMPLETED", "B", undefined],
    ]);

    // A writer at the stream's end (its check is the last message) writes its run's end.
    const m5 = user(5, "third");
    await writer.writeEntries(
      sessionId,
      [
        { type: "RUN_STARTED", runId: "C", kind: "run", resumeKind: null, trigger: "api" },
        { type: "MESSAGE", runId: "C", message: m5 },
      ],
      m4,
    );
    const own = await writer.writeEntries(
      sessionId,
      [{ type: "RUN_COMPLETED", runId: "C", outcome: "completed" }],
      m5,
    );
    expect(own).toMatchObject({ ok: true });
    expect((await stream(sessionId)).at(-1)).toEqual(["RUN_COMPLETED", "C", undefined]);
  });
});
