/**
 * A session's stream that Redis no longer has (lost, evicted) is written again from Postgres by
 * whoever finds a run's end missing (a reader's look, the sweeper's): every stored message went
 * in, 20,000 for a session of 20,000 messages, for a stream that keeps the last FLEET_EVENTS_MAX
 * and readers who get 410 for any place before the rebuild anyway. Now it starts at the stored
 * messages the stream would keep, marked as trimmed before them, so a reader from the stream's
 * start (`after=0-0`) is told it expired rather than given a history that starts in the middle.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { STREAM_START } from "../src/shared/event-expiry.js";
import { EventReader } from "../src/shared/event-reader.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, seqKey, toStored } from "../src/shared/events.js";
import type { Message } from "../src/shared/messages.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });
const KEPT = 100;

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("events-rebuild-tail");
}, 60_000);
afterAll(() => fleet?.close());

function history(n: number): Message[] {
  const out: Message[] = [];
  for (let i = 0; i < n; i += 2)
    out.push(
      { role: "user", content: `q${i}` },
      { role: "assistant", content: `a${i}`, stopReason: "end_turn" },
    );
  return out;
}

describe("a lost stream written again from Postgres", () => {
  it("holds the messages it keeps, not every stored one, and reads as trimmed before them", async () => {
    const queries = new SessionQueries(fleet.database);
    const { id } = await queries.createSession({ agent: AGENT, messages: history(2_000) });
    const runId = randomUUID();
    await fleet.database.sql`
      insert into runs (id, session_id, tenant, kind, trigger, status, ended_reason, started_at, ended_at)
      values (${runId}, ${id}, 'default', 'run', 'api', 'ended', 'completed', now() - interval '20 seconds',
              now() - interval '10 seconds')`;
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, {
      maxEvents: KEPT,
      maxAgeMs: 3_600_000,
    });
    const key = eventStreamKey(fleet.config.prefix, id);

    // A reader's look finds the run's end missing: the stream is written again with it.
    expect(await writer.missingRunEnd(fleet.database, id, 1_000)).toBe(runId);
    const info = (await fleet.redis.call("XINFO", "STREAM", key)) as unknown[];
    const added = Number(info[info.indexOf("entries-added") + 1]);
    // Before: 2,001 entries written (every stored message and the end), then trimmed. Now the
    // kept ones, and one counted more than the stream holds: it reads as trimmed.
    expect(added).toBeLessThanOrEqual(KEPT + 2);
    expect(added).toBeGreaterThan(Number(info[info.indexOf("length") + 1]));
    const rows = ((await fleet.redis.xrange(key, "-", "+")) as [string, string[]][]).map(toStored);
    expect(rows.length).toBeLessThanOrEqual(KEPT + 1);
    const seqs = rows.flatMap((e) => (e.type === "MESSAGE" ? [(e.data.message as { seq: number }).seq] : []));
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => 2_000 - seqs.length + 1 + i));
    expect(rows.at(-1)).toMatchObject({ type: "RUN_COMPLETED", data: { runId } });
    expect(await fleet.redis.hget(seqKey(fleet.config.prefix, id), "seq")).toBe("2000");

    // A reader from its start, or from a place of the stream that was lost: 410 expired.
    const reader = new EventReader(fleet.redis, fleet.config.prefix);
    expect(await reader.expired(key, STREAM_START)).toBe(true);
    expect(await reader.expired(key, "1-0")).toBe(true);
    expect(await reader.placeGone(key, "1-0")).toBe(true);
    // A reader from its first entry reads on, and the next message follows the last.
    expect(await reader.expired(key, rows[0]!.id)).toBe(false);
    const next = await writer.write(
      id,
      [
        {
          runId: null,
          message: { role: "user", content: "later", seq: 2_001, createdAt: new Date().toISOString() },
        },
      ],
      [],
    );
    expect(next.ok).toBe(true);
  }, 60_000);
});
