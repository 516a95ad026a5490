/**
 * Retention (FLEET_RETENTION_DAYS) marks a batch ended long ago deleted while one of its
 * sessions is sent a new message (allowed: a session of an ended batch takes one, and the
 * batch then counts it). The send reads the batch's mark after its session's lock and queues
 * its run; the retention statement read the batch idle in a snapshot taken before that run
 * committed, and locked none of its sessions. So the send was answered `202` with its run
 * queued and the batch's purge then deleted the session with the message just accepted. Now
 * retention holds the batch's sessions after its mark and looks again: a run queued
 * meanwhile keeps the batch (and a send after the mark is a 404).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetApiError, FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };
const COMPLETED: Message[] = [
  { role: "user", content: "hi" },
  { role: "assistant", content: "hello", stopReason: "end_turn" },
];
const DAY_MS = 86_400_000;

describe("retention of a batch against a new message to one of its sessions", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("retentionbatchrace");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("never marks the batch deleted under a message the API accepted", async () => {
    const { sql } = fleet.database;
    const store = new DataDeletion(fleet.database);
    const batch = await client.createBatch([{ agent: AGENT, messages: COMPLETED }]);
    const id = batch.sessions[0]!.id;
    await waitFor(
      async () => (await client.getBatch(batch.id)).status === "ended",
      10_000,
      "the batch ended",
    );
    await sql`update batches set ended_at = now() - interval '10 days' where id = ${batch.id}`;

    // The send has locked its session and read the batch not deleted, and waits to insert
    // its run: a transaction of the test holds the runs table from inserts for that while.
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let locked: () => void = () => {};
    const isLocked = new Promise<void>((resolve) => {
      locked = resolve;
    });
    const holder = sql.begin(async (tx) => {
      await tx`lock table runs in share mode`;
      locked();
      await held;
    });
    await isLocked;
    const sent = client.send(id, "one more thing").then(
      () => 202,
      (e: FleetApiError) => e.status,
    );
    const waitingOn = async (text: string) =>
      (
        await sql`select 1 from pg_stat_activity where wait_event_type = 'Lock' and query like ${`%${text}%`}
                    and query not like '%pg_stat_activity%'`
      ).length > 0;
    await waitFor(() => waitingOn("insert into runs"), 10_000, "the send waiting to insert its run");

    // Retention ends without waiting for the send (now: it skips the batch whose session the
    // send holds; before: it marked it, reading it idle).
    const marked = await store.expireBatches(DAY_MS, 10);
    release();
    await holder;
    const status = await sent;
    const [kept] = await sql`select 1 from batches where id = ${batch.id} and deleted_at is null`;
    expect({ status, marked, kept: kept !== undefined }).toEqual({ status: 202, marked: [], kept: true });
    const queued = await sql`select 1 from runs where session_id = ${id} and status = 'queued'`;
    expect(queued).toHaveLength(1);
  }, 60_000);
});
