/**
 * A backend that hands `createBatch` 20,000 sessions is told how a batch that big is sent:
 * in parts of at most 1,000 (the first open, the others appended, the last closing it).
 * Before, the 400 said only `sessions: holds at most 1000 sessions`, and nothing about the
 * open batch and its appends that take any number.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
beforeAll(async () => {
  fleet = await createFleetEnv("batch-too-many");
  ({ client } = await fleet.startApi());
});
afterAll(async () => {
  await fleet?.close();
});

const agent = { model: { provider: "scripted" as const, steps: [{ text: "hi" }] } };
const many = (n: number) => Array.from({ length: n }, (_, i) => ({ agent, input: `go ${i}` }));

it("a batch of 20,000 in one request is a 400 that says how to send it in parts, and nothing is created", async () => {
  const error = await client.createBatch(many(20_000)).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(FleetApiError);
  expect((error as FleetApiError).status).toBe(400);
  expect((error as FleetApiError).field).toBe("sessions");
  expect((error as FleetApiError).message).toMatch(
    /at most 1000 sessions per request.*open: true.*close: true/,
  );
  const [row] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`;
  expect(row!.n).toBe(0);

  const open = await client.createBatch(many(1), { open: true });
  const appended = await client.appendToBatch(open.id, many(1_001)).catch((e: unknown) => e);
  expect((appended as FleetApiError).message).toMatch(/at most 1000 sessions per request/);
});
