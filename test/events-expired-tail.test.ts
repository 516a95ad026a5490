/**
 * A worker job whose session's stream expired (Redis dropped it by age between two runs, or
 * lost it mid-run) writes it again from the last FLEET_EVENTS_MAX stored messages, as a stream
 * rebuilt from Postgres does (test/events-rebuild-tail.test.ts), not from the first: it wrote
 * every stored message of a 2,000-message session before its run's first event. The stream then
 * reads as trimmed before them: a reader from its start is told it expired.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { STREAM_START } from "../src/shared/event-expiry.js";
import { EventReader } from "../src/shared/event-reader.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, seqKey, toStored } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { SessionEventLog } from "../src/shared/session-event-log.js";
import { sharedRedisForFile } from "./support/shared-redis.js";

const PREFIX = `expired-tail-${randomUUID().slice(0, 8)}`;
const KEPT = 100;
const MESSAGES = 2_000;
const shared = sharedRedisForFile(PREFIX);

const history: StoredMessage[] = Array.from({ length: MESSAGES }, (_, i) => ({
  role: i % 2 ? "assistant" : "user",
  content: `m${i + 1}`,
  ...(i % 2 ? { stopReason: "end_turn" as const } : {}),
  seq: i + 1,
  createdAt: new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString(),
})) as StoredMessage[];

const started = (runId: string) =>
  ({ type: "RUN_STARTED", runId, kind: "run", resumeKind: null, trigger: "api" }) as const;

async function entriesAdded(key: string): Promise<{ added: number; length: number }> {
  const info = (await shared.redis.call("XINFO", "STREAM", key)) as unknown[];
  return {
    added: Number(info[info.indexOf("entries-added") + 1]),
    length: Number(info[info.indexOf("length") + 1]),
  };
}

/** Waits until Redis has dropped both keys by age. */
async function expired(...keys: string[]): Promise<void> {
  while ((await shared.redis.exists(...keys)) > 0) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe("a long session's expired stream, written again by its next job", () => {
  it.each([
    ["before the job's first write (a new job)", null],
    ["under a job that believed the stream current (a gap)", "known"],
  ] as const)("starts at the last messages it keeps: %s", async (_, sent) => {
    const sessionId = randomUUID();
    const key = eventStreamKey(PREFIX, sessionId);
    const seq = seqKey(PREFIX, sessionId);
    // The session's stream as it stood (its last messages), kept briefly, then dropped by age.
    const brief = new EventWriter(shared.redis, PREFIX, { maxEvents: KEPT, maxAgeMs: 300 });
    const primed = new SessionEventLog(
      brief,
      sessionId,
      history.slice(0, MESSAGES - 2),
      () => null,
      () => {},
      null,
    );
    await primed.emit();
    await expired(key, seq);

    const writer = new EventWriter(shared.redis, PREFIX, { maxEvents: KEPT, maxAgeMs: 3_600_000 });
    const errors: unknown[] = [];
    const log = new SessionEventLog(
      writer,
      sessionId,
      history,
      () => "run-2",
      (e) => errors.push(e),
      sent === null ? null : MESSAGES - 2,
    );
    await log.emit([started("run-2")]);
    expect(errors).toEqual([]);

    // Before: 2,001 entries written (every stored message and the event), then trimmed.
    const { added, length } = await entriesAdded(key);
    expect(added).toBeLessThanOrEqual(KEPT + 2);
    expect(added).toBeGreaterThan(length);
    const rows = ((await shared.redis.xrange(key, "-", "+")) as [string, string[]][]).map(toStored);
    const seqs = rows.flatMap((e) => (e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : []));
    expect(seqs).toEqual(Array.from({ length: KEPT }, (_, i) => MESSAGES - KEPT + 1 + i));
    expect(rows.at(-1)).toMatchObject({ type: "RUN_STARTED", data: { runId: "run-2" } });
    expect(await shared.redis.hget(seq, "seq")).toBe(String(MESSAGES));

    // A reader from its start is told it expired; one from its first entry reads on.
    const reader = new EventReader(shared.redis, PREFIX);
    expect(await reader.expired(key, STREAM_START)).toBe(true);
    expect(await reader.expired(key, rows[0]!.id)).toBe(false);
  });
});
