/**
 * `GET /v1/batches/:id` counts every session of the batch (one pass over its sessions and their
 * unfinished runs: about 0.3–0.6 s of Postgres at 20,000 sessions). Many pollers of one batch
 * (dashboards, `--wait`s, a backend's status loop) asked it once each, all at the same time;
 * now the polls of one batch that arrive while its view is being read share the next read,
 * which starts after they arrived (so a poll after a cancel still sees the cancel). Counted on
 * the wire (postgres.js's debug hook), against a real Postgres.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { countedDatabase } from "./support/counted-statements.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let counted: ReturnType<typeof countedDatabase>;
beforeAll(async () => {
  fleet = await createFleetEnv("batch-view-shared");
  ({ client } = await fleet.startApi());
  counted = countedDatabase(fleet.config.databaseUrl);
});
afterAll(async () => {
  await counted?.database.close();
  await fleet?.close();
});

const countsStatements = () => counted.statements.filter((s) => s.includes("as total")).length;

it("20 polls of one batch at once read its counts at most twice, and each sees what was committed before it", async () => {
  const agent = { model: { provider: "scripted" as const, steps: [{ text: "hi" }] } };
  const created = await client.createBatch(
    Array.from({ length: 300 }, (_, i) => ({ agent, input: `go ${i}` })),
  );
  const other = await client.createBatch([{ agent, input: "other" }]);
  const store = new BatchStore(counted.database);
  const tenant = (
    await fleet.database.sql<{ tenant: string }[]>`
    select tenant from batches where id = ${created.id}`
  )[0]!.tenant;

  const views = await Promise.all(Array.from({ length: 20 }, () => store.view(created.id, tenant)));
  expect(views.map((v) => v?.counts.total)).toEqual(Array(20).fill(300));
  expect(countsStatements()).toBeLessThanOrEqual(2);

  // Another batch, or another tenant's look at this one, is a read of its own.
  const [mine, theirs, wrongTenant] = await Promise.all([
    store.view(created.id, tenant),
    store.view(other.id, tenant),
    store.view(created.id, "someone-else"),
  ]);
  expect([mine?.counts.total, theirs?.counts.total, wrongTenant]).toEqual([300, 1, undefined]);

  // A poll that arrives after a cancel committed sees it, though a read begun before is in flight.
  const before = store.view(created.id, tenant);
  await client.cancelBatch(created.id);
  const after = await store.view(created.id, tenant);
  await before;
  expect(after?.status).toBe("cancelled");
  expect(after?.counts.cancelled).toBe(300);
});
