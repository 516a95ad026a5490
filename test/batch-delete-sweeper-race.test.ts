/**
 * `DELETE /v1/batches/:id` while a sweeper runs its retention timer (a real `fleet sweeper`
 * process, every 50 ms): the sweeper finishes batch deletions the API left unfinished, and it
 * used to take every batch marked deleted — also one whose DELETE was still purging it. The
 * two then shared the chunks (`skip locked`), so the request answered `sessionsDeleted` short
 * of the batch's sessions (0 when the sweeper came first), and the sweeper counted a user's
 * deletion as `fleet_sessions_deleted_total{trigger="retention"}`. A deletion under way is
 * now the API's for its budget; the sweeper takes it only once it was marked a minute ago.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };
const PART = 1_000;
const PARTS = 3;

describe("DELETE /v1/batches/:id while a sweeper's retention timer runs", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("batchdeletesweeperrace");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("answers every session of the batch deleted, none counted by the sweeper as retention", async () => {
    const sweeper = await fleet.spawnSweeper({ FLEET_RETENTION_INTERVAL_MS: "50", LOG_LEVEL: "info" });
    const messages = [
      { role: "user" as const, content: "hi" },
      { role: "assistant" as const, content: "hello", stopReason: "end_turn" as const },
    ];
    const entries = () => Array.from({ length: PART }, () => ({ agent: AGENT, messages }));
    const batch = await client.createBatch(entries(), { open: true });
    for (let i = 1; i < PARTS; i++)
      await client.appendToBatch(batch.id, entries(), { close: i === PARTS - 1 });
    const answer = await client.deleteBatch(batch.id);
    const { sql } = fleet.database;
    await waitFor(
      async () => (await sql`select 1 from batches where id = ${batch.id}`).length === 0,
      30_000,
      "the batch's row gone",
    );
    expect(answer).toEqual({ id: batch.id, deleted: true, sessionsDeleted: PART * PARTS, complete: true });
    expect(sweeper.output()).not.toMatch(/retention: deleted sessions and batches/);
  }, 120_000);
});
