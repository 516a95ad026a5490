/**
 * A job's event log whose stream Redis lost mid-run (a restart without persistence, an
 * expiry): its next write, even one of events alone (a text delta, a tool start), puts the
 * stored messages back first, so the rebuilt stream starts with the history, not with
 * events of a step in the middle of it.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { SessionEventLog } from "../src/shared/session-event-log.js";
import { sharedRedisForFile } from "./support/shared-redis.js";

const PREFIX = `lost-${randomUUID().slice(0, 8)}`;
const shared = sharedRedisForFile(PREFIX);

const at = (seq: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, seq)).toISOString();

describe("a stream lost mid-run", () => {
  it("is rebuilt from the first message by the next write, whatever that write carries", async () => {
    const writer = new EventWriter(shared.redis, PREFIX);
    const sessionId = randomUUID();
    const history: StoredMessage[] = [
      { role: "user", content: "go", seq: 1, createdAt: at(1) },
      {
        role: "assistant",
        content: "",
        stopReason: "tool_use",
        toolCalls: [{ id: "c1", name: "x", arguments: {} }],
        seq: 2,
        createdAt: at(2),
      },
      { role: "tool", toolCallId: "c1", name: "x", content: "ok", success: true, seq: 3, createdAt: at(3) },
    ];
    const errors: unknown[] = [];
    const log = new SessionEventLog(
      writer,
      sessionId,
      history,
      () => "run-1",
      (e) => errors.push(e),
      0,
    );
    await log.emit([{ type: "RUN_STARTED", runId: "run-1", kind: "run", resumeKind: null, trigger: "api" }]);
    const key = eventStreamKey(PREFIX, sessionId);
    expect(await shared.redis.xlen(key)).toBe(4);

    // Redis loses the stream and its seq record; the job goes on with a delta and a tool start.
    await shared.redis.del(key, `${PREFIX}:events-seq:${sessionId}`);
    log.delta("run-1", "thinking");
    await log.emit([{ type: "TOOL_STARTED", runId: "run-1", toolCallId: "c2", name: "x" }]);
    await new Promise((resolve) => setTimeout(resolve, 150));

    const rows = (await shared.redis.xrange(key, "-", "+")) as [string, string[]][];
    const entries = rows.map(([, fields]) => {
      const data = JSON.parse(fields[3]!) as { message?: { seq: number } };
      return data.message ? `MESSAGE#${data.message.seq}` : fields[1]!;
    });
    expect(entries).toEqual(["MESSAGE#1", "MESSAGE#2", "MESSAGE#3", "MESSAGE_DELTA", "TOOL_STARTED"]);
    expect(errors).toEqual([]);
  });
});
