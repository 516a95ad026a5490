/**
 * A batch marked deleted whose sessions are not purged yet (DELETE /v1/batches/:id commits its
 * mark first; the sessions go chunk by chunk, the rest left to the sweeper when the API stops
 * or runs out of time) answers on every route exactly as an id that does not exist: the batch's
 * routes, its sessions' and their runs' routes, results, events, lists naming it. Nothing is
 * added to it, cancelled, resumed or deleted through them.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { type Answer, readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const UNKNOWN = "00000000-0000-4000-8000-000000000000";

let fleet: FleetEnv;
let base: string;

async function call(
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const sent: Record<string, string> = { ...headers };
  if (body !== undefined) sent["content-type"] = "application/json";
  // An events stream that opens for a deleted batch's session would hold: read as "held".
  const held: Answer = { status: -1, json: undefined, text: "(held open)", contentType: null };
  try {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: sent,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(5_000),
    });
    return await readAnswer(response).catch(() => ({ ...held, status: response.status }));
  } catch {
    return held;
  }
}

beforeAll(async () => {
  fleet = await createFleetEnv("batchdeletedroutes");
  base = (await fleet.startApi()).api.url;
}, 60_000);
afterAll(() => fleet?.close());

it("a batch marked deleted, its sessions and runs answer as missing ids on every route", async () => {
  const batch = await call("POST", "/v1/batches", {
    sessions: [
      { agent: AGENT, input: "queued", customId: "a" },
      { agent: AGENT, messages: [{ role: "user", content: "imported" }], customId: "b" },
    ],
  });
  expect(batch.status, batch.text).toBe(201);
  const bid = batch.json.id as string;
  const [queued, imported] = batch.json.sessions as { id: string; runId: string | null }[];
  const run = queued!.runId!;
  // The API marked it deleted and stopped before its chunks (the sweeper finishes them).
  expect(await new DataDeletion(fleet.database).markBatchDeleted("default", bid)).not.toBeNull();

  type Route = [string, (id: string) => string, unknown?, Record<string, string>?];
  const sessionRoutes: Route[] = [
    ["GET", (id) => `/v1/sessions/${id}`],
    ["GET", (id) => `/v1/sessions/${id}?afterSeq=0`],
    ["GET", (id) => `/v1/sessions/${id}?limit=1`],
    ["GET", (id) => `/v1/sessions/${id}/resume-point`],
    ["GET", (id) => `/v1/sessions/${id}/events`],
    ["GET", (id) => `/v1/sessions/${id}/events?after=0-1`],
    ["POST", (id) => `/v1/sessions/${id}/messages`, { content: "let me in" }],
    ["POST", (id) => `/v1/sessions/${id}/resume`, {}],
    ["POST", (id) => `/v1/sessions/${id}/cancel`],
    ["PATCH", (id) => `/v1/sessions/${id}`, { sessionEvents: false }],
    [
      "POST",
      (id) => `/v1/sessions/${id}/history`,
      { afterSeq: 1, messages: [{ role: "user", content: "x" }] },
    ],
  ];
  const batchRoutes: Route[] = [
    ["GET", (id) => `/v1/batches/${id}`],
    ["GET", (id) => `/v1/batches/${id}?include=usage`],
    ["GET", (id) => `/v1/batches/${id}/results`],
    ["GET", (id) => `/v1/batches/${id}/events`],
    ["POST", (id) => `/v1/batches/${id}/sessions`, { sessions: [{ agent: AGENT, input: "x" }] }],
    ["POST", (id) => `/v1/batches/${id}/resume`, {}],
    ["POST", (id) => `/v1/batches/${id}/cancel`],
    ["GET", (id) => `/v1/sessions?batch=${id}`],
  ];
  const own = (await call("POST", "/v1/sessions", { agent: AGENT })).json.id as string;
  const runRoutes: Route[] = [
    ["GET", (id) => `/v1/runs/${id}`],
    ["GET", (id) => `/v1/sessions/${own}/events?run=${id}`],
  ];
  // The deletes last: a second delete of the batch, and a delete of one of its sessions.
  const cases: [string, Route[]][] = [
    [queued!.id, sessionRoutes],
    [imported!.id, sessionRoutes],
    [bid, batchRoutes],
    [run, runRoutes],
    [queued!.id, [["DELETE", (id) => `/v1/sessions/${id}`]]],
    [bid, [["DELETE", (id) => `/v1/batches/${id}`]]],
  ];
  const failures: string[] = [];
  for (const [deleted, routes] of cases) {
    for (const [method, path, body, headers] of routes) {
      const answer = await call(method, path(deleted), body, headers);
      const absent = await call(method, path(UNKNOWN), body, headers);
      if (answer.status !== absent.status || answer.text.replaceAll(deleted, UNKNOWN) !== absent.text)
        failures.push(
          `${method} ${path("ID")}: ${answer.status} ${answer.text.slice(0, 200)} vs ${absent.status} ${absent.text}`,
        );
    }
  }
  expect(failures).toEqual([]);
  const { sql } = fleet.database;
  expect(await sql`select 1 from runs where input in ('let me in', 'x')`).toHaveLength(0);
  const rows = await sql<{ id: string; last_seq: number }[]>`
    select id, last_seq from sessions where batch_id = ${bid} order by custom_id`;
  expect(rows.map((r) => [r.id, r.last_seq])).toEqual([
    [queued!.id, 0],
    [imported!.id, 1],
  ]);
}, 120_000);
