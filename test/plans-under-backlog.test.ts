/**
 * The worker's grouped claims and run ends right after a big batch, before Postgres has
 * analyzed `runs` again: its statistics still say almost no run is queued. Statements whose
 * plans trust that (a scan of every queued run, once per session in the statement) read the
 * whole backlog each time; these must read each session's own few entries. What is checked is
 * what Postgres counted (index entries and rows read, `pg_stat_user_*`), not time.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openDatabase } from "../src/shared/db/client.js";
import { appendsTogether, endingAppendsTogether } from "../src/shared/store/grouped-appends.js";
import { claimAlone, claimsTogether } from "../src/shared/store/grouped-claims.js";
import type { NewMessageRow } from "../src/shared/store/rows.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const BACKLOG = 5_000;
const GROUP = 16;

describe("grouped claims and run ends under a backlog the statistics have not seen", () => {
  let fleet: FleetEnv;
  let db: ReturnType<typeof openDatabase>;
  beforeAll(async () => {
    fleet = await createFleetEnv("planbacklog");
    // One connection: the statistics it reports are flushed before each reading.
    db = openDatabase(fleet.config.databaseUrl, { max: 1 });
    const sql = db.sql;
    await sql`alter table runs set (autovacuum_enabled = false)`;
    await sql`alter table sessions set (autovacuum_enabled = false)`;
    await sql`insert into sessions (id, agent)
      select 's-' || lpad(g::text, 6, '0'), '{"model":{"provider":"scripted","steps":[{"text":"hi"}]}}'::jsonb
        from generate_series(1, ${BACKLOG}) g`;
    await sql`insert into runs (id, session_id, kind, trigger, status, input, ended_at, ended_reason)
      select 'old-' || g, 's-' || lpad(g::text, 6, '0'), 'run', 'api', 'ended', 'x', now(), 'completed'
        from generate_series(1, ${BACKLOG}) g`;
    await sql`analyze sessions`;
    await sql`analyze runs`;
    // The batch arrives after the statistics were taken.
    await sql`insert into runs (id, session_id, kind, trigger, status, input)
      select 'r-' || g, 's-' || lpad(g::text, 6, '0'), 'run', 'api', 'queued', 'Go.'
        from generate_series(1, ${BACKLOG}) g`;
  });
  afterAll(async () => {
    await db?.close();
    await fleet?.close();
  });

  /** Index entries and table rows read in `runs` and `sessions` while `fn` runs. */
  async function reads(fn: () => Promise<unknown>): Promise<{ index: number; seq: number }> {
    const sql = db.sql;
    const read = async () => {
      await sql`select pg_stat_force_next_flush()`;
      await sql`select 1`; // its end flushes what the statements before it counted
      await sql`select pg_stat_clear_snapshot()`;
      const [row] = await sql<{ index: string; seq: string }[]>`
        select (select coalesce(sum(idx_tup_read), 0) from pg_stat_user_indexes
                 where relname in ('runs', 'sessions')) as index,
               (select coalesce(sum(seq_tup_read), 0) from pg_stat_user_tables
                 where relname in ('runs', 'sessions')) as seq`;
      return { index: Number(row!.index), seq: Number(row!.seq) };
    };
    const before = await read();
    await fn();
    const after = await read();
    return { index: after.index - before.index, seq: after.seq - before.seq };
  }

  const row = (seq: number, content: string): NewMessageRow => ({
    seq,
    role: "assistant",
    content,
    tool_calls: null,
    tool_call_id: null,
    call_seq: null,
    name: null,
    success: null,
    stop_reason: "end_turn",
    usage: null,
    provider_state: null,
  });

  it("a claim, an append and a run end of 16 sessions each read their sessions' own entries", async () => {
    // Enough statements for Postgres to settle on its plan (it may switch to a generic one).
    for (let round = 0; round < 8; round++) {
      const ids = Array.from(
        { length: GROUP },
        (_, k) => `s-${String(round * GROUP + k + 1).padStart(6, "0")}`,
      );
      let claimed: Awaited<ReturnType<typeof claimsTogether>> = [];
      const claim = await reads(async () => {
        claimed = await claimsTogether(
          db,
          ids.map((sessionId) => ({ sessionId, workerId: "w", startFirst: true, tail: "awaiting_model" })),
        );
      });
      const fence = claimed.map((answer, k) => {
        if (!answer.locked || !answer.out) throw new Error(`claim of ${ids[k]} failed`);
        return {
          sessionId: ids[k]!,
          epoch: Number(answer.out.lease_epoch),
          runId: `r-${Number(ids[k]!.slice(2))}`,
        };
      });
      const append = await reads(() =>
        appendsTogether(
          db,
          fence.map((f) => ({ ...f, lastSeq: 1, tail: "tools_pending", tokens: 0, rows: [row(2, "…")] })),
        ),
      );
      let ended: Awaited<ReturnType<typeof endingAppendsTogether>> = [];
      const end = await reads(async () => {
        ended = await endingAppendsTogether(
          db,
          fence.map((f) => ({
            ...f,
            lastSeq: 2,
            tail: "completed",
            tokens: 0,
            rows: [row(3, "done")],
            outcome: "completed",
            error: null,
            usage: null,
            park: null,
          })),
        );
      });
      expect(ended.every((answer) => answer.locked && answer.out?.fenceOk)).toBe(true);
      // Per session a handful of entries (its row, its runs, its messages); the backlog is
      // 5,000 queued runs, which a plan trusting the statistics read once per session.
      for (const [what, counted] of Object.entries({ claim, append, end }))
        expect({ what, round, ...counted }).toEqual({
          what,
          round,
          index: expect.toSatisfy((n: number) => n < GROUP * 20),
          seq: expect.toSatisfy((n: number) => n < GROUP * 20),
        });
    }
    // A claim alone (a turn with one claim) reads its own entries too.
    for (let n = 0; n < 8; n++) {
      const sessionId = `s-${String(8 * GROUP + n + 1).padStart(6, "0")}`;
      let claimed: Awaited<ReturnType<typeof claimAlone>> = null;
      const alone = await reads(async () => {
        claimed = await claimAlone(db, {
          sessionId,
          workerId: "w",
          startFirst: true,
          tail: "awaiting_model",
        });
      });
      expect(claimed).not.toBeNull();
      expect({ n, ...alone }).toEqual({
        n,
        index: expect.toSatisfy((x: number) => x < 20),
        seq: expect.toSatisfy((x: number) => x < 20),
      });
    }
    const [states] = await db.sql<{ ended: number; queued: number }[]>`
      select count(*) filter (where status = 'ended' and id like 'r-%')::int as ended,
             count(*) filter (where status = 'queued')::int as queued from runs`;
    expect(states).toEqual({ ended: 8 * GROUP, queued: BACKLOG - 8 * GROUP - 8 });
  });
});
