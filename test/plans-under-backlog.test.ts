/**
 * The worker's grouped claims and run ends right after a big batch, before Postgres has
 * analyzed `runs` again: its statistics still say almost no run is queued. Statements whose
 * plans trust that (a scan of every queued run, once per session in the statement) read the
 * whole backlog each time; these must read each session's own few entries. What is checked is
 * what Postgres counted (index entries and rows read, `pg_stat_user_*`), not time. The same
 * holds for the sweeper's scans, a resume's busy check, a session's next run and a batch's
 * results, which look runs up once per session or per id too.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { backlogSession, claimAppendEnd, seedBacklog } from "../bench/backlog-fixture.js";
import { openDatabase } from "../src/shared/db/client.js";
import { createMetrics } from "../src/shared/metrics.js";
import { DEFAULT_RESUME_POLICY } from "../src/shared/resume-policy.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { claimAlone } from "../src/shared/store/grouped-claims.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { runsAndSessionsReads } from "./support/stat-reads.js";

const BACKLOG = 5_000;
const GROUP = 16;

describe("per-session run lookups under a backlog the statistics have not seen", () => {
  let fleet: FleetEnv;
  let db: ReturnType<typeof openDatabase>;
  beforeAll(async () => {
    fleet = await createFleetEnv("planbacklog");
    // One connection: the statistics it reports are flushed before each reading.
    db = openDatabase(fleet.config.databaseUrl, { max: 1 });
    await seedBacklog(db, BACKLOG);
  });
  afterAll(async () => {
    await db?.close();
    await fleet?.close();
  });

  /** Index entries and table rows read in `runs` and `sessions` while `fn` runs. */
  const reads = (fn: () => Promise<unknown>) => runsAndSessionsReads(db, fn);

  it("a claim, an append and a run end of 16 sessions each read their sessions' own entries", async () => {
    // Enough statements for Postgres to settle on its plan (it may switch to a generic one).
    for (let round = 0; round < 8; round++) {
      const counted: Record<string, { index: number; seq: number }> = {};
      await claimAppendEnd(
        db,
        Array.from({ length: GROUP }, (_, k) => round * GROUP + k + 1),
        async (what, statement) => {
          let out: Awaited<ReturnType<typeof statement>> | undefined;
          counted[what] = await reads(async () => {
            out = await statement();
          });
          return out!;
        },
      );
      // Per session a handful of entries (its row, its runs, its messages); the backlog is
      // 5,000 queued runs, which a plan trusting the statistics read once per session.
      for (const [what, reads] of Object.entries(counted))
        expect({ what, round, ...reads }).toEqual({
          what,
          round,
          index: expect.toSatisfy((n: number) => n < GROUP * 20),
          seq: expect.toSatisfy((n: number) => n < GROUP * 20),
        });
      expect(Object.keys(counted)).toEqual(["claim", "append", "end"]);
    }
    // A claim alone (a turn with one claim) reads its own entries too.
    for (let n = 0; n < 8; n++) {
      const sessionId = backlogSession(8 * GROUP + n + 1);
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
  it("the sweeper's scans, a resume's checks, a session's next run and a batch's results read by session", async () => {
    const { sql } = db;
    // 1,000 sessions mid-run as the statistics have never seen them: started, tail open, each
    // with its queued run (so none needs attention, and the scan must look at every one).
    const midRun = (n: number) => backlogSession(1_000 + n);
    await sql`update sessions set run_started = true, tail_state = 'awaiting_model'
               where id between ${midRun(1)} and ${midRun(1_000)}`;
    // A batch of 100 of them; and one session whose run ended (nothing unfinished).
    await sql`insert into batches (id, tenant) values ('b-backlog', 'default')`;
    await sql`update sessions set batch_id = 'b-backlog' where id between ${midRun(1)} and ${midRun(100)}`;
    await sql`update runs set batch_id = 'b-backlog' where session_id between ${midRun(1)} and ${midRun(100)}`;
    const idle = backlogSession(3_000);
    await sql`update runs set status = 'ended', ended_at = now(), ended_reason = 'completed' where id = 'r-3000'`;

    const sweeps = new SweepQueries(db);
    const queries = new SessionQueries(db);
    const batches = new BatchStore(db);
    const resumes = new AutomaticResumes(db, DEFAULT_RESUME_POLICY, createMetrics("plans-under-backlog"));
    const checks: [string, () => Promise<unknown>, unknown, number][] = [
      // [what, call, its answer, most entries and rows it may read]
      ["attention scan of 1,000 mid-run", () => sweeps.sessionsNeedingAttention(200), [], 1_000 * 4],
      ["hasActiveRun, none", () => sweeps.hasActiveRun(idle), false, 20],
      ["hasActiveRun, queued", () => sweeps.hasActiveRun(midRun(500)), true, 20],
      ["stillQueued", () => sweeps.stillQueued(["r-2001", "r-2002", "r-3000"]), ["r-2001", "r-2002"], 20],
      ["nextQueuedRun", async () => (await queries.nextQueuedRun(midRun(7)))?.id, "r-1007", 20],
      [
        "resume of a busy session",
        async () => (await resumes.schedule({ sessionId: midRun(9), trigger: "sweeper" })).action,
        "none",
        40,
      ],
      [
        "batch results page of 100",
        async () => (await batches.resultsPage("b-backlog", "", 100)).length,
        100,
        100 * 12,
      ],
      ["batch has not ended", () => batches.hasEnded("b-backlog"), false, 40],
      ["the sweeper's look at batches", async () => [...(await batches.endedAmong(["b-backlog"]))], [], 40],
      [
        "batch events' page of 100, every session",
        async () => (await batches.endedPage("b-backlog", null, 100)).ended.length,
        0,
        100 * 12,
      ],
      // The passes between full ones read only the sessions that changed: none here.
      [
        "batch events' page, nothing changed since",
        async () => (await batches.endedPage("b-backlog", null, 1_000, new Date(Date.now() + 60_000))).next,
        null,
        40,
      ],
    ];
    for (const [what, call, answer, most] of checks) {
      let got: unknown;
      const counted = await reads(async () => {
        got = await call();
      });
      // Before: each of these read all 5,000 queued runs once per session or id looked up
      // (the attention scan: 1,000 × ~2,500; a results page: 100 × 5,000).
      expect({ what, got, ...counted }).toEqual({
        what,
        got: answer,
        index: expect.toSatisfy((n: number) => n <= most),
        seq: expect.toSatisfy((n: number) => n <= most),
      });
    }
  });
});
