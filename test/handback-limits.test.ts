/**
 * maxTurns and budget.maxModelCalls across hand-backs (contracts §12, §15: a run handed back
 * to wait for capacity is the same run going on, its turns counted from those it made, the
 * reservation of the request it never sent given back). Two `fleet worker` processes share an
 * endpoint declared `maxConcurrent: 1` with FLEET_ENDPOINT_MAX_WAIT_MS 100, so nearly every
 * request of eight tool-looping sessions is handed back at least once, and the continued run
 * is often taken by the other process. Each session's first request ends `max_turns` after
 * exactly maxTurns (3) requests; a new message then gets exactly the 2 calls left of
 * maxModelCalls (5): the provider sees exactly 5 requests per session, however many
 * hand-backs there were.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type FakeOpenAI, type FakeResponse, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const SESSIONS = 8;

/** The session a chat request belongs to: its first user message, `s<i>`. */
// biome-ignore lint/suspicious/noExplicitAny: a JSON body
function sessionOf(body: any): string {
  const first = (body?.messages ?? []).find((m: { role?: string }) => m.role === "user");
  return typeof first?.content === "string" ? first.content : "?";
}

describe("maxTurns and maxModelCalls across hand-backs between two worker processes", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let fake: FakeOpenAI;
  const calls = new Map<string, number>();
  let n = 0;

  beforeAll(async () => {
    fake = await startFakeOpenAI([], {
      respond: (body): FakeResponse => {
        const s = sessionOf(body);
        n++;
        calls.set(s, (calls.get(s) ?? 0) + 1);
        return {
          delayMs: 300,
          toolCalls: [
            {
              id: `c${n}`,
              name: "append_file",
              arguments: JSON.stringify({ path: `${s}.txt`, line: `c${n}` }),
            },
          ],
          usage: { prompt_tokens: 30, completion_tokens: 10 },
        };
      },
    });
    fleet = await createFleetEnv("handbacklimits", {
      env: {
        FLEET_MODEL_ENDPOINTS: JSON.stringify({
          one: { provider: "openai", baseUrl: fake.url, limits: { maxConcurrent: 1 } },
        }),
        FLEET_ENDPOINT_MAX_WAIT_MS: "100",
      },
    });
    ({ client } = await fleet.startApi());
  }, 120_000);

  afterAll(async () => {
    await fleet?.close();
    await fake?.close();
  });

  it("gives each request exactly maxTurns, and the session exactly maxModelCalls, however often it waits", async () => {
    const env = { WORKER_CONCURRENCY: "4" };
    await Promise.all([fleet.spawnWorker(env), fleet.spawnWorker(env)]);
    const agent = {
      model: { provider: "openai" as const, endpoint: "one", model: "m" },
      tools: ["append_file"],
      maxTurns: 3,
      budget: { maxModelCalls: 5 },
    };
    const ids: string[] = [];
    for (let i = 0; i < SESSIONS; i++) ids.push((await client.createSession({ agent })).id);
    await Promise.all(ids.map((id, i) => client.send(id, `s${i}`)));
    const { sql } = fleet.database;
    const settled = async () => {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from sessions s where s.status = 'parked'
           and not exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')`;
      return row!.n === SESSIONS;
    };
    await waitFor(settled, 200_000, "every session parked after its first request");
    for (const id of ids) expect((await client.getSession(id)).parkedReason).toBe("max_turns");
    for (const id of ids) await client.send(id, "more");
    await waitFor(settled, 200_000, "every session parked after its second request");
    let handBacks = 0;
    for (const [i, id] of ids.entries()) {
      const session = await client.getSession(id);
      expect(calls.get(`s${i}`), session.parkedReason ?? "").toBe(5);
      expect(session.parkedReason).toBe(
        "budget_exhausted: agent.budget.maxModelCalls: all 5 model calls made",
      );
      expect(session.runs.map((r) => r.endedReason).sort()).toEqual(["budget_exhausted", "max_turns"]);
      const [row] = await sql<{ model_calls: number }[]>`select model_calls from sessions where id = ${id}`;
      expect(row!.model_calls).toBe(5);
      for (const run of session.runs) handBacks += (run.usage as { handBacks?: number }).handBacks ?? 0;
    }
    // The case is what it says: requests were handed back.
    expect(handBacks).toBeGreaterThan(0);
  }, 400_000);
});
