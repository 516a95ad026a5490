/**
 * A resume's `model` against the session's `agent.budget.maxCostUsd` (contracts §12): a model
 * with no price in FLEET_PRICES could not be bounded, so — as at creation — it is refused with
 * a 400 naming it, and nothing is queued (it used to be accepted, and the session was then
 * parked `budget_exhausted` by the worker, with no budget spent).
 */
import { describe, expect, it } from "vitest";
import { keyedApiForFile } from "./support/answer.js";

const SCRIPTED = { provider: "scripted" as const, steps: [{ text: "ok" }] };
const PRICED = { provider: "openai" as const, model: "gpt-priced", baseUrl: "http://127.0.0.1:9/v1" };
const UNPRICED = { provider: "openai" as const, model: "gpt-unpriced", baseUrl: "http://127.0.0.1:9/v1" };
const HISTORY = [{ role: "user", content: "hi" }];

describe("a resume's model and the session's cost budget", () => {
  const api = keyedApiForFile("resumeprice", {
    FLEET_ALLOWED_BASE_URLS: "http://127.0.0.1",
    FLEET_PRICES: JSON.stringify({ "openai:gpt-priced": { input: 1, output: 1 } }),
  });
  const { post, runsOf } = api;

  it("POST /v1/sessions/:id/resume refuses an unpriced model for a session with maxCostUsd, as creation does", async () => {
    const agent = { model: SCRIPTED, budget: { maxCostUsd: 1 } };
    // Creation refuses the unpriced model itself.
    const create = await post("/v1/sessions", { agent: { ...agent, model: UNPRICED } });
    expect(create.status, create.text).toBe(400);
    const created = await post("/v1/sessions", { agent, messages: HISTORY });
    expect(created.status, created.text).toBe(201);
    const id = created.json.id as string;
    const refused = await post(`/v1/sessions/${id}/resume`, { model: UNPRICED });
    expect(refused.status, refused.text).toBe(400);
    expect(refused.json.error).toMatchObject({ code: "invalid_request", field: "model.model" });
    expect(refused.json.error.message).toContain("gpt-unpriced");
    expect(await runsOf(id)).toBe(0);
    // A priced model is taken.
    const resumed = await post(`/v1/sessions/${id}/resume`, { model: PRICED });
    expect(resumed.status, resumed.text).toBe(202);
    expect(await runsOf(id)).toBe(1);
  });

  it("without maxCostUsd any routable model is taken", async () => {
    const created = await post("/v1/sessions", { agent: { model: SCRIPTED }, messages: HISTORY });
    const resumed = await post(`/v1/sessions/${created.json.id}/resume`, { model: UNPRICED });
    expect(resumed.status, resumed.text).toBe(202);
  });

  it("POST /v1/batches/:id/resume refuses it too, resuming nothing", async () => {
    const batch = await post("/v1/batches", {
      sessions: [{ agent: { model: SCRIPTED, budget: { maxCostUsd: 1 } }, messages: HISTORY }],
    });
    expect(batch.status, batch.text).toBe(201);
    const id = batch.json.sessions[0].id as string;
    await api.fleet.database
      .sql`update sessions set status = 'parked', parked_reason = 'attempts_exhausted' where id = ${id}`;
    const refused = await post(`/v1/batches/${batch.json.id}/resume`, { model: UNPRICED });
    expect(refused.status, refused.text).toBe(400);
    expect(refused.json.error).toMatchObject({ field: "model.model" });
    expect(await runsOf(id)).toBe(0);
  });

  it("a batch page resumes the sessions before one whose budget needs the price, then the next page is the 400", async () => {
    const batch = await post("/v1/batches", {
      sessions: [
        { agent: { model: SCRIPTED }, messages: HISTORY, customId: "free" },
        { agent: { model: SCRIPTED, budget: { maxCostUsd: 1 } }, messages: HISTORY, customId: "budget" },
      ],
    });
    expect(batch.status, batch.text).toBe(201);
    const [free, budget] = batch.json.sessions.map((s: { id: string }) => s.id) as [string, string];
    // The list's order is newest activity first: the session without a budget comes first.
    await api.fleet.database.sql`update sessions set status = 'parked', parked_reason = 'attempts_exhausted',
      updated_at = now() - (case when id = ${free} then interval '1 minute' else interval '2 minutes' end)
      where id in (${free}, ${budget})`;
    const first = await post(`/v1/batches/${batch.json.id}/resume`, { model: UNPRICED });
    expect(first.status, first.text).toBe(202);
    expect(first.json.resumed.map((r: { sessionId: string }) => r.sessionId)).toEqual([free]);
    expect(first.json.nextCursor).toEqual(expect.any(String));
    const next = await post(`/v1/batches/${batch.json.id}/resume`, {
      model: UNPRICED,
      cursor: first.json.nextCursor,
    });
    expect(next.status, next.text).toBe(400);
    expect(next.json.error).toMatchObject({ field: "model.model" });
    expect(await runsOf(free)).toBe(1);
    expect(await runsOf(budget)).toBe(0);
  });
});
