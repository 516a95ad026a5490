/**
 * The backlog line of `npm run bench:recovery`: a worker is SIGKILLed while at least
 * `factor` × the workers' total concurrency first runs wait in the queue, and every session
 * that was running on it is timed from the kill to its resume starting. Without resumes
 * going ahead of new work, they wait behind the whole backlog.
 */
import type { Queue } from "bullmq";
import type postgres from "postgres";
import type { FleetClient } from "../src/producer/client.js";
import type { AgentConfigInput } from "../src/shared/agent-config.js";
import { fmt, inPool, type ReadyChild, waitUntil } from "./support.js";

export type BacklogContext = {
  client: FleetClient;
  sql: postgres.Sql;
  /** The fleet's runs queue (for its counts). */
  queue: Queue;
  alive: Map<string, ReadyChild>;
  startWorker: () => Promise<void>;
  /** Sessions that sit inside a long sleep (the existing kill scenario). */
  sleepyAgent: AgentConfigInput;
  perKill: number;
  totalConcurrency: number;
};

export type BacklogOptions = { kills: number; factor: number; sleepMs: number };

export type BacklogSample = {
  kill: number;
  /** First runs queued (Postgres) when the worker was killed. */
  queuedAtKill: number;
  /** The queue's own counts at the kill. */
  jobsAtKill: Record<string, number>;
  /** Kill → resume enqueued (run created) and → resume started, ms, per session on the victim. */
  enqueued: number[];
  started: number[];
  triggers: Record<string, number>;
};

/** The MAX_BATCH of the API. */
const BATCH = 1_000;

