/**
 * A batch's view (GET /v1/batches/:id, the BATCH_COMPLETED event, the webhook's body) read
 * its row (open, cancelled_at) and its counts in two statements. A cancel committed between
 * them was seen by the counts (every session terminal, some cancelled) but not by the row:
 * the batch read `status: "ended"` with no `cancelledAt`, and BATCH_COMPLETED, written once,
 * and the webhook said so for good. Here the cancel is committed exactly there.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { Database } from "../src/shared/db/client.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("a batch's view while a cancel commits", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-view-cancel");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(() => fleet?.close());

  it("says cancelled when the counts it gives show the cancel", async () => {
    // Sessions with input and no worker: queued until the cancel.
    const created = await client.createBatch([
      { agent: AGENT, input: "a", customId: "a" },
      { agent: AGENT, input: "b", customId: "b" },
    ]);
    let cancelled = false;
    // The batch's row is read, then the cancel commits (from another connection), then the
    // counts; in a transaction of the view's too.
    const hooked = (sql: Database["sql"]): Database["sql"] =>
      new Proxy(sql, {
        get(target, prop, receiver) {
          const value = Reflect.get(target, prop, receiver);
          if (prop !== "begin") return value;
          return (...args: unknown[]) => {
            const fn = args.at(-1) as (tx: Database["sql"]) => unknown;
            return (value as (...a: unknown[]) => unknown).apply(target, [
              ...args.slice(0, -1),
              (tx: Database["sql"]) => fn(hooked(tx)),
            ]);
          };
        },
        apply(target, self, args: unknown[]) {
          const strings = args[0] as readonly string[] | undefined;
          const isRowRead =
            Array.isArray(strings) && strings.join("").includes("row_to_json(b) as b from batches");
          const query = Reflect.apply(target, self, args) as PromiseLike<unknown>;
          if (!isRowRead || cancelled) return query;
          return (async () => {
            const rows = await query;
            cancelled = true;
            await new BatchStore(fleet.database).cancel("default", { batchId: created.id });
            return rows;
          })();
        },
      });
    const sql = hooked(fleet.database.sql);
    const store = new BatchStore({ ...fleet.database, sql } as Database);
    const view = await store.view(created.id);
    expect(cancelled).toBe(true);
    // Either before the cancel (both queued, running) or after it (both cancelled): never
    // counts that show the cancel under a status that does not.
    const seen = { status: view!.status, cancelledAt: view!.cancelledAt !== undefined, counts: view!.counts };
    const before = {
      status: "running",
      cancelledAt: false,
      counts: { total: 2, queued: 2, running: 0, completed: 0, parked: 0, cancelled: 0 },
    };
    const after = {
      status: "cancelled",
      cancelledAt: true,
      counts: { total: 2, queued: 0, running: 0, completed: 0, parked: 0, cancelled: 2 },
    };
    expect([before, after]).toContainEqual(seen);
    expect((await client.getBatch(created.id)).status).toBe("cancelled");
  }, 60_000);
});
