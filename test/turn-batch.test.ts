/**
 * Calls gathered per turn of the event loop (turn-batch.ts), and the two Redis writers that
 * use it on a real Redis: session events (one script call for many sessions' writes, each
 * still checked against its own stream's seq) and session leases.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it, vi } from "vitest";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { SessionLease } from "../src/shared/lease.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { SessionEventLog } from "../src/shared/session-event-log.js";
import { keysShareSlot, TurnBatch } from "../src/shared/turn-batch.js";
import { sharedRedisForFile } from "./support/shared-redis.js";

const PREFIX = `t-turn-${randomUUID().slice(0, 8)}`;

const shared = sharedRedisForFile(PREFIX);

describe("TurnBatch", () => {
  it("sends the calls of one turn together, in order, and each caller gets its own answer", async () => {
    const sent: number[][] = [];
    const batch = new TurnBatch<number, string>(async (items) => {
      sent.push(items);
      return items.map((n) => `#${n}`);
    });
    const first = await Promise.all([batch.call(1), batch.call(2), batch.call(3)]);
    expect(first).toEqual(["#1", "#2", "#3"]);
    // A call made after the turn ended goes in the next batch.
    const a = batch.call(4);
    await new Promise((resolve) => setImmediate(resolve));
    const b = batch.call(5);
    expect(await Promise.all([a, b])).toEqual(["#4", "#5"]);
    expect(sent).toEqual([[1, 2, 3], [4], [5]]);
  });

  it("with gatherMs, gathers the calls of the next turns too, and still sends a full batch at once", async () => {
    const sent: number[][] = [];
    const send = async (items: number[]) => {
      sent.push(items);
      return items.map((n) => n * 10);
    };
    const gathering = new TurnBatch(send, 4, true, 30);
    const a = gathering.call(1);
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setTimeout(resolve, 5));
    // Two turns and 5 ms later: not sent yet, and the next call joins the first.
    expect(sent).toEqual([]);
    const b = gathering.call(2);
    expect(await Promise.all([a, b])).toEqual([10, 20]);
    expect(sent).toEqual([[1, 2]]);
    // A full batch does not wait.
    sent.length = 0;
    const full = [1, 2, 3, 4].map((n) => gathering.call(n));
    expect(sent).toEqual([[1, 2, 3, 4]]); // sent as the fourth call was made
    expect(await Promise.all(full)).toEqual([10, 20, 30, 40]);
    // Without gatherMs the same calls go in two batches (the test above).
  });

  it("with a weight bound, a call carries at most that much (a heavier item alone), in order", async () => {
    const sent: number[][] = [];
    const batch = new TurnBatch<number, number>(
      async (items) => {
        sent.push(items);
        return items;
      },
      64,
      true,
      0,
      { of: (n) => n, max: 10 },
    );
    expect(await Promise.all([4, 5, 3, 12, 1, 9, 2].map((n) => batch.call(n)))).toEqual([
      4, 5, 3, 12, 1, 9, 2,
    ]);
    expect(sent).toEqual([[4, 5], [3], [12], [1, 9], [2]]);
  });

  it("sends a full batch at once, one call per item without combining, and fails every caller of a failed call", async () => {
    const sent: number[][] = [];
    const send = async (items: number[]) => {
      sent.push(items);
      if (items.includes(13)) throw new Error("redis away");
      return items;
    };
    const full = new TurnBatch(send, 2);
    expect(await Promise.all([full.call(1), full.call(2), full.call(3)])).toEqual([1, 2, 3]);
    expect(sent).toEqual([[1, 2], [3]]);
    sent.length = 0;
    const alone = new TurnBatch(send, 64, false);
    expect(await Promise.all([alone.call(1), alone.call(2)])).toEqual([1, 2]);
    expect(sent).toEqual([[1], [2]]);
    const failing = new TurnBatch(send);
    const results = await Promise.allSettled([failing.call(12), failing.call(13)]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected"]);
    const short = new TurnBatch(async () => [1]);
    await expect(Promise.all([short.call(1), short.call(2)])).rejects.toThrow(/2 calls got 1 answers/);
  });

  it("combines keys on a Cluster only under a hash-tagged prefix", () => {
    expect(keysShareSlot(false, "fleet")).toBe(true);
    expect(keysShareSlot(true, "{fleet}")).toBe(true);
    expect(keysShareSlot(true, "{fleet}-a")).toBe(true);
    expect(keysShareSlot(true, "fleet")).toBe(false);
    expect(keysShareSlot(true, "{}fleet")).toBe(false);
  });
});

const message = (seq: number, content: string): StoredMessage => ({
  seq,
  role: "user",
  content,
  createdAt: new Date().toISOString(),
});

async function streamOf(prefix: string, sessionId: string): Promise<string[]> {
  const rows = (await shared.redis.xrange(eventStreamKey(prefix, sessionId), "-", "+")) as [
    string,
    string[],
  ][];
  return rows.map(([, fields]) => {
    const data = JSON.parse(fields[3]!) as { type: string; message?: { seq: number } };
    return data.message ? `${data.type}:${data.message.seq}` : data.type;
  });
}

describe("EventWriter with many sessions", () => {
  it("writes many sessions' events in one script call, each checked against its own stream", async () => {
    const prefix = `${PREFIX}-ev`;
    const writer = new EventWriter(shared.redis, prefix);
    // The event writes' script goes out through sendCommand as one EVALSHA (script-call.ts).
    const spy = vi.spyOn(shared.redis, "sendCommand");
    const scriptCalls = () => spy.mock.calls.filter(([command]) => command.name === "evalsha").length;
    const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
    // c's stream already holds message 1 and 2.
    expect(await writer.write(c, [{ runId: null, message: message(1, "c1") }], [])).toMatchObject({
      ok: true,
    });
    expect(await writer.write(c, [{ runId: null, message: message(2, "c2") }], [])).toMatchObject({
      ok: true,
    });
    spy.mockClear();
    const results = await Promise.all([
      writer.write(
        a,
        [{ runId: "r", message: message(1, "a1") }],
        [{ type: "RUN_COMPLETED", runId: "r", outcome: "completed" }],
      ),
      // A gap: b's stream holds nothing, so message 2 cannot come first.
      writer.write(b, [{ runId: "r", message: message(2, "b2") }], []),
      // Already there: skipped; then a new one.
      writer.write(
        c,
        [
          { runId: null, message: message(2, "c2") },
          { runId: null, message: message(3, "c3") },
        ],
        [],
      ),
      // A second write for a in the same call sees the first one's seq.
      writer.write(a, [{ runId: "r", message: message(2, "a2") }], []),
    ]);
    expect(scriptCalls()).toBe(1);
    expect(results[0]).toMatchObject({ ok: true, written: 2 });
    expect(results[1]).toEqual({ ok: false, last: 0 });
    expect(results[2]).toMatchObject({ ok: true, written: 1 });
    expect(results[3]).toMatchObject({ ok: true, written: 1 });
    expect(await streamOf(prefix, a)).toEqual(["MESSAGE:1", "RUN_COMPLETED", "MESSAGE:2"]);
    expect(await streamOf(prefix, b)).toEqual([]);
    expect(await streamOf(prefix, c)).toEqual(["MESSAGE:1", "MESSAGE:2", "MESSAGE:3"]);
    spy.mockRestore();
  });

  it("a session's log sends what is asked for in one turn in one write, in the order asked", async () => {
    const prefix = `${PREFIX}-log`;
    const writer = new EventWriter(shared.redis, prefix);
    const spy = vi.spyOn(writer, "writeEntries");
    const sessionId = randomUUID();
    const history: StoredMessage[] = [message(1, "earlier")];
    const log = new SessionEventLog(
      writer,
      sessionId,
      history,
      () => "r",
      () => {},
      0,
    );
    history.push(message(2, "started"));
    // RUN_STARTED after message 1 and before message 2, in one write with message 2.
    void log.emit(
      [{ type: "RUN_STARTED", runId: "r", kind: "run", resumeKind: null, trigger: "message" }],
      1,
    );
    const first = log.emit();
    await new Promise((resolve) => setImmediate(resolve));
    history.push(message(3, "step"));
    void log.emit([{ type: "TOOL_STARTED", runId: "r", toolCallId: "c", name: "t" }]);
    history.push(message(4, "result"));
    const last = log.emit([{ type: "TOOL_FINISHED", runId: "r", toolCallId: "c", name: "t", success: true }]);
    await Promise.all([first, last]);
    expect(spy).toHaveBeenCalledTimes(2);
    expect(await streamOf(prefix, sessionId)).toEqual([
      "MESSAGE:1",
      "RUN_STARTED",
      "MESSAGE:2",
      "MESSAGE:3",
      "TOOL_STARTED",
      "MESSAGE:4",
      "TOOL_FINISHED",
    ]);
  });
});

describe("SessionLease with many sessions", () => {
  it("takes, renews and releases many sessions' leases in one call each; a contested one goes to the first", async () => {
    const prefix = `${PREFIX}-lease`;
    const lease = new SessionLease(shared.redis, prefix, 5_000);
    // The lease scripts go out through sendCommand as one EVALSHA each (script-call.ts): the
    // script calls since the last count.
    const spy = vi.spyOn(shared.redis, "sendCommand");
    const scriptCalls = () => {
      const calls = spy.mock.calls.filter(([command]) => command.name === "evalsha").length;
      spy.mockClear();
      return calls;
    };
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    const tokens = await Promise.all([
      ...ids.map((id) => lease.acquire(id, "w1")),
      lease.acquire(ids[0]!, "w2"),
    ]);
    expect(scriptCalls()).toBe(1);
    expect(tokens.slice(0, 3).every((t) => t?.startsWith("w1/"))).toBe(true);
    expect(tokens[3]).toBeNull();
    expect(await lease.holders(ids)).toEqual(tokens.slice(0, 3));
    spy.mockClear();
    expect(
      await Promise.all([...ids.map((id, i) => lease.renew(id, tokens[i]!)), lease.renew(ids[1]!, "w2/x")]),
    ).toEqual([true, true, true, false]);
    expect(scriptCalls()).toBe(1);
    expect(
      await Promise.all([...ids.map((id, i) => lease.hold?.(id, tokens[i]!)), lease.hold?.(ids[1]!, "w2/x")]),
    ).toEqual(["renewed", "renewed", "renewed", "lost"]);
    expect(scriptCalls()).toBe(1);
    expect(await lease.lastRenewal(ids[2]!)).toBeGreaterThan(Date.now() - 5_000);
    spy.mockClear();
    expect(
      await Promise.all([
        lease.release(ids[0]!, "w2/x"),
        ...ids.map((id, i) => lease.release(id, tokens[i]!)),
      ]),
    ).toEqual([false, true, true, true]);
    expect(scriptCalls()).toBe(1);
    expect(await lease.holders(ids)).toEqual([null, null, null]);
    spy.mockRestore();
  });
});
