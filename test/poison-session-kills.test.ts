/**
 * A "poison" session: every worker that takes it dies (SIGKILL) during its model call, before
 * anything of the call is stored. Each death is a crash the sweeper resumes; the resumes all
 * start at the same point, so they count against the session's one attempt limit
 * (contracts §12) and the session is parked `attempts_exhausted` after a bounded number of
 * kills — never taken again without end. The same when each worker dies after it took the
 * session's job and before its run started (its claim held up in Postgres): each such dead
 * claim is counted too. Real `fleet worker` processes, killed one after another, an
 * in-process sweeper.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { RunQueues } from "../src/shared/queues.js";
import { type AttemptBudgetFleet, attemptBudgetFleet } from "./support/attempt-budget-fleet.js";
import { type FleetEnv, readyInfo, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { type PgProxy, startPgProxy } from "./support/pg-proxy.js";

const MAX_ATTEMPTS = 3;

describe("a session whose worker is killed each time it runs it", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let budget: AttemptBudgetFleet;

  beforeAll(async () => {
    budget = await attemptBudgetFleet("poisonsession", MAX_ATTEMPTS);
    ({ fleet, client } = budget);
  }, 60_000);
  afterAll(async () => {
    await budget?.close();
  });

  it("is parked attempts_exhausted after a bounded number of kills, each run counted", async () => {
    expect(loadConfig(fleet.env).sweeperMaxAttempts).toBe(MAX_ATTEMPTS);
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "never arrives", delayMs: 600_000 }] } },
    });
    await client.send(id, "go");
    const killedRuns = new Set<string>();
    let parked = false;
    for (let kill = 0; kill < MAX_ATTEMPTS + 4 && !parked; kill++) {
      const worker = await fleet.spawnWorker();
      let runId: string | undefined;
      await waitFor(
        async () => {
          parked = (await client.getSession(id)).status === "parked";
          if (parked) return true;
          const rows = await fleet.database.sql<{ id: string }[]>`
            select id from runs where session_id = ${id} and status = 'running' and started_at is not null`;
          runId = rows.map((r) => r.id).find((r) => !killedRuns.has(r));
          return runId !== undefined;
        },
        60_000,
        "the session's next run started, or the session parked",
      );
      if (runId !== undefined) killedRuns.add(runId);
      worker.child.kill("SIGKILL");
      await worker.exited;
    }
    expect(parked).toBe(true);
    const session = await client.getSession(id);
    expect(session.status).toBe("parked");
    expect(session.parkedReason).toMatch(/^attempts_exhausted: 3 automatic resumes made no progress/);
    // The first run and one per attempt: then nothing more.
    expect(killedRuns.size).toBe(MAX_ATTEMPTS + 1);
    expect(session.runs.map((r) => r.endedReason)).toEqual(Array(MAX_ATTEMPTS + 1).fill("crashed"));
    expect(session.messages.filter((m) => m.role === "assistant")).toHaveLength(0);
  }, 300_000);

  it("is parked attempts_exhausted when each worker dies after taking its job, before its run starts", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "never started" }] } },
    });
    const queues = new RunQueues(fleet.redis, fleet.config.prefix);
    const proxies: PgProxy[] = [];
    /** A worker whose Postgres (its own proxy) goes silent once it is ready: it takes jobs and never starts their runs. */
    const deafWorker = async (): Promise<{ worker: WorkerProcess; workerId: string }> => {
      const proxy = await startPgProxy();
      proxies.push(proxy);
      const worker = await fleet.spawnWorker({ DATABASE_URL: proxy.urlFor(fleet.env.DATABASE_URL!) });
      proxy.blackhole();
      return { worker, workerId: readyInfo(worker).workerId };
    };
    try {
      let next = await deafWorker();
      await client.send(id, "go");
      let deadClaims = 0;
      let parked = false;
      // At most twice the limit's kills: a kill can land while the job waits out a put-back
      // (the session's lease still the dead worker's), in no worker's hands, so nothing is
      // left to count; the next worker takes it and its death is counted.
      for (let kill = 0; kill < 2 * (MAX_ATTEMPTS + 1) && !parked; kill++) {
        const { worker, workerId } = next;
        await waitFor(
          async () => {
            parked = (await client.getSession(id)).status === "parked";
            if (parked) return true;
            return (await queues.getActive()).some((job) => job.processedBy === workerId);
          },
          60_000,
          "the session's job taken by the worker, or the session parked",
        );
        if (parked) break;
        // The next one is ready (and deaf) before this one dies: it takes the job the sweeper adds again.
        next = await deafWorker();
        worker.child.kill("SIGKILL");
        await worker.exited;
        deadClaims++;
      }
      expect(parked).toBe(true);
      const session = await client.getSession(id);
      expect(session.parkedReason).toMatch(/^attempts_exhausted: 3 automatic retries made no progress/);
      expect(deadClaims).toBeGreaterThanOrEqual(MAX_ATTEMPTS + 1);
      expect(await budget.attempts(id)).toBe(MAX_ATTEMPTS);
      // No run of it ever started.
      expect(session.runs.every((r) => r.status === "queued")).toBe(true);
      expect(session.messages.filter((m) => m.role === "assistant")).toHaveLength(0);
    } finally {
      await queues.close();
      for (const proxy of proxies) await proxy.close();
    }
  }, 300_000);
});
