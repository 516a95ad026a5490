/**
 * The operator's session list (SessionQueries.listSessions) against a real Postgres: every
 * state filter counts a session by its current state, tenants never see each other's, a
 * parked reason matches by its code and its wildcards are literal, keyset pages cover the
 * list exactly once, and the parked page keeps its partial index once Postgres has cached a
 * generic plan for the prepared statement.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { openDatabase } from "../src/shared/db/client.js";
import { type ListStatus, SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });

let fleet: FleetEnv;
let queries: SessionQueries;
/** Session id by the state it was put in. */
const ids: Record<string, string> = {};

/** A session of `tenant`, put straight into a state (rows as the fleet writes them). */
async function sessionIn(
  name: string,
  state: { status?: string; tail?: string; started?: boolean; runs?: string[]; reason?: string },
  tenant = "acme",
): Promise<string> {
  const { id } = await queries.createSession({ agent: AGENT, tenant, metadata: { name } });
  const { sql } = fleet.database;
  await sql`
    update sessions set status = ${state.status ?? "active"}, tail_state = ${state.tail ?? "empty"},
                        run_started = ${state.started ?? false}, parked_reason = ${state.reason ?? null},
                        updated_at = clock_timestamp()
     where id = ${id}`;
  for (const status of state.runs ?? []) {
    await sql`
      insert into runs (id, session_id, tenant, kind, trigger, status, input)
      values (${`${id}-${status}`}, ${id}, ${tenant}, 'run', 'api', ${status}, 'go')`;
  }
  ids[name] = id;
  return id;
}

const names = (rows: { id: string }[]) =>
  rows.map((row) => Object.entries(ids).find(([, id]) => id === row.id)?.[0] ?? row.id).sort();

beforeAll(async () => {
  fleet = await createFleetEnv("sessionlist");
  queries = new SessionQueries(fleet.database);
  await sessionIn("queued", { runs: ["queued"] });
  await sessionIn("running", { tail: "awaiting_model", started: true, runs: ["running"] });
  await sessionIn("interrupted", { tail: "awaiting_tool", started: true, runs: ["ended"] });
  await sessionIn("completed", { tail: "completed", started: true, runs: ["ended"] });
  await sessionIn("never-run", {});
  await sessionIn("parked-turns", {
    status: "parked",
    tail: "completed",
    started: true,
    reason: "max_turns",
  });
  await sessionIn("parked-attempts", {
    status: "parked",
    tail: "awaiting_model",
    started: true,
    reason: "attempts_exhausted: 3 automatic resumes",
  });
  await sessionIn("parked-wild", { status: "parked", started: true, reason: "max%_x" });
  await sessionIn("cancelled", { status: "cancelled", tail: "completed", started: true });
  await sessionIn("other-tenant-parked", { status: "parked", reason: "max_turns" }, "umbrella");
}, 60_000);

afterAll(async () => {
  await fleet?.close();
});

