/**
 * A session's bound on runs waiting to start (FLEET_SESSION_MAX_QUEUED_RUNS), against the
 * real API and Postgres, with no worker, so every run sent stays queued: before it, with
 * FLEET_TENANT_MAX_ACTIVE_SESSIONS=1, one session took any number of sends (the active cap
 * counts it once) and held all their inputs. Now one more than the bound answers 429
 * `queued_runs` and stores nothing, also when the sends race each other.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_SESSION_MAX_QUEUED_RUNS, loadConfig } from "../src/shared/config.js";
import { type Answer, readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("queued runs per session (FLEET_SESSION_MAX_QUEUED_RUNS)", () => {
  let fleet: FleetEnv;
  let base: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("queued-runs", {
      env: { FLEET_SESSION_MAX_QUEUED_RUNS: "3", FLEET_TENANT_MAX_ACTIVE_SESSIONS: "1" },
    });
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => fleet?.close());

  const post = async (path: string, body: unknown): Promise<Answer & { retryAfter: string | null }> => {
    const response = await fetch(`${base}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { ...(await readAnswer(response)), retryAfter: response.headers.get("retry-after") };
  };
  const send = (id: string, content = "x".repeat(100_000)) =>
    post(`/v1/sessions/${id}/messages`, { content });
  const queued = async (id: string) => {
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from runs where session_id = ${id} and status = 'queued'`;
    return row!.n;
  };
  const endRuns = (id: string) =>
    fleet.database.sql`update runs set status = 'ended', ended_reason = 'completed', ended_at = now()
                        where session_id = ${id} and status <> 'ended'`;

  it("answers 429 `queued_runs` past the bound, stores nothing, and takes input again once a worker took a run", async () => {
    const { json } = await post("/v1/sessions", { agent: AGENT });
    const id = json.id as string;
    for (let i = 0; i < 3; i++) expect((await send(id)).status).toBe(202);
    const over = await send(id);
    expect(over.status, over.text).toBe(429);
    expect(over.retryAfter).toBe("5");
    expect(over.json).toEqual({
      error: {
        code: "too_many_requests",
        message: expect.stringContaining("at most 3 runs waiting to start"),
        limit: "queued_runs",
        retryAfter: 5,
      },
    });
    expect(await queued(id)).toBe(3);
    // A worker took one: it no longer waits, so there is room for one more, and only one.
    await fleet.database.sql`
      update runs set status = 'running' where id = (
        select id from runs where session_id = ${id} and status = 'queued' order by created_at limit 1)`;
    expect((await send(id)).status).toBe(202);
    expect((await send(id)).status).toBe(429);
    await endRuns(id);
  });

  it("holds under concurrent sends: of 8 racing sends to an idle session exactly 3 are queued", async () => {
    const { json } = await post("/v1/sessions", { agent: AGENT });
    const id = json.id as string;
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => send(id, `go ${i}`)));
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 202)).toHaveLength(3);
    expect(statuses.filter((s) => s === 429)).toHaveLength(5);
    expect(await queued(id)).toBe(3);
    // Two racing sends at the bound minus one: one is queued, the other refused.
    await fleet.database.sql`
      update runs set status = 'ended', ended_reason = 'completed', ended_at = now() where id = (
        select id from runs where session_id = ${id} and status = 'queued' order by created_at limit 1)`;
    const pair = (await Promise.all([send(id, "a"), send(id, "b")])).map((a) => a.status).sort();
    expect(pair).toEqual([202, 429]);
    expect(await queued(id)).toBe(3);
    await endRuns(id);
  });

  it("does not count a waiting resume (at most one per session): three sends still fit behind it", async () => {
    const { json } = await post("/v1/sessions", { agent: AGENT, messages: CRASH_HISTORY });
    const id = json.id as string;
    expect((await post(`/v1/sessions/${id}/resume`, {})).status).toBe(202);
    for (let i = 0; i < 3; i++) expect((await send(id, `after ${i}`)).status).toBe(202);
    expect((await send(id, "one more")).status).toBe(429);
    expect(await queued(id)).toBe(4);
    await endRuns(id);
  });

  it(`is on by default (${DEFAULT_SESSION_MAX_QUEUED_RUNS}); 0 turns it off`, () => {
    expect(loadConfig({}).tenantLimits.maxQueuedRuns).toBe(DEFAULT_SESSION_MAX_QUEUED_RUNS);
    expect(loadConfig({ FLEET_SESSION_MAX_QUEUED_RUNS: "0" }).tenantLimits.maxQueuedRuns).toBeUndefined();
  });
});
