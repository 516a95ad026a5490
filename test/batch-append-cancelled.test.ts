/**
 * Appending to a batch that was cancelled: 409 `batch_closed`, as for any closed batch, and
 * its message now says it was cancelled. Before, "batch … is closed; it takes no more
 * sessions" left the caller of an open batch (one it had never closed) to guess why.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, type FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("appending to a cancelled batch", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("appendcancelled");
    client = (await fleet.startApi()).client;
  }, 60_000);
  afterAll(() => fleet?.close());

  it("is a 409 batch_closed that says the batch was cancelled", async () => {
    const batch = await client.createBatch([{ agent: AGENT, customId: "first" }], { open: true });
    await client.cancelBatch(batch.id);
    const refused = await client
      .appendToBatch(batch.id, [{ agent: AGENT, customId: "late" }])
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(FleetApiError);
    expect({ status: (refused as FleetApiError).status, reason: (refused as FleetApiError).reason }).toEqual({
      status: 409,
      reason: "batch_closed",
    });
    expect((refused as FleetApiError).message).toContain("was cancelled");
  }, 60_000);

  it("a batch closed by its last part says so, not cancelled", async () => {
    const batch = await client.createBatch([{ agent: AGENT, customId: "first" }], { open: true });
    await client.appendToBatch(batch.id, [{ agent: AGENT, customId: "last" }], { close: true });
    const refused = await client
      .appendToBatch(batch.id, [{ agent: AGENT, customId: "late" }])
      .catch((e: unknown) => e);
    expect((refused as FleetApiError).reason).toBe("batch_closed");
    expect((refused as FleetApiError).message).not.toContain("cancelled");
  }, 60_000);
});
