/**
 * A rolling deploy: a newer API stores an agent with a field this release does not know, and
 * a worker of this release claims its run. Before, the worker's strict parse failed and the
 * session was parked `invalid_agent` at once, for good: a failure our own deploy caused. Now
 * a worker that cannot read an agent only because of what a newer release may write (an
 * unknown field, an unknown provider or enum value) hands the run back unended, delayed, for
 * a newer worker to take, says so in one line, and parks the session only once no worker of
 * the fleet could read it for FLEET_NEWER_AGENT_WAIT_MS, naming the field. A genuinely invalid
 * agent still parks at once. A real worker process; the agents written straight into Postgres.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { QUEUES, RunQueues } from "../src/shared/queues.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: WorkerProcess;
/** The bound in the worker's environment: 6 s, so its hand-backs come back after 1 s each. */
const WAIT_MS = 6_000;

beforeAll(async () => {
  fleet = await createFleetEnv("newer-agent");
  ({ client } = await fleet.startApi());
  worker = await fleet.spawnWorker({ FLEET_NEWER_AGENT_WAIT_MS: String(WAIT_MS) });
}, 90_000);
afterAll(async () => {
  await fleet?.close();
});

const SCRIPTED = { provider: "scripted" as const, steps: [{ text: "done" }] };

/** A session whose stored agent is `agent` (written into its row), its message sent: returns the run. */
async function sessionWithStoredAgent(agent: unknown): Promise<{ id: string; runId: string }> {
  const { id } = await client.createSession({ agent: { model: SCRIPTED } });
  await fleet.database.sql`update sessions set agent = ${JSON.stringify(agent)}::jsonb where id = ${id}`;
  const { runId } = await client.send(id, "hi");
  return { id, runId };
}

type Row = { status: string; parked_reason: string | null };
async function session(id: string): Promise<Row> {
  const [row] = await fleet.database.sql<Row[]>`select status, parked_reason from sessions where id = ${id}`;
  return row!;
}

function handBackLines(runId: string): string[] {
  return worker
    .output()
    .split("\n")
    .filter((line) => line.includes(runId) && line.includes("run handed back for a newer worker"));
}

describe("an agent a newer release wrote, claimed by a worker of this release", () => {
  it("is handed back, not parked, and a worker that reads it runs the same run to its end", async () => {
    const { id, runId } = await sessionWithStoredAgent({ model: SCRIPTED, newSetting: { on: true } });
    await waitFor(() => handBackLines(runId).length >= 1, 30_000, "the worker to hand the run back");
    const line = handBackLines(runId)[0]!;
    expect(line).toContain('"detail":"agent.newSetting: unknown field"');
    expect(line).toMatch(/"level":40/);
    expect(await session(id)).toEqual({ status: "active", parked_reason: null });
    // A newer worker reads it: here, the field is gone from the row, as if understood.
    await fleet.database.sql`update sessions set agent = agent - 'newSetting' where id = ${id}`;
    expect(await client.waitForRun(runId, { timeoutMs: 30_000 })).toMatchObject({
      endedReason: "completed",
    });
    const runs = await fleet.database.sql<{ id: string; ended_reason: string }[]>`
      select id, ended_reason from runs where session_id = ${id}`;
    expect(runs).toEqual([{ id: runId, ended_reason: "completed" }]);
    const { messages } = await client.getSession(id);
    expect(messages.map((m) => [m.role, m.content])).toEqual([
      ["user", "hi"],
      ["assistant", "done"],
    ]);
  }, 60_000);

  it("parks the session only after the bound, naming the field, with a bounded number of hand-backs", async () => {
    const { id, runId } = await sessionWithStoredAgent({ model: { provider: "gemini", model: "g-2" } });
    await waitFor(async () => (await session(id)).status === "parked", 40_000, "the session to be parked");
    const row = await session(id);
    expect(row.parked_reason).toMatch(/^invalid_agent: agent\.model\.provider: must be one of "scripted"/);
    expect(row.parked_reason).toContain("no worker of this fleet could read this agent");
    const [run] = await fleet.database.sql<{ ended_reason: string; usage: { handBacks?: number } }[]>`
      select ended_reason, usage from runs where id = ${runId}`;
    expect(run!.ended_reason).toBe("invalid_agent");
    // One hand-back a second at most over the 6 s bound: not a loop.
    expect(run!.usage.handBacks).toBeGreaterThanOrEqual(2);
    expect(run!.usage.handBacks).toBeLessThanOrEqual(WAIT_MS / 1000 + 1);
    expect(handBackLines(runId).length).toBe(run!.usage.handBacks);
    const { messages } = await client.getSession(id);
    expect(messages.map((m) => m.role)).toEqual(["user"]);
  }, 60_000);

  it("a resume's model a newer release wrote is handed back too, and parked after the bound naming it", async () => {
    // A session a run left at its user message, and a resume asked for on a provider this
    // release does not know (a newer API accepted it), queued as the API queues one.
    const { id } = await client.createSession({
      agent: { model: SCRIPTED },
      messages: [{ role: "user", content: "go" }],
    });
    const runId = randomUUID();
    const jobId = QUEUES.resumes.jobId({ sessionId: id, runId });
    await fleet.database.sql`
      insert into runs (id, session_id, tenant, kind, trigger, model, job_id)
      values (${runId}, ${id}, (select tenant from sessions where id = ${id}), 'resume', 'api',
              ${JSON.stringify({ provider: "gemini", model: "g-2" })}::jsonb, ${jobId})`;
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    try {
      await queues.resumes.add("resume", { sessionId: id, runId }, { jobId });
    } finally {
      await queues.close();
    }
    await waitFor(() => handBackLines(runId).length >= 1, 30_000, "the worker to hand the resume back");
    expect(handBackLines(runId)[0]).toContain("run.model.provider");
    await waitFor(async () => (await session(id)).status === "parked", 40_000, "the session to be parked");
    expect((await session(id)).parked_reason).toMatch(
      /^invalid_agent: run\.model\.provider: must be one of .*no worker of this fleet could read this agent/,
    );
  }, 60_000);

  it("a genuinely invalid agent still parks at once", async () => {
    const { id, runId } = await sessionWithStoredAgent({ model: SCRIPTED, maxTurns: "many" });
    await waitFor(async () => (await session(id)).status === "parked", 30_000, "the session to be parked");
    expect((await session(id)).parked_reason).toMatch(/^invalid_agent: agent\.maxTurns: expected number/);
    expect(handBackLines(runId)).toEqual([]);
    const [run] = await fleet.database.sql<{ usage: { handBacks?: number } | null }[]>`
      select usage from runs where id = ${runId}`;
    expect(run!.usage?.handBacks).toBeUndefined();
  }, 40_000);
});
