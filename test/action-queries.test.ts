/**
 * The `/v1` routes that document no query parameter read none: a parameter sent to one
 * (`?dryRun=1`, `?force`, `?model=…`, `?close=true`) is a 400 naming it, and nothing is done, as
 * a DELETE's is (request-checks.ts `checkRouteQuery`). Ignored, `POST /v1/sessions/:id/cancel?dryRun=1`
 * cancelled and `POST /v1/sessions?dryRun=1` created. The routes that document a query keep it.
 * A refused request holds no Idempotency-Key: the same key without the query acts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type Answer, readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("query parameters on the routes that act", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;

  beforeAll(async () => {
    // Per-tenant webhook secrets on, so that a secret's rotation is served.
    fleet = await createFleetEnv("actionqueries", {
      env: { FLEET_WEBHOOK_SECRET: "an operator's secret", FLEET_WEBHOOK_SECRET_PER_TENANT: "1" },
    });
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
  });
  afterAll(async () => fleet?.close());

  function call(method: string, path: string, body?: unknown, key?: string): Promise<Answer> {
    const headers: Record<string, string> = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (key !== undefined) headers["idempotency-key"] = key;
    return fetch(`${base}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    }).then(readAnswer);
  }

  function expectRefused(answer: Answer, field: string, what: string): void {
    expect(answer.status, `${what}: ${answer.text}`).toBe(400);
    expect(answer.json.error).toMatchObject({ code: "invalid_request", field });
    expect(answer.json.error.message).toMatch(/takes no query parameters/);
  }

  async function runsOf(id: string): Promise<number> {
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from runs where session_id = ${id}`;
    return row?.n ?? 0;
  }

  it("a session's cancel and resume refuse a query and do nothing; the same Idempotency-Key then acts", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    await client.send(id, "go");
    const cancel = `/v1/sessions/${id}/cancel`;
    for (const query of ["?dryRun=1", "?dryRun=true&force", "?force"]) {
      // Before, the query was ignored: 202, the session cancelled.
      const answer = await call("POST", `${cancel}${query}`, undefined, "cancel-1");
      expectRefused(answer, query.slice(1).split("=")[0]!, `POST cancel${query}`);
    }
    expect((await client.getSession(id)).status).toBe("queued");
    const runs = await runsOf(id);
    expectRefused(await call("POST", `/v1/sessions/${id}/resume?model=gpt-5`, {}), "model", "resume?model");
    expect(await runsOf(id)).toBe(runs);
    // No parameter (an empty query too) is the request as before, and the key was not taken.
    const done = await call("POST", `${cancel}?`, undefined, "cancel-1");
    expect(done.status, done.text).toBe(202);
    expect(done.json).toMatchObject({ id, status: "cancelled", cancelled: true });
    expect((await client.getSession(id)).status).toBe("cancelled");
  });

  it("a batch's cancel and resume refuse a query and do nothing", async () => {
    const batch = await client.createBatch([{ agent: AGENT, input: "go" }]);
    expectRefused(await call("POST", `/v1/batches/${batch.id}/cancel?dryRun=1`), "dryRun", "batch cancel");
    expect((await client.getBatch(batch.id)).status).toBe("running");
    expectRefused(await call("POST", `/v1/batches/${batch.id}/resume?all=1`, {}), "all", "batch resume");
    const cancelled = await call("POST", `/v1/batches/${batch.id}/cancel`);
    expect(cancelled.status, cancelled.text).toBe(202);
    expect((await client.getBatch(batch.id)).status).toBe("cancelled");
  });

  it("a webhook secret's rotation refuses a query and rotates nothing", async () => {
    const before = await call("GET", "/v1/webhook-secret");
    expect(before.status, before.text).toBe(200);
    expectRefused(await call("POST", "/v1/webhook-secret/rotate?dryRun=1"), "dryRun", "rotate");
    expect((await call("GET", "/v1/webhook-secret")).json).toEqual(before.json);
    const rotated = await call("POST", "/v1/webhook-secret/rotate");
    expect(rotated.status, rotated.text).toBe(200);
    expect((await call("GET", "/v1/webhook-secret")).json).not.toEqual(before.json);
  });

  it("a session's PATCH refuses a query and changes nothing", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    expectRefused(
      await call("PATCH", `/v1/sessions/${id}?dryRun=1`, { sessionEvents: false }),
      "dryRun",
      "PATCH",
    );
    expect((await client.getSession(id)).sessionEvents).toBeUndefined();
    const patched = await call("PATCH", `/v1/sessions/${id}`, { sessionEvents: false });
    expect(patched.status, patched.text).toBe(200);
    expect((await client.getSession(id)).sessionEvents).toBe(false);
  });

  it("the POSTs that create refuse a query and create nothing; the same Idempotency-Key then acts", async () => {
    async function count(table: "sessions" | "batches" | "messages"): Promise<number> {
      const [row] = await fleet.database.sql<
        { n: number }[]
      >`select count(*)::int as n from ${fleet.database.sql(table)}`;
      return row?.n ?? 0;
    }
    const sessions = await count("sessions");
    const batches = await count("batches");
    // Before, each query was ignored: 201, the session or batch created as if it were absent.
    expectRefused(
      await call("POST", "/v1/sessions?dryRun=1", { agent: AGENT }, "create-1"),
      "dryRun",
      "create",
    );
    expectRefused(
      await call("POST", "/v1/batches?wait=true", { sessions: [{ agent: AGENT, input: "go" }] }),
      "wait",
      "batch",
    );
    expect([await count("sessions"), await count("batches")]).toEqual([sessions, batches]);
    const batch = await client.createBatch([{ agent: AGENT, input: "go" }]);
    expectRefused(
      await call("POST", `/v1/batches/${batch.id}/sessions?close=true`, {
        sessions: [{ agent: AGENT, input: "go" }],
      }),
      "close",
      "append",
    );
    expect((await client.getBatch(batch.id)).counts.total).toBe(1);
    const { id } = await client.createSession({ agent: AGENT });
    const messages = await count("messages");
    const history = { afterSeq: 0, messages: [{ role: "user", content: "imported" }] };
    expectRefused(await call("POST", `/v1/sessions/${id}/history?replace=1`, history), "replace", "history");
    expectRefused(
      await call("POST", `/v1/sessions/${id}/messages?wait=1`, { content: "go" }),
      "wait",
      "message",
    );
    expect([await count("messages"), await runsOf(id)]).toEqual([messages, 0]);
    // No parameter is the request as before, and the refused request took no key.
    const created = await call("POST", "/v1/sessions", { agent: AGENT }, "create-1");
    expect(created.status, created.text).toBe(201);
  });

  it("the GETs that document no query refuse one; the documented ones still work", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const { runId } = await client.send(id, "go");
    expectRefused(await call("GET", `/v1/sessions/${id}/resume-point?fresh=1`), "fresh", "resume point");
    expectRefused(await call("GET", `/v1/runs/${runId}?wait=1`), "wait", "run");
    expectRefused(await call("GET", "/v1/webhook-secret?tenant=b"), "tenant", "secret");
    expectRefused(await call("GET", "/v1/openapi.json?format=yaml"), "format", "openapi");
    const batch = await client.createBatch([{ agent: AGENT, input: "go" }]);
    for (const path of [
      `/v1/sessions?status=queued&limit=1`,
      `/v1/sessions/${id}?limit=1&runsLimit=1`,
      `/v1/batches/${batch.id}?include=usage`,
      `/v1/batches/${batch.id}/results?after=${batch.sessions[0]!.id}`,
      `/v1/sessions/${id}/resume-point?`,
    ]) {
      const answer = await call("GET", path);
      expect(answer.status, `${path}: ${answer.text}`).toBe(200);
    }
    // An event stream's `after`: its 400 is about the id, not about the parameter.
    const after = await call("GET", `/v1/sessions/${id}/events?after=nope`);
    expect([after.status, after.json.error.field]).toEqual([400, "after"]);
  });
});
