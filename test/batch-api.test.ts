/** Batches (all or nothing, one request) and the operator's session list. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { FleetApiError } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const agent = (text: string) => ({ model: { provider: "scripted" as const, steps: [{ text }] } });

describe("POST /v1/batches and GET /v1/sessions", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  beforeAll(async () => {
    fleet = await createFleetEnv("batch");
    ({ client } = await fleet.startApi());
    await fleet.spawnWorker();
  });
  afterAll(async () => fleet?.close());

  it("creates every session of a batch, runs those with input, and lists them", async () => {
    const { sessions } = await client.createBatch([
      { agent: agent("one"), input: "go 1", metadata: { n: 1 } },
      { agent: agent("two"), input: "go 2", metadata: { n: 2 } },
      { agent: agent("three"), metadata: { n: 3 } },
    ]);
    expect(sessions).toHaveLength(3);
    expect(sessions[2]!.runId).toBeNull();
    for (const [i, s] of sessions.slice(0, 2).entries()) {
      const run = await client.waitForRun(s.runId!, { timeoutMs: 15_000 });
      expect(run.endedReason).toBe("completed");
      const session = await client.getSession(s.id);
      expect(session.messages.map((m) => m.content)).toEqual([`go ${i + 1}`, i === 0 ? "one" : "two"]);
    }
    const listed = await client.listSessions({ status: "active", limit: 10 });
    expect(listed.sessions.map((s) => s.id).sort()).toEqual(sessions.map((s) => s.id).sort());
    expect(listed.sessions.find((s) => s.id === sessions[2]!.id)).toMatchObject({
      status: "empty",
      tailState: "empty",
      parked: false,
    });
    // The status a session read gives (running, queued, interrupted… from its runs too).
    for (const s of listed.sessions) expect(s.status).toBe((await client.getSession(s.id)).status);
    expect(listed.sessions.filter((s) => s.status === "completed")).toHaveLength(2);
    expect((await client.listSessions({ status: "parked" })).sessions).toEqual([]);
  });

  it("refuses the whole batch when one entry is invalid, naming it, and stores nothing", async () => {
    const before = (await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`)[0]!.n;
    const error = await client
      .createBatch([
        { agent: agent("fine"), input: "go" },
        { agent: { model: { provider: "nope" } } as never, input: "go" },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FleetApiError);
    expect((error as FleetApiError).status).toBe(400);
    expect((error as FleetApiError).field).toBe("sessions[1].agent.model.provider");
    const after = (await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`)[0]!.n;
    expect(after).toBe(before);
    const empty = await client.createBatch([]).catch((e: unknown) => e);
    expect((empty as FleetApiError).status).toBe(400);
  });

  it("lists parked sessions for an operator", async () => {
    const { sessions } = await client.createBatch([
      {
        agent: agent("x"),
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "no", stopReason: "refusal" },
        ],
      },
    ]);
    await fleet.database
      .sql`update sessions set status = 'parked', parked_reason = 'refused' where id = ${sessions[0]!.id}`;
    await waitFor(
      async () => (await client.listSessions({ status: "parked" })).sessions.length === 1,
      5_000,
      "list",
    );
    const [parked] = (await client.listSessions({ status: "parked" })).sessions;
    expect(parked).toMatchObject({
      id: sessions[0]!.id,
      status: "parked",
      parked: true,
      parkedReason: "refused",
      tailState: "refused",
    });
    const bad = await fetch(`${(client as unknown as { baseUrl: string }).baseUrl}/v1/sessions?status=weird`);
    expect(bad.status).toBe(400);
  });
});
