/**
 * The sweeper's scan of running runs (SweepQueries.runningRuns, every tick) reads every running
 * run with its session's last activity: ~9 of planner cost a run, so past ~11,000 running runs
 * it crossed jit_above_cost and Postgres compiled it with LLVM at each tick (20,000 running
 * runs: 208 ms of JIT in a 666 ms scan). It now runs with JIT off. Shown by its plan, replayed
 * on a connection that JIT-compiles whatever it may (test/support/jit-plans.ts), not by time.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { jitPlanOf } from "./support/jit-plans.js";

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("sweepscansjit");
  const { sql } = fleet.database;
  await sql`insert into sessions (id, agent, run_started, tail_state, last_seq)
    select 's-' || g, '{}'::jsonb, true, 'open', 0 from generate_series(1, 3) g`;
  await sql`insert into runs (id, session_id, kind, trigger, status, worker_id, started_at)
    select 'r-' || g, 's-' || g, 'initial', 'api', 'running', 'w', now() from generate_series(1, 3) g`;
}, 60_000);
afterAll(() => fleet?.close());

it("the scan of running runs is planned without JIT compilation", async () => {
  let ids: string[] = [];
  const plan = await jitPlanOf(
    fleet,
    async (database) => {
      ids = (await new SweepQueries(database).runningRuns()).map((run) => run.id);
    },
    "from runs where status = 'running'",
  );
  expect(ids.sort()).toEqual(["r-1", "r-2", "r-3"]);
  // Before: "JIT:" with its functions and timings.
  expect(plan).not.toContain("JIT:");
}, 60_000);
