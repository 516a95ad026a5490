/**
 * What an event write costs Redis: APPEND_SCRIPT reads a session's seq key once (one HMGET of
 * every field it may need) and writes it once (one HSET of every field it changed), where it
 * made up to four HGETs and four HSETs per write — most of the fleet's Redis commands per
 * session. Counted with INFO commandstats on a Redis of the test's own (the shared one counts
 * every other test's commands too). The writes' results are the same: a MESSAGE is written
 * once, in seq order, a repeated RUN_COMPLETED is skipped, a check against another message
 * is refused as diverged.
 */
import { describe, expect, it } from "vitest";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, seqKey, toStored } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { commandCalls, ownRedisForFile } from "./support/private-redis.js";

const message = (seq: number): StoredMessage =>
  ({
    seq,
    createdAt: new Date(1_700_000_000_000 + seq).toISOString(),
    role: seq % 2 ? "user" : "assistant",
    content: `message ${seq}`,
  }) as StoredMessage;

describe("an event write's Redis commands", () => {
  const own = ownRedisForFile();

  it("reads the seq key in one HMGET and writes it in one HSET per write, with the same results", async () => {
    const writer = new EventWriter(own.redis, "cmds");
    const id = "s1";
    const runId = "r1";
    // A bench session's writes: its start, a tool call, the tool's result, a delta, the answer with its end.
    const writes: [Parameters<EventWriter["writeEntries"]>[1], StoredMessage | undefined][] = [
      [
        [
          { type: "RUN_STARTED", runId, kind: "run", resumeKind: null, trigger: "message" },
          { type: "MESSAGE", runId, message: message(1) },
        ],
        undefined,
      ],
      [
        [
          { type: "MESSAGE", runId, message: message(2) },
          { type: "TOOL_STARTED", runId, toolCallId: "t1", name: "write_file" },
        ],
        message(1),
      ],
      [
        [
          { type: "MESSAGE", runId, message: message(3) },
          { type: "TOOL_FINISHED", runId, toolCallId: "t1", name: "write_file", success: true },
        ],
        message(2),
      ],
      [[{ type: "MESSAGE_DELTA", runId, text: "Done" }], message(3)],
      [
        [
          { type: "MESSAGE", runId, message: message(4) },
          { type: "RUN_COMPLETED", runId, outcome: "completed" },
        ],
        message(3),
      ],
    ];
    await own.redis.config("RESETSTAT");
    const results = [];
    for (const [entries, check] of writes) results.push(await writer.writeEntries(id, entries, check));
    const calls = await commandCalls(own.redis);

    expect(calls.evalsha ?? 0).toBe(writes.length - 1); // the first call loads the script (EVAL)
    expect(calls.hmget).toBe(writes.length);
    expect(calls.hset).toBe(writes.length);
    expect(calls.hget ?? 0).toBe(0);
    expect(calls.xadd).toBe(9);

    expect(results.map((r) => r.ok && r.written)).toEqual([2, 2, 2, 1, 2]);
    expect(results.map((r) => r.ok && r.prior)).toEqual([0, 1, 2, 3, 3]);
    expect(results[4]).toMatchObject({ ok: true, priorFingerprint: "3|2023-11-14T22:13:20.003Z" });
    const entries = (
      (await own.redis.xrange(eventStreamKey("cmds", id), "-", "+")) as [string, string[]][]
    ).map(toStored);
    expect(entries.map((e) => e.type)).toEqual([
      "RUN_STARTED",
      "MESSAGE",
      "MESSAGE",
      "TOOL_STARTED",
      "MESSAGE",
      "TOOL_FINISHED",
      "MESSAGE_DELTA",
      "MESSAGE",
      "RUN_COMPLETED",
    ]);
    const seqState = await own.redis.hgetall(seqKey("cmds", id));
    expect(seqState).toMatchObject({ seq: "4", fp: "4|2023-11-14T22:13:20.004Z", done: runId });
    const written = entries.reduce((sum, e) => sum + e.type.length + JSON.stringify(e.data).length, 0);
    expect(Number(seqState.total)).toBe(written);

    // Written again, as a late writer would: the messages are skipped, the run's end too.
    const again = await writer.writeEntries(id, writes[4]![0], message(3));
    expect(again).toMatchObject({ ok: true, written: 0, prior: 4 });
    // A check naming another message at the stream's last seq: diverged, nothing written.
    const other = { ...message(4), createdAt: new Date(0).toISOString() };
    expect(await writer.writeEntries(id, [{ type: "MESSAGE_DELTA", runId, text: "x" }], other)).toEqual({
      ok: false,
      last: 4,
      diverged: "4|2023-11-14T22:13:20.004Z",
    });
    expect(await own.redis.xlen(eventStreamKey("cmds", id))).toBe(9);
  });
});
