/**
 * `fleet_runs_total` counts every run once, by whoever ends it (README "Metrics and
 * dashboard"). A resume that reaches a worker with nothing to resume is started and ended
 * at once (`nothing_to_resume`); when that end's write fails (Postgres drops the connection,
 * a statement timeout, a lost lease), the run is still running in Postgres and another
 * process ends it later (`crashed` at the next claim, or `stalled`/`crashed` by the
 * sweeper). The worker counted its `nothing_to_resume` before the write, so the run was
 * counted twice — once for an end Postgres never stored. Found by the operator review
 * (after terminating Postgres connections, each count's increment read against the write it
 * follows); here a trigger in the test's own database fails every write of that end. Real
 * API, worker and sweeper (in this process, for the registries Prometheus scrapes), Postgres
 * and Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { RunQueues } from "../src/shared/queues.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { runsCounted } from "./support/metric-samples.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
let sweeper: RunningSweeper;

beforeAll(async () => {
  fleet = await createFleetEnv("run-counted-once", { env: { SWEEPER_BACKOFF_MS: "100" } });
  ({ client } = await fleet.startApi());
  worker = await startWorker({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false });
  sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
}, 60_000);
afterAll(async () => {
  await sweeper?.stop();
  await worker?.stop();
  await fleet?.close();
});

describe("a run whose end could not be written", () => {
  it("is counted once, by whoever ends it in Postgres", async () => {
    const { sql } = fleet.database;
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "done" }] } },
    });
    const first = await client.send(id, "hi");
    expect((await client.waitForRun(first.runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");

    // Every write of a nothing_to_resume end fails, as it would on a connection Postgres keeps
    // dropping (the worker tries a failed gathered write again alone: one failure is not enough).
    await sql.unsafe(`
      create sequence failed_ends;
      create function fail_nothing_to_resume() returns trigger language plpgsql as $$
      begin
        -- nextval is not rolled back with the failed statement: it counts the attempts.
        if new.ended_reason = 'nothing_to_resume' and nextval('failed_ends') > 0 then
          raise exception 'connection lost (simulated)';
        end if;
        return new;
      end $$;
      create trigger fail_nothing_to_resume before update on runs
        for each row execute function fail_nothing_to_resume();`);
    // A resume of a completed session that reaches a worker: it has nothing to resume.
    const [run] = await sql<{ id: string }[]>`
      insert into runs (id, session_id, tenant, kind, trigger, resume_kind)
      values (gen_random_uuid()::text, ${id}, 'default', 'resume', 'api', 'call_model') returning id`;
    await new RunQueues(fleet.redis, fleet.config.prefix).enqueue("resume", {
      sessionId: id,
      runId: run!.id,
    });

    await waitFor(
      async () => (await sql`select 1 from runs where id = ${run!.id} and status = 'ended'`).length > 0,
      30_000,
      "the refused resume ended by someone",
    );
    expect((await sql`select is_called from failed_ends`)[0]).toMatchObject({ is_called: true });
    // Whoever ended it counted it; the automatic resume that follows ends too.
    await waitFor(
      async () => (await sql`select 1 from runs where session_id = ${id} and status <> 'ended'`).length === 0,
      30_000,
      "every run of the session ended",
    );
    const stored = await sql<{ kind: string; outcome: string; n: number }[]>`
      select kind, ended_reason as outcome, count(*)::int as n from runs
       where session_id = ${id} group by 1, 2`;
    const expected = Object.fromEntries(stored.map((r) => [`${r.kind}|${r.outcome}`, r.n]));
    const total = (o: Record<string, number>) => Object.values(o).reduce((a, b) => a + b, 0);
    // Each process counts right after its write: give the last one a moment.
    await waitFor(
      async () =>
        total(await runsCounted(worker.metrics.registry, sweeper.metrics.registry)) >= total(expected),
      5_000,
      "every ended run counted",
    );
    const counted = await runsCounted(worker.metrics.registry, sweeper.metrics.registry);
    const sorted = (o: Record<string, number>) => Object.fromEntries(Object.entries(o).sort());
    expect(sorted(counted)).toEqual(sorted(expected));
  }, 90_000);
});