describe("the session list", () => {
  it("counts each session by its current state, within its tenant", async () => {
    const expected: Record<ListStatus, string[]> = {
      queued: ["queued"],
      running: ["interrupted", "running"],
      completed: ["completed", "never-run"],
      parked: ["parked-attempts", "parked-turns", "parked-wild"],
      cancelled: ["cancelled"],
      active: ["completed", "interrupted", "never-run", "queued", "running"],
    };
    for (const [status, want] of Object.entries(expected)) {
      const rows = await queries.listSessions({ tenant: "acme", status: status as ListStatus, limit: 100 });
      expect(names(rows), status).toEqual(want);
    }
    expect(names(await queries.listSessions({ tenant: "acme", limit: 100 }))).toHaveLength(9);
    expect(names(await queries.listSessions({ tenant: "umbrella", status: "parked", limit: 100 }))).toEqual([
      "other-tenant-parked",
    ]);
    // No tenant (the operator's CLI): everyone's.
    expect(await queries.listSessions({ status: "parked", limit: 100 })).toHaveLength(4);
    // `parked` (the older flag) still works; `status` wins over it.
    expect(names(await queries.listSessions({ tenant: "acme", parked: true, limit: 100 }))).toEqual(
      expected.parked,
    );
    expect(
      names(await queries.listSessions({ tenant: "acme", parked: true, status: "cancelled", limit: 100 })),
    ).toEqual(["cancelled"]);
  });

  it("answers what a list entry shows, newest activity first", async () => {
    const rows = await queries.listSessions({ tenant: "acme", status: "parked", limit: 100 });
    expect(rows.map((row) => row.id)).toEqual([
      ids["parked-wild"],
      ids["parked-attempts"],
      ids["parked-turns"],
    ]);
    const [newest] = rows;
    expect(newest).toEqual({
      id: ids["parked-wild"],
      batchId: null,
      customId: null,
      status: "parked",
      tailState: "empty",
      parkedReason: "max%_x",
      metadata: { name: "parked-wild" },
      updatedAt: expect.any(Date),
      cursor: { micros: expect.stringMatching(/^\d+$/), id: ids["parked-wild"] },
      runState: null,
    });
    expect(Math.floor(Number(newest!.cursor.micros) / 1000)).toBe(newest!.updatedAt.getTime());
  });

  it("says which run each session has unfinished, for its public status", async () => {
    const rows = await queries.listSessions({ tenant: "acme", limit: 100 });
    const byName = Object.fromEntries(rows.map((row) => [names([row])[0], row.runState]));
    expect(byName).toEqual({
      queued: "queued",
      running: "running",
      interrupted: null,
      completed: null,
      "never-run": null,
      "parked-turns": null,
      "parked-attempts": null,
      "parked-wild": null,
      cancelled: null,
    });
  });

  it("matches a parked reason by its code, with LIKE's wildcards taken literally", async () => {
    const by = async (parkedReason: string) =>
      names(await queries.listSessions({ tenant: "acme", parkedReason, limit: 100 }));
    expect(await by("max_turns")).toEqual(["parked-turns"]);
    expect(await by("attempts_exhausted")).toEqual(["parked-attempts"]);
    expect(await by("attempts")).toEqual([]);
    expect(await by("max%")).toEqual([]);
    expect(await by("max%_x")).toEqual(["parked-wild"]);
    expect(await by("max__urns")).toEqual([]);
  });

  it("pages by cursor through the whole list exactly once", async () => {
    const seen: string[] = [];
    let before: { micros: string; id: string } | undefined;
    for (let page = 0; page < 10; page++) {
      const rows = await queries.listSessions({ tenant: "acme", limit: 2, before });
      seen.push(...rows.map((row) => row.id));
      if (rows.length < 2) break;
      before = rows.at(-1)!.cursor;
    }
    const all = await queries.listSessions({ tenant: "acme", limit: 100 });
    expect(seen).toEqual(all.map((row) => row.id));
    expect(new Set(seen).size).toBe(9);
  });

  it("keeps the parked page on its partial index under a cached generic plan", async () => {
    // postgres.js prepares the statement; after five runs Postgres may keep a generic plan,
    // which can use a partial index only when the state is in the SQL text, not a parameter.
    // One connection, so the statement read back is the one listSessions prepared. Its
    // parameters: the tenant, the limit, the page's byte budget.
    const own = openDatabase(fleet.database.url, { max: 1 });
    try {
      await new SessionQueries(own).listSessions({ tenant: "acme", status: "parked", limit: 50 });
      const [prepared] = await own.sql<{ statement: string }[]>`
        select statement from pg_prepared_statements
         where statement like '%from sessions s%' and statement like '%limit $%'
           and statement not like '%pg_prepared_statements%'`;
      expect(prepared?.statement).toContain("s.status = 'parked'");
      await own.sql.unsafe(`prepare parked_page as ${prepared!.statement}`);
      await own.sql`set plan_cache_mode = force_generic_plan`;
      await own.sql`set enable_seqscan = off`;
      const plan = (
        await own.sql.unsafe<{ "QUERY PLAN": string }[]>("explain execute parked_page('acme', 50, 4194304)")
      )
        .map((line) => line["QUERY PLAN"])
        .join("\n");
      expect(plan).toContain("sessions_tenant_parked_idx");
    } finally {
      await own.close();
    }
  });
});