async function queuedFirstRuns(sql: postgres.Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from runs where kind = 'run' and status = 'queued'`;
  return row!.n;
}

export async function backlogKills(ctx: BacklogContext, options: BacklogOptions): Promise<BacklogSample[]> {
  const target = options.factor * ctx.totalConcurrency;
  const backlogAgent = {
    model: {
      provider: "scripted" as const,
      steps: [
        { toolCalls: [{ id: "work", name: "sleep", arguments: { ms: options.sleepMs } }] },
        { text: "Backlog item done." },
      ],
    },
    tools: ["sleep"],
  };
  console.log(
    `  backlog: ${options.kills} kills, each with ≥ ${target} first runs queued ` +
      `(${options.factor} × ${ctx.totalConcurrency} slots), backlog sessions sleep ${options.sleepMs} ms`,
  );
  const samples: BacklogSample[] = [];
  for (let kill = 1; kill <= options.kills; kill++) {
    // Victims first, while slots are free: they sit inside a long sleep.
    const victims = await Promise.all(
      Array.from({ length: ctx.perKill }, async (_, i) => {
        const { id } = await ctx.client.createSession({
          agent: ctx.sleepyAgent,
          metadata: { kill: `backlog-${kill}`, i },
        });
        await ctx.client.send(id, `Backlog kill ${kill}, session ${i}: take a nap.`);
        return id;
      }),
    );
    await waitUntil(
      async () => {
        const [row] = await ctx.sql<{ n: number }[]>`
          select count(*)::int as n from runs r where r.session_id = any(${victims}) and r.status = 'running'
             and exists (select 1 from messages m where m.session_id = r.session_id and m.role = 'assistant')`;
        return row!.n === victims.length;
      },
      20_000,
      `backlog kill ${kill}: the sessions inside the sleep tool`,
      20,
    );
    // Then the backlog: enough to fill every free slot and leave `target` waiting.
    const count = target + ctx.totalConcurrency;
    const batches = Array.from({ length: Math.ceil(count / BATCH) }, (_, b) =>
      Array.from({ length: Math.min(BATCH, count - b * BATCH) }, (_, i) => ({
        agent: backlogAgent,
        metadata: { backlog: kill, i: b * BATCH + i },
        input: "Backlog item.",
      })),
    );
    await inPool(batches, 2, (sessions) => ctx.client.createBatch(sessions));
    await waitUntil(
      async () => (await queuedFirstRuns(ctx.sql)) >= target,
      20_000,
      `backlog kill ${kill}: ${target} first runs queued`,
    );
    // Every slot busy with a started run (a job claimed but not started yet is another case:
    // the sweeper's dead-claim scan), so the killed worker takes a full load with it.
    await waitUntil(
      async () => {
        const [row] = await ctx.sql<
          { n: number }[]
        >`select count(*)::int as n from runs where status = 'running'`;
        return row!.n >= ctx.totalConcurrency;
      },
      30_000,
      `backlog kill ${kill}: every slot running a session`,
    );

    const byWorker = new Map<string, number>();
    for (const row of await ctx.sql<{ worker_id: string }[]>`
        select worker_id from runs where session_id = any(${victims}) and status = 'running'`)
      byWorker.set(row.worker_id, (byWorker.get(row.worker_id) ?? 0) + 1);
    const victimId = [...byWorker.entries()].sort((a, b) => b[1] - a[1])[0]![0];
    const victim = ctx.alive.get(victimId);
    if (!victim) throw new Error(`backlog kill ${kill}: ${victimId} is not a live worker here`);
    const onVictim = (
      await ctx.sql<{ session_id: string }[]>`
        select session_id from runs where status = 'running' and worker_id = ${victimId}`
    ).map((r) => r.session_id);
    const queuedAtKill = await queuedFirstRuns(ctx.sql);
    const jobsAtKill = await ctx.queue.getJobCounts("waiting", "prioritized", "active", "delayed");
    const killedAt = Date.now();
    victim.child.kill("SIGKILL");
    ctx.alive.delete(victimId);
    // The fleet keeps its size, as `fleet up` does.
    const replacing = victim.exited.then(() => ctx.startWorker());

    let resumes: { session_id: string; trigger: string; created_ms: number; started_ms: number | null }[] =
      [];
    await waitUntil(
      async () => {
        resumes = await ctx.sql`
          select distinct on (session_id) session_id, trigger,
                 (extract(epoch from created_at) * 1000)::float8 as created_ms,
                 (extract(epoch from started_at) * 1000)::float8 as started_ms
            from runs
           where session_id = any(${onVictim}) and kind = 'resume' and created_at >= to_timestamp(${killedAt / 1000})
           order by session_id, created_at`;
        return resumes.length === onVictim.length && resumes.every((r) => r.started_ms !== null);
      },
      300_000,
      `backlog kill ${kill}: the resume of every session of the killed worker started`,
      50,
    );
    await replacing;
    const triggers: Record<string, number> = {};
    for (const r of resumes) triggers[r.trigger] = (triggers[r.trigger] ?? 0) + 1;
    const sample: BacklogSample = {
      kill,
      queuedAtKill,
      jobsAtKill,
      enqueued: resumes.map((r) => r.created_ms - killedAt).sort((a, b) => a - b),
      started: resumes.map((r) => r.started_ms! - killedAt).sort((a, b) => a - b),
      triggers,
    };
    samples.push(sample);
    const jobs = Object.entries(jobsAtKill)
      .map(([state, n]) => `${state} ${n}`)
      .join(", ");
    console.log(
      `  backlog kill ${kill}: ${queuedAtKill} first runs queued (jobs: ${jobs}); ${onVictim.length} sessions on the ` +
        `killed worker; resumes enqueued after ≤ ${fmt(sample.enqueued.at(-1)!, 0)} ms, started after ` +
        `${fmt(sample.started[0]!, 0)}–${fmt(sample.started.at(-1)!, 0)} ms`,
    );
    // Let the backlog drain (and the resumed sessions finish) before the next kill.
    await waitUntil(
      async () => {
        const [row] = await ctx.sql<
          { n: number }[]
        >`select count(*)::int as n from runs where status <> 'ended'`;
        return row!.n === 0;
      },
      600_000,
      `backlog kill ${kill}: the backlog drained`,
      250,
    );
  }
  return samples;
}
