/**
 * What a stream entry carries is the event as `JSON.stringify({ sessionId, ...event })` gives it
 * (contracts §7), also now that a write's rows are one flat array, a one-chunk write is sent
 * without copies of its rows, and several sessions' writes share one flat argument list. Each
 * entry's type and data, byte for byte, and their order, for every event type (a message with
 * tool calls, non-ASCII text, quotes and an absent field among them), over writes of several
 * sessions in one call and a write cut into chunks.
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, type SessionEventInput, seqKey } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";

const redis = new Redis(process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379", { maxRetriesPerRequest: 1 });
const prefix = `evjson-${randomUUID()}`;

afterAll(async () => {
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
});

const message = (seq: number, extra: object): StoredMessage =>
  ({ seq, createdAt: new Date(1_700_000_000_000 + seq).toISOString(), ...extra }) as StoredMessage;

function events(n: number): SessionEventInput[] {
  const runId = `run-${n}`;
  return [
    { type: "RUN_STARTED", runId, kind: "resume", resumeKind: null, trigger: "api" },
    {
      type: "MESSAGE",
      runId: null,
      message: message(1, { role: "user", content: `héllo "${n}"\n\u2028 ✓ 😀` }),
    },
    { type: "MESSAGE_DELTA", runId, text: "Let me \\ look" },
    {
      type: "MESSAGE",
      runId,
      message: message(2, {
        role: "assistant",
        content: "",
        toolCalls: [{ id: "c1", name: "lookup", arguments: { q: [1, 2.5, null, { deep: true }] } }],
        // Absent in JSON, as JSON.stringify leaves it out.
        metadata: undefined,
      }),
    },
    { type: "TOOL_STARTED", runId, toolCallId: "c1", name: "lookup" },
    { type: "MESSAGE", runId, message: message(3, { role: "tool", toolCallId: "c1", content: "42" }) },
    { type: "TOOL_FINISHED", runId, toolCallId: "c1", name: "lookup", success: false },
    { type: "MODEL_STOPPED", runId, stopReason: "max_tokens" },
    { type: "RUN_COMPLETED", runId, outcome: "completed" },
    { type: "SESSION_PARKED", reason: "tool_interrupted" },
  ];
}

async function entries(sessionId: string): Promise<[string, string][]> {
  const rows = (await redis.xrange(eventStreamKey(prefix, sessionId), "-", "+")) as [string, string[]][];
  return rows.map(([, fields]) => [fields[fields.indexOf("type") + 1]!, fields[fields.indexOf("data") + 1]!]);
}

const expected = (sessionId: string, input: SessionEventInput[]): [string, string][] =>
  input.map((event) => [event.type, JSON.stringify({ sessionId, ...event })]);

describe("an event's stored data", () => {
  it("is the event's JSON with its sessionId first, byte for byte, in order, for writes sharing a call", async () => {
    const writer = new EventWriter(redis, prefix);
    const ids = [1, 2, 3].map((n) => `s${n}-${randomUUID()}`);
    // Asked for in one turn: one script call carries the three sessions' writes.
    const results = await Promise.all(ids.map((id, n) => writer.writeEntries(id, events(n))));
    expect(results.map((r) => r.ok && r.written)).toEqual([10, 10, 10]);
    for (const [n, id] of ids.entries()) {
      expect(await entries(id)).toEqual(expected(id, events(n)));
      expect(await redis.hget(seqKey(prefix, id), "seq")).toBe("3");
    }
  });

  it("is the same when a write goes in chunks, and a check goes with the first one", async () => {
    const writer = new EventWriter(
      redis,
      prefix,
      undefined,
      undefined,
      true,
      0,
      {},
      { bytes: 400, entries: 3 },
    );
    const id = `chunked-${randomUUID()}`;
    const input = events(7);
    const first = await writer.writeEntries(id, input.slice(0, 2));
    expect(first.ok).toBe(true);
    const rest = input.slice(2);
    const result = await writer.writeEntries(id, rest, message(1, {}));
    // `message(1, {})` has the stored message's seq and createdAt: the check passes.
    expect(result.ok && result.written).toBe(rest.length);
    expect(await entries(id)).toEqual(expected(id, input));
  });
});
