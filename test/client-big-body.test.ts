/**
 * A call whose JSON body is larger than the API takes (16 MiB, contracts §4) is refused by the
 * client before anything is sent, with the FleetApiError the API would give (413,
 * `invalid_request`, "the body is larger than 16 MiB"). Before, the client uploaded it, the
 * API answered 413 and closed the connection while the body was still being written, and the
 * call rejected now with that 413, now with a FleetNetworkError `write EPIPE` — which says the
 * call may have been done, so a caller sent it again, and again met the same.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import { type ApiProcess, spawnApi } from "./support/api-process.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("a request body past the API's limit", () => {
  let fleet: FleetEnv;
  let api: ApiProcess;
  let client: FleetClient;
  beforeAll(async () => {
    fleet = await createFleetEnv("client-big-body");
    // A `fleet api` process of its own: the API in this process answered 413 every time.
    api = await spawnApi(fleet);
    client = new FleetClient({ baseUrl: api.url });
  }, 60_000);
  afterAll(async () => {
    api?.signal();
    await api?.exited;
    await fleet?.close();
  });

  it("is the API's 413 every time, never a network error, and creates nothing", async () => {
    const outcomes: string[] = [];
    for (const mib of [16.1, 17, 17, 24, 64, 64]) {
      const text = "x".repeat(Math.round(mib * 1024 * 1024));
      const error = await client
        .createSession({ agent: { model: { provider: "scripted", steps: [{ text }] } } })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      outcomes.push(
        error instanceof FleetApiError
          ? `${error.status} ${error.code}: ${error.message}`
          : `${(error as Error)?.name}: ${(error as Error)?.message}`,
      );
    }
    expect(outcomes).toEqual(
      Array(6).fill(
        "413 invalid_request: POST /v1/sessions: the body is larger than 16 MiB (nothing was sent)",
      ),
    );
    const rows = await fleet.database.sql<{ count: number }[]>`select count(*)::int as count from sessions`;
    expect(rows[0]?.count).toBe(0);
  }, 120_000);
});
