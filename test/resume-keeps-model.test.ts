/**
 * A resume someone asked for with another model (`POST …/resume {model}`) that is interrupted
 * in turn is resumed automatically with that model, not with the agent's primary
 * (resume-semantics §4: a resume is given the model the interrupted request used). Before, the
 * sweeper went back to the primary — the model the caller had just moved away from — and a
 * session whose primary keeps failing was parked `attempts_exhausted` after one cut stream of
 * the model that worked. A later message runs on the agent's own model again.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("an automatic resume keeps the model a caller's resume named", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper;

  beforeAll(async () => {
    fleet = await createFleetEnv("resumemodel");
    client = (await fleet.startApi()).client;
    await fleet.spawnWorker();
    sweeper = await startSweeper(
      { ...loadConfig({ ...fleet.env, SWEEPER_BACKOFF_MS: "100" }), logLevel: "silent" },
      { serveMetrics: false },
    );
  });
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  it("a cut stream of the named model is retried on it, and a new message uses the primary", async () => {
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ fault: "connection" }, { text: "primary answers" }] },
      },
      messages: [{ role: "user", content: "hello" }],
    });
    const other = {
      provider: "scripted" as const,
      steps: [
        { text: "a partial answer", fault: "stream_cut" as const },
        { text: "the other model finished" },
      ],
    };
    const { runId } = await client.resume(id, { model: other });
    expect((await client.waitForRun(runId, { timeoutMs: 15_000 })).endedReason).toBe("interrupted");

    await waitFor(
      async () => ["completed", "parked"].includes((await client.getSession(id)).status),
      20_000,
      "the automatic resume",
    );
    const session = await client.getSession(id);
    expect(session.parkedReason ?? null).toBeNull();
    expect(session.status).toBe("completed");
    expect(session.messages.at(-1)).toMatchObject({ role: "assistant", content: "the other model finished" });
    const automatic = session.runs.filter((r) => r.trigger === "sweeper" || r.trigger === "worker");
    expect(automatic.map((r) => [r.resumeKind, r.endedReason])).toEqual([["retry_response", "completed"]]);
    const [stored] = await fleet.database.sql<{ model: unknown }[]>`
      select model from runs where id = ${automatic[0]!.id}`;
    expect(stored!.model).toEqual(other);
    // The API says which model each run was asked to use (runs[].model; null: the agent's own).
    expect(automatic[0]!.model).toEqual(other);
    expect((await client.getRun(runId)).model).toEqual(other);

    // A new message is a new request, on the agent's own model (two assistant messages: its
    // step 2, past the last, repeats "primary answers").
    const next = await client.send(id, "and now?");
    expect((await client.waitForRun(next.runId, { timeoutMs: 15_000 })).endedReason).toBe("completed");
    expect((await client.getSession(id)).messages.at(-1)).toMatchObject({ content: "primary answers" });
    expect((await client.getRun(next.runId)).model).toBeNull();
  }, 60_000);
});
