/**
 * A provider account out of credit: OpenAI answers every request `429` with the type and code
 * `insufficient_quota` ("You exceeded your current quota, please check your plan and billing
 * details"). That is no rate limit: waiting does not end it. On an endpoint with declared
 * limits every 429 counted as a wait (contracts §15), so the session waited for ever, its
 * job handed back again and again and 50 requests sent per hand-back, and nothing said why.
 * It is a refusal: the run ends `provider_error` quoting the provider, and the session is
 * parked `provider_rejected` with it (the same refusal would come back), after one request.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const QUOTA = "You exceeded your current quota, please check your plan and billing details.";

describe("a provider account out of quota behind a declared endpoint", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let provider: FakeOpenAI;

  beforeAll(async () => {
    provider = await startFakeOpenAI([], {
      respond: () => ({
        status: 429,
        errorMessage: QUOTA,
        errorType: "insufficient_quota",
        errorCode: "insufficient_quota",
      }),
    });
    fleet = await createFleetEnv("quotaexhausted", {
      env: {
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          broke: { provider: "openai", baseUrl: provider.url, limits: { requestsPerMinute: 60_000 } },
        }),
        FLEET_ENDPOINT_DEFAULT_PAUSE_MS: "100",
      },
    });
    ({ client } = await fleet.startApi());
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    await provider?.close();
  });

  it("ends the run quoting the provider and parks the session instead of waiting for ever", async () => {
    const agent = { model: { provider: "openai" as const, endpoint: "broke", model: "gpt-test" } };
    const { id } = await client.createSession({ agent });
    const { runId } = await client.send(id, "go");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("provider_error");
    expect(run.error).toContain("exceeded your current quota");
    await waitFor(
      async () => (await client.getSession(id)).status === "parked",
      10_000,
      "the session parked",
    );
    expect((await client.getSession(id)).parkedReason).toMatch(
      /^provider_rejected: .*exceeded your current quota/,
    );
    expect(provider.requests.length).toBe(1);
  }, 60_000);
});
