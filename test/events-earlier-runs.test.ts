/**
 * A job whose session's stream lacks messages of an earlier job (that job crashed between a
 * commit and its event, or its write failed) puts them back before its own events. Their
 * MESSAGE events carry the run that committed them (contracts §7: run events carry `runId`),
 * read from Postgres as the sweeper's repair does, not null for "not this job's".
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { SessionEventLog } from "../src/shared/session-event-log.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("messages of an earlier job put back into the stream", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("eventsearlierruns");
    client = (await fleet.startApi()).client;
    await fleet.spawnWorker();
  });
  afterAll(async () => {
    await fleet?.close();
  });

  it("carry the run that committed them", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "first" }] } },
    });
    const first = await client.send(id, "one");
    await client.waitForRun(first.runId, { timeoutMs: 15_000 });
    const history = await new SessionQueries(fleet.database).loadHistory(id);
    expect(history.map((m) => m.seq)).toEqual([1, 2]);

    // The stream lost both messages; the next job, which did not commit them, writes first.
    const key = eventStreamKey(fleet.config.prefix, id);
    // Once the first run's worker has written its last event: the run ends in Postgres before its
    // RUN_COMPLETED reaches the stream, and on a loaded machine its events landed after the delete.
    await waitFor(
      async () =>
        ((await fleet.redis.xrange(key, "-", "+")) as [string, string[]][]).some(([, f]) =>
          f[3]!.includes('"RUN_COMPLETED"'),
        ),
      15_000,
      "the first run's RUN_COMPLETED in the stream",
    );
    await fleet.redis.del(key, `${fleet.config.prefix}:events-seq:${id}`);
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, undefined, undefined, true, 0, {
      database: fleet.database,
    });
    const errors: unknown[] = [];
    const log = new SessionEventLog(
      writer,
      id,
      history,
      () => null,
      (error) => errors.push(error),
      null,
    );
    const next = randomUUID();
    await log.emit([{ type: "RUN_STARTED", runId: next, kind: "run", resumeKind: null, trigger: "api" }]);

    const rows = (await fleet.redis.xrange(key, "-", "+")) as [string, string[]][];
    const events = rows.map(([, fields]) => JSON.parse(fields[3]!) as { type: string; runId: string | null });
    expect(events.map((e) => [e.type, e.runId])).toEqual([
      ["MESSAGE", first.runId],
      ["MESSAGE", first.runId],
      ["RUN_STARTED", next],
    ]);
    expect(errors).toEqual([]);
  }, 60_000);
});
