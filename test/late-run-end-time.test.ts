/**
 * A run's RUN_COMPLETED written late — by a reader's look at a stream that lacks it, or by the
 * sweeper's (both `EventWriter.missingRunEnd`) — carries the run's end time as `endedAt`
 * (from its runs row), and `fleet watch` dates the line by it. Before, the event carried only
 * `at` (when it entered the stream: the repair's time, kept so by the events contract), so
 * `fleet watch` printed a run that ended ten minutes earlier as ending now.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventTimeOf } from "../src/commands/watch.js";
import type { FleetClient, FleetEvent } from "../src/producer/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey, seqKey, toStored } from "../src/shared/events.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("a run's end written late", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("lateend", { env: { FLEET_SSE_HEARTBEAT_MS: "200" } });
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(() => fleet?.close());

  const entriesOf = async (id: string) =>
    (
      (await fleet.redis.xrange(eventStreamKey(fleet.config.prefix, id), "-", "+")) as [string, string[]][]
    ).map(toStored);

  /**
   * Two sessions, each with one run ended and its RUN_COMPLETED taken out of its stream (as a
   * SIGKILL between the commit and the write leaves it), the run's end dated ten minutes ago.
   * Returns each session's id, run id and end time (ISO, as the runs row has it).
   */
  async function lostEnds(n: number): Promise<{ id: string; runId: string; endedAt: string }[]> {
    const worker = await fleet.spawnWorker();
    const out: { id: string; runId: string; endedAt: string }[] = [];
    try {
      for (let i = 0; i < n; i++) {
        const { id } = await client.createSession({ agent: AGENT });
        const { runId } = await client.send(id, "hi");
        await waitFor(
          async () => (await entriesOf(id)).some((e) => e.type === "RUN_COMPLETED"),
          20_000,
          "the run's end in its stream",
        );
        out.push({ id, runId, endedAt: "" });
      }
    } finally {
      worker.child.kill("SIGTERM");
      await worker.exited;
    }
    for (const row of out) {
      const ends = (await entriesOf(row.id)).filter((e) => e.type === "RUN_COMPLETED");
      await fleet.redis.xdel(eventStreamKey(fleet.config.prefix, row.id), ...ends.map((e) => e.id));
      await fleet.redis.hdel(seqKey(fleet.config.prefix, row.id), "done", "ended");
      const [run] = await fleet.database.sql<{ ended_at: string }[]>`
        update runs set ended_at = now() - interval '10 minutes' where id = ${row.runId}
        returning to_char(ended_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as ended_at`;
      row.endedAt = run!.ended_at;
    }
    return out;
  }

  it("carries the run's end time as endedAt, from a reader's repair and from the sweeper's, and fleet watch shows it", async () => {
    const [byReader, bySweeper] = await lostEnds(2);

    // A reader's look writes the lost end (events-api.test.ts); the SSE event carries endedAt.
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 15_000);
    let end: FleetEvent | undefined;
    try {
      for await (const event of client.events(byReader!.id, { signal: controller.signal }))
        if (event.type === "RUN_COMPLETED") {
          end = event;
          break;
        }
    } finally {
      clearTimeout(timer);
      controller.abort();
    }
    expect(end?.data).toMatchObject({
      runId: byReader!.runId,
      outcome: "completed",
      endedAt: byReader!.endedAt,
    });
    // `at` is still when it entered the stream (now), as the events contract says.
    expect(Date.parse(String(end!.data.at)) - Date.parse(byReader!.endedAt)).toBeGreaterThan(9 * 60_000);
    expect(eventTimeOf(end!)).toBe(byReader!.endedAt);

    // The sweeper's repair is the same write (sweeper-process.ts runEndMissing).
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    expect(await writer.missingRunEnd(fleet.database, bySweeper!.id, 0)).toBe(bySweeper!.runId);
    const written = (await entriesOf(bySweeper!.id)).filter((e) => e.type === "RUN_COMPLETED");
    expect(written.map((e) => e.data)).toEqual([
      expect.objectContaining({ runId: bySweeper!.runId, endedAt: bySweeper!.endedAt }),
    ]);
  }, 90_000);

  it("fleet watch dates a RUN_COMPLETED by endedAt when it has one, else by at", () => {
    const at = "2026-12-05T10:10:00.000Z";
    const endedAt = "2026-12-05T10:00:00.000Z";
    const event = (data: Record<string, unknown>): FleetEvent => ({
      id: "1-0",
      type: "RUN_COMPLETED",
      data: { type: "RUN_COMPLETED", sessionId: "s", runId: "r", outcome: "completed", ...data },
    });
    expect(eventTimeOf(event({ at, endedAt }))).toBe(endedAt);
    expect(eventTimeOf(event({ at }))).toBe(at);
    expect(eventTimeOf(event({ at, endedAt: "not a time" }))).toBe(at);
  });
});
