/**
 * A run's first write into a session that had no stream starts the stream at its RUN_STARTED
 * (`start`, session-event-log.ts). A start not taken because a stream began meanwhile with
 * fewer messages (the history of a stream turned on, written in chunks) was ignored: a
 * RUN_STARTED written alone went in after the messages there so far, and the rest of the
 * history came after it — a reader without an id read old messages as the run's. It is a gap
 * now, filled before the event.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, type SessionEventInput, seqKey } from "../src/shared/events.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { SessionEventLog } from "../src/shared/session-event-log.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

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
  beforeAll(async () => {
    fleet = await createFleetEnv("evswitchrace");
    const started = await fleet.startApi();
    client = started.client;
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
});
