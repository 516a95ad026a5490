/**
 * A worker whose run's end parked the session (max_turns, budget_exhausted, …) commits the end
 * and the parking in one statement, then writes RUN_COMPLETED and SESSION_PARKED in one write.
 * Killed between the two, it left both out of the stream: `EventWriter.missingRunEnd` (an
 * events reader's repair, contracts §7) wrote the lost RUN_COMPLETED, but the session's
 * SESSION_PARKED never came, so a client following its events never saw the park. Now the repair
 * writes the parking that run's end made with it, once (`parkId`: the run's id, which the
 * worker's own late write carries too).
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { QUEUES } from "../src/shared/queues.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { storedEvents } from "./support/lost-cancel.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "answer" }] } });

describe("the parking a run's end made, its worker killed before it wrote the events", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("parkworkerdeath");
  });
  afterAll(async () => {
    await fleet?.close();
  });

  /** A session whose run `runId` ended `reason` and parked it in one statement, as a worker's end does. */
  async function parkedByRunEnd(reason: string, detail: string): Promise<{ id: string; runId: string }> {
    const { id } = await new SessionQueries(fleet.database).createSession({
      agent: AGENT,
      messages: [{ role: "user", content: "question" }],
    });
    const runId = randomUUID();
    await fleet.database.sql.begin(async (tx) => {
      await tx`
        insert into runs (id, session_id, kind, trigger, status, ended_reason, started_at, ended_at, job_id)
        values (${runId}, ${id}, 'run', 'api', 'ended', ${reason}, now() - interval '1 minute', now(),
                ${QUEUES.runs.jobId({ sessionId: id, runId })})`;
      await tx`
        update sessions set run_started = true, status = 'parked', parked_reason = ${`${reason}: ${detail}`},
                            updated_at = now() where id = ${id}`;
    });
    return { id, runId };
  }

  it("is written with the run's lost end, once, whoever writes it how often", async () => {
    const { id, runId } = await parkedByRunEnd("max_turns", "20 turns");
    const events = new EventWriter(fleet.redis, fleet.config.prefix);
    expect(await events.missingRunEnd(fleet.database, id, 0)).toBe(runId);
    const ends = async () => (await storedEvents(fleet, id)).filter((e) => e.type !== "MESSAGE");
    expect(await ends()).toEqual([
      expect.objectContaining({ type: "RUN_COMPLETED", runId, outcome: "max_turns" }),
      // Named by its run (an addition to §7): a reader that missed the run knows the parking.
      { sessionId: id, type: "SESSION_PARKED", runId, reason: "max_turns" },
    ]);
    // The killed worker's write, late (frozen, not killed), and another repair: nothing more.
    await events.writeAfterSync(fleet.database, id, [
      { type: "RUN_COMPLETED", runId, outcome: "max_turns" },
      { type: "SESSION_PARKED", reason: "max_turns", parkId: runId },
    ]);
    expect(await events.missingRunEnd(fleet.database, id, 0)).toBeNull();
    expect((await ends()).length).toBe(2);
  }, 30_000);

  it("is written by a live worker once, and left alone by the repair", async () => {
    const { client } = await fleet.startApi();
    await fleet.spawnWorker();
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 1 } }] }] },
        tools: ["sleep"],
        maxTurns: 1,
      },
    });
    const { runId } = await client.send(id, "go");
    expect((await client.waitForRun(runId, { timeoutMs: 20_000 })).endedReason).toBe("max_turns");
    const parked = async () => (await storedEvents(fleet, id)).filter((e) => e.type === "SESSION_PARKED");
    await waitFor(async () => (await parked()).length > 0, 10_000, "the worker's SESSION_PARKED");
    const events = new EventWriter(fleet.redis, fleet.config.prefix);
    expect(await events.missingRunEnd(fleet.database, id, 0)).toBeNull();
    expect(await parked()).toEqual([{ sessionId: id, type: "SESSION_PARKED", runId, reason: "max_turns" }]);
  }, 60_000);

  it("writes no SESSION_PARKED for a run whose end did not park the session", async () => {
    const { id, runId } = await parkedByRunEnd("provider_error", "503");
    // Parked later, by someone else (the sweeper's decision, announced by its parker).
    await fleet.database.sql`update sessions set updated_at = now() + interval '1 second' where id = ${id}`;
    const events = new EventWriter(fleet.redis, fleet.config.prefix);
    expect(await events.missingRunEnd(fleet.database, id, 0)).toBe(runId);
    const ends = (await storedEvents(fleet, id)).filter((e) => e.type !== "MESSAGE");
    expect(ends).toEqual([
      expect.objectContaining({ type: "RUN_COMPLETED", runId, outcome: "provider_error" }),
    ]);
  }, 30_000);
});
