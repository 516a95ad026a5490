/**
 * A worker whose FLEET_MODEL_ENDPOINTS lacks an endpoint the API's declares (the variable
 * set on the API's deployment only). The API takes the run — the endpoint is declared there
 * — and the worker parks the session `invalid_agent` with "no endpoint named "local" is
 * declared in FLEET_MODEL_ENDPOINTS": the tenant read it as a fault of its agent, and the
 * operator, who had declared it, as nonsense (found by hand). The worker's words now say it is
 * this worker's settings that lack it, and that every role needs the same. Real API, a
 * `fleet worker` child, Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";

const WORDS =
  'agent.model.endpoint: no endpoint named "local" is declared in this worker\'s FLEET_MODEL_ENDPOINTS ' +
  "(the API took the run, so its own may declare it): give the API and every worker the same FLEET_MODEL_ENDPOINTS";

describe("a worker without an endpoint the API declares", () => {
  let model: FakeOpenAI;
  let fleet: FleetEnv;
  let client: FleetClient;
  let worker: WorkerProcess;
  beforeAll(async () => {
    model = await startFakeOpenAI([{ text: ["never asked"] }]);
    fleet = await createFleetEnv("worker-endpoints-differ", {
      env: { FLEET_MODEL_ENDPOINTS: JSON.stringify({ local: { provider: "openai", baseUrl: model.url } }) },
    });
    ({ client } = await fleet.startApi());
    worker = await fleet.spawnWorker({ FLEET_MODEL_ENDPOINTS: "{}" });
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    await model?.close();
  });

  it("parks the session saying this worker's settings lack it, in the run, the session and the log", async () => {
    const agent = { model: { provider: "openai" as const, endpoint: "local", model: "gpt-test" } };
    const id = (await client.createSession({ agent })).id;
    const { runId } = await client.send(id, "hello");
    await waitFor(async () => (await client.getSession(id)).status === "parked", 15_000, "session parked");
    const session = await client.getSession(id);
    expect(session.parkedReason).toBe(`invalid_agent: ${WORDS}`);
    expect(session.runs.find((run) => run.id === runId)).toMatchObject({
      status: "ended",
      endedReason: "invalid_agent",
      error: WORDS,
    });
    expect(worker.output()).toContain(JSON.stringify(WORDS).slice(1, -1));
    expect(model.stats.accepted).toEqual([]);
  }, 30_000);
});
