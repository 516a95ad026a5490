import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

describe("fleet smoke", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("smoke");
  });
  afterAll(async () => fleet?.close());

  it("runs one scripted session end to end through a worker process", async () => {
    const { client } = await fleet.startApi();
    await fleet.spawnWorker();
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            { toolCalls: [{ name: "write_file", arguments: { path: "a.txt", content: "x" } }] },
            { text: "ok" },
          ],
        },
        tools: ["write_file"],
      },
    });
    const { runId } = await client.send(id, "go");
    const run = await client.waitForRun(runId, { timeoutMs: 20_000 });
    expect(run.endedReason).toBe("completed");
    const session = await client.getSession(id);
    expect(session.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
    expect(session.messages.map((m) => m.seq)).toEqual([1, 2, 3, 4]);
    expect(session.status).toBe("completed");
  });
});
