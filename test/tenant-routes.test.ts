/**
 * Every route that names a session, run or batch by id, called with another tenant's key:
 * the answer is exactly that of an id that does not exist, and nothing of the other tenant's
 * is read, changed or queued. Also the caller's own routes naming another tenant's run or batch.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type Answer, readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const UNKNOWN = "00000000-0000-4000-8000-000000000000";

let fleet: FleetEnv;
let base: string;
let acme: string;
let globex: string;

async function call(
  method: string,
  path: string,
  key: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const sent: Record<string, string> = { authorization: `Bearer ${key}`, ...headers };
  if (body !== undefined) sent["content-type"] = "application/json";
  const response = await fetch(`${base}${path}`, {
    method,
    headers: sent,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  return readAnswer(response);
}

beforeAll(async () => {
  fleet = await createFleetEnv("tenantroutes");
  const keys = new ApiKeys(fleet.database);
  acme = (await keys.create("acme")).key;
  globex = (await keys.create("globex")).key;
  base = (await fleet.startApi()).api.url;
}, 60_000);
afterAll(() => fleet?.close());

it("another tenant's session, run and batch ids answer as missing ones on every route", async () => {
  const session = await call("POST", "/v1/sessions", acme, { agent: AGENT });
  expect(session.status, session.text).toBe(201);
  const sid = session.json.id as string;
  const sent = await call("POST", `/v1/sessions/${sid}/messages`, acme, { content: "mine" });
  expect(sent.status, sent.text).toBe(202);
  const run = sent.json.runId as string;
  const empty = (await call("POST", "/v1/sessions", acme, { agent: AGENT })).json.id as string;
  const batch = await call("POST", "/v1/batches", acme, { sessions: [{ agent: AGENT, input: "b" }] });
  expect(batch.status, batch.text).toBe(201);
  const bid = batch.json.id as string;
  const sessionRoutes: [string, (id: string) => string, unknown?, Record<string, string>?][] = [
    ["GET", (id) => `/v1/sessions/${id}`],
    ["GET", (id) => `/v1/sessions/${id}?afterSeq=0`],
    ["GET", (id) => `/v1/sessions/${id}?limit=1`],
    ["GET", (id) => `/v1/sessions/${id}/resume-point`],
    ["HEAD", (id) => `/v1/sessions/${id}`],
    ["HEAD", (id) => `/v1/sessions/${id}/resume-point`],
    ["HEAD", (id) => `/v1/sessions/${id}/events`],
    ["GET", (id) => `/v1/sessions/${id}?runsLimit=1`],
    ["GET", (id) => `/v1/sessions/${id}/events`],
    ["GET", (id) => `/v1/sessions/${id}/events`, undefined, { "last-event-id": "0-1" }],
    ["GET", (id) => `/v1/sessions/${id}/events?after=0-1`],
    ["POST", (id) => `/v1/sessions/${id}/messages`, { content: "let me in" }],
    ["POST", (id) => `/v1/sessions/${id}/resume`, {}],
    ["POST", (id) => `/v1/sessions/${id}/cancel`],
    ["PATCH", (id) => `/v1/sessions/${id}`, { sessionEvents: false }],
    [
      "POST",
      (id) => `/v1/sessions/${id}/history`,
      { afterSeq: 0, messages: [{ role: "user", content: "x" }] },
    ],
    ["DELETE", (id) => `/v1/sessions/${id}`],
  ];
  const batchRoutes: typeof sessionRoutes = [
    ["GET", (id) => `/v1/batches/${id}`],
    ["GET", (id) => `/v1/batches/${id}?include=usage`],
    ["GET", (id) => `/v1/batches/${id}/results`],
    ["GET", (id) => `/v1/batches/${id}/results?after=${UNKNOWN}`],
    ["GET", (id) => `/v1/batches/${id}/events`],
    ["GET", (id) => `/v1/batches/${id}/events`, undefined, { "last-event-id": "0-1" }],
    ["GET", (id) => `/v1/batches/${id}/events?after=0-1`],
    ["HEAD", (id) => `/v1/batches/${id}`],
    ["HEAD", (id) => `/v1/batches/${id}/results`],
    ["HEAD", (id) => `/v1/batches/${id}/events`],
    ["POST", (id) => `/v1/batches/${id}/sessions`, { sessions: [{ agent: AGENT, input: "x" }] }],
    ["POST", (id) => `/v1/batches/${id}/resume`, {}],
    ["POST", (id) => `/v1/batches/${id}/cancel`],
    ["DELETE", (id) => `/v1/batches/${id}`],
  ];
  // The caller's own session and list, naming the other tenant's run or batch.
  const own = (await call("POST", "/v1/sessions", globex, { agent: AGENT })).json.id as string;
  const namingRoutes: typeof sessionRoutes = [
    ["GET", (id) => `/v1/sessions/${own}/events?run=${id}`],
    ["GET", (id) => `/v1/sessions?batch=${id}`],
  ];
  const cases: [string, typeof sessionRoutes][] = [
    [run, namingRoutes],
    [bid, namingRoutes],
    [sid, sessionRoutes],
    [empty, sessionRoutes],
    [bid, batchRoutes],
    [
      run,
      [
        ["GET", (id) => `/v1/runs/${id}`],
        ["HEAD", (id) => `/v1/runs/${id}`],
      ],
    ],
  ];
  const failures: string[] = [];
  for (const [theirs, routes] of cases) {
    for (const [method, path, body, headers] of routes) {
      const other = await call(method, path(theirs), globex, body, headers);
      const absent = await call(method, path(UNKNOWN), globex, body, headers);
      if (other.status !== absent.status || other.text.replaceAll(theirs, UNKNOWN) !== absent.text)
        failures.push(
          `${method} ${path("ID")}: ${other.status} ${other.text} vs ${absent.status} ${absent.text}`,
        );
    }
  }
  expect(failures).toEqual([]);
  expect(await fleet.database.sql`select 1 from runs where input in ('let me in', 'x')`).toHaveLength(0);
  const [row] = await fleet.database.sql<{ status: string }[]>`select status from sessions where id = ${sid}`;
  expect(row?.status).not.toBe("cancelled");
});
