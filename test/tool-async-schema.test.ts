/**
 * A tool whose zod `schema` checks asynchronously — `.refine(async …)` (an address looked up, a
 * row that must exist), an async `.transform` — is validated as zod does it (`safeParseAsync`):
 * arguments it accepts run the tool, ones it refuses are answered with its message. Before, the
 * worker parsed synchronously and zod threw "Encountered Promise during synchronous parse. Use
 * .parseAsync() instead.": every call of such a tool was answered `Invalid arguments: …` with
 * that text and the tool never ran. Real API, worker (in this process), Postgres and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { notifyTool } from "./support/notify-tool.js";
import { runCalls } from "./support/scripted-calls.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
const sent: string[] = [];

const notify = notifyTool(() => new Promise((resolve) => setTimeout(resolve, 5)), sent);

beforeAll(async () => {
  fleet = await createFleetEnv("tool-async-schema");
  ({ client } = await fleet.startApi());
  worker = await startWorker(
    { ...fleet.config, logLevel: "silent" },
    { serveMetrics: false, tools: [notify] },
  );
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

describe("a tool whose schema checks asynchronously", () => {
  it("runs for arguments it accepts, and answers its refusal for the others", async () => {
    const { endedReason, results } = await runCalls(client, [
      { id: "good", name: "notify", arguments: { to: "ops@example.com" } },
      { id: "bad", name: "notify", arguments: { to: "ops" } },
    ]);
    expect(endedReason).toBe("completed");
    expect(results).toMatchObject([
      { toolCallId: "good", success: true, content: "notified ops@example.com" },
      { toolCallId: "bad", success: false, content: "Invalid arguments: to: not a known address" },
    ]);
    expect(sent).toEqual(["ops@example.com"]);
  }, 60_000);
});
