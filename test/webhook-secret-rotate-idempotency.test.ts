/**
 * `POST /v1/webhook-secret/rotate` while per-tenant webhook secrets are off answers 404: that
 * depends on the fleet as it stands (FLEET_WEBHOOK_SECRET_PER_TENANT), not on the request, so
 * an Idempotency-Key does not keep it (README: a 4xx that depends on the fleet is not kept, as
 * a FleetStateError's 400 is not). Kept, the retry with the key after the operator turned them
 * on got the same 404 back for 24 h, and rotated nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningApi, startApi } from "../src/producer/api-server.js";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("rotating a webhook secret with an Idempotency-Key while per-tenant secrets are off", () => {
  let fleet: FleetEnv;
  let turnedOn: RunningApi | undefined;

  beforeAll(async () => {
    fleet = await createFleetEnv("rotateoff", { env: { FLEET_WEBHOOK_SECRET: "an operator's secret" } });
  }, 60_000);
  afterAll(async () => {
    await turnedOn?.stop();
    await fleet?.close();
  });

  it("answers 404 without keeping it: the retry once they are on rotates", async () => {
    const { api, client } = await fleet.startApi();
    const refused = await client
      .rotateWebhookSecret({ idempotencyKey: "rotate-1" })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(FleetApiError);
    expect((refused as FleetApiError).status).toBe(404);
    await api.stop();

    // The operator turns per-tenant secrets on: the same request with its key rotates now.
    const config = fleet.config;
    turnedOn = await startApi(
      { ...config, logLevel: "silent", webhooks: { ...config.webhooks, perTenant: true } },
      { port: 0 },
    );
    const on = new FleetClient({ baseUrl: turnedOn.url });
    const rotated = await on
      .rotateWebhookSecret({ idempotencyKey: "rotate-1" })
      .catch((error: unknown) => error);
    expect(rotated).toMatchObject({ generation: 1 });
    // A replay of that answer rotates nothing more.
    expect(await on.rotateWebhookSecret({ idempotencyKey: "rotate-1" })).toEqual(rotated);
  }, 60_000);
});
