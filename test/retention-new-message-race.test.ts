/**
 * Retention (FLEET_RETENTION_DAYS) meets a new message: a session retention is about to
 * delete is sent a message. Either the send wins (its run is queued, the session is kept:
 * retention deletes no session with a run queued) or retention wins (the send is a 404); never
 * a send answered with a queued run whose session retention then deletes.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { DataDeletion } from "../src/shared/store/data-deletion.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };
const COMPLETED: Message[] = [
  { role: "user", content: "hi" },
  { role: "assistant", content: "hello", stopReason: "end_turn" },
];
const DAY_MS = 86_400_000;

describe("retention against a new message", () => {
  let fleet: FleetEnv;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("retentionrace");
    ({ client } = await fleet.startApi());
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("never deletes a session whose new message was queued while its chunk ran", async () => {
    const { sql } = fleet.database;
    const store = new DataDeletion(fleet.database);
    const queries = new SessionQueries(fleet.database);
    // Sessions retention reads first (older) but keeps (each has a run queued): they make the
    // chunk's statement read for a while before it reaches the idle session it deletes.
    const { id: template } = await client.createSession({ agent: AGENT, messages: COMPLETED });
    const columns = (
      await sql<{ name: string }[]>`
        select column_name as name from information_schema.columns
         where table_name = 'sessions' and table_schema = current_schema() and is_generated = 'NEVER'
           and column_name not in ('id', 'updated_at')`
    ).map((c) => `"${c.name}"`);
    await sql.unsafe(
      `insert into sessions (id, updated_at, ${columns.join(", ")})
       select 'filler-' || g, now() - interval '20 days', ${columns.map((c) => `s.${c}`).join(", ")}
         from sessions s, generate_series(1, 40000) g where s.id = $1`,
      [template],
    );
    await sql`
      insert into runs (id, session_id, tenant, kind, trigger, job_id)
      select gen_random_uuid()::text, id, tenant, 'run', 'api', 'j-' || id from sessions where id like 'filler-%'`;
    await sql`delete from sessions where id = ${template}`;
    await sql`analyze sessions`;
    await sql`analyze runs`;

    const outcomes: string[] = [];
    // Five races in which the send is queued while the chunk reads. On a loaded machine a
    // chunk may end before the poll below sees it reading: that try proves nothing and is
    // made again (at most 20 tries in all), rather than failing the test.
    for (let raced = 0, tries = 0; raced < 5; tries++) {
      expect(tries, `the chunk was seen reading in ${raced} of ${tries} tries`).toBeLessThan(20);
      const { id } = await client.createSession({ agent: AGENT, messages: COMPLETED });
      await sql`update sessions set updated_at = now() - interval '10 days' where id = ${id}`;
      let settled = false;
      const chunk = store.expireSessions(DAY_MS, 10).finally(() => {
        settled = true;
      });
      // The chunk's statement has begun (its snapshot taken) before the send is queued.
      while (!settled) {
        const active = await sql`
          select 1 from pg_stat_activity where state = 'active' and query like '%order by s.updated_at, s.id%'
             and query not like '%pg_stat_activity%'`;
        if (active.length > 0) break;
      }
      if (settled) {
        await chunk;
        await sql`delete from sessions where id = ${id}`;
        continue;
      }
      raced++;
      const sent = await queries
        .createRun({ sessionId: id, kind: "run", trigger: "api", input: "one more thing" }, { unpark: true })
        .then(
          () => "queued",
          (e: Error) => e.name,
        );
      const deleted = (await chunk).sessionIds.includes(id);
      const [kept] = await sql`select 1 from sessions where id = ${id}`;
      outcomes.push(`${sent} ${deleted ? "deleted" : "kept"}`);
      // A send answered with its run queued keeps its session (with its message to run).
      if (sent === "queued") expect(kept, outcomes.join(", ")).toBeDefined();
      await sql`delete from sessions where id = ${id}`;
    }
  }, 120_000);
});
