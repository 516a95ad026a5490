/**
 * A tool that fails quoting a key of the worker's environment — the URL it called with
 * `?api_key=…`, an upstream's "invalid key sk-…" echo, a header it logged into its message — has
 * the key scrubbed from its failed result, as a hook's error and a provider's are: the result is
 * stored in the session (its tenant reads it) and sent to the model's provider at the next step.
 * Before, it was stored and sent as thrown. A successful result is kept as it is. Real API,
 * worker (in this process), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { defineTool } from "../src/worker/tools/registry.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { runCalls } from "./support/scripted-calls.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
const KEY = "srch-7f3a9c2e51d84b06a1";
const before = process.env.SEARCH_SERVICE_API_KEY;

const search = defineTool({
  name: "search",
  description: "Searches.",
  parameters: { type: "object", properties: { q: { type: "string" } } },
  async run({ q }: { q?: string }) {
    if (q === "fail")
      throw new Error(
        `GET https://search.example/v1?api_key=${process.env.SEARCH_SERVICE_API_KEY}&q=fail answered 401: key ${process.env.SEARCH_SERVICE_API_KEY} revoked (Authorization: Bearer ${process.env.SEARCH_SERVICE_API_KEY})`,
      );
    return `results for ${q}`;
  },
});

beforeAll(async () => {
  process.env.SEARCH_SERVICE_API_KEY = KEY;
  fleet = await createFleetEnv("tool-error-keys");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, tools: [search] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
  if (before === undefined) delete process.env.SEARCH_SERVICE_API_KEY;
  else process.env.SEARCH_SERVICE_API_KEY = before;
});

describe("a tool whose error quotes a key of the worker's environment", () => {
  it("has the key scrubbed from its failed result; a successful result is kept", async () => {
    const { endedReason, results } = await runCalls(client, [
      { id: "a", name: "search", arguments: { q: "fail" } },
      { id: "b", name: "search", arguments: { q: "token: abcdefgh" } },
    ]);
    expect(endedReason).toBe("completed");
    expect(results).toMatchObject([
      {
        toolCallId: "a",
        success: false,
        content:
          "GET https://search.example/v1?api_key=[redacted]&q=fail answered 401: key [redacted] revoked (Authorization: Bearer [redacted])",
      },
      { toolCallId: "b", success: true, content: "results for token: abcdefgh" },
    ]);
  }, 60_000);
});
