/**
 * Fair dispatch of resumes between tenants (contracts §10: one tenant's batch does not
 * starve another tenant's sessions), against the real API, Postgres, Redis and a real
 * worker: tenant big resumes 16 slow sessions, then tenant small resumes one. Where small's
 * resume starts among all resumes is what fairness decides.
 */
import { Queue } from "bullmq";
import { describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv } from "./support/fleet-env.js";

describe("fair dispatch of resumes", () => {
  async function startRankOfSmall(fair: "on" | "off"): Promise<number> {
    const fleet = await createFleetEnv(`fair-resume-${fair}`, {
      env: { FLEET_FAIR_DISPATCH: fair, WORKER_CONCURRENCY: "1", WORKER_RESUME_CONCURRENCY: "1" },
    });
    try {
      const keys = new ApiKeys(fleet.database);
      const baseUrl = (await fleet.startApi()).api.url;
      const big = new FleetClient({ baseUrl, apiKey: (await keys.create("big")).key });
      const small = new FleetClient({ baseUrl, apiKey: (await keys.create("small")).key });
      await fleet.spawnWorker();
      const agent = {
        model: {
          provider: "scripted" as const,
          steps: [{ toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 120 } }] }, { text: "done" }],
        },
        tools: ["sleep"],
      };
      const messages = [{ role: "user" as const, content: "go on" }];
      const bigBatch = await big.createBatch(Array.from({ length: 16 }, () => ({ agent, messages })));
      const smallBatch = await small.createBatch([{ agent, messages }]);
      // Both tenants' resumes are queued before the worker may take any: the order is the queue's alone.
      const resumes = new Queue("resumes", { connection: fleet.redis, prefix: fleet.config.prefix });
      await resumes.pause();
      for (const s of bigBatch.sessions) await big.resume(s.id);
      const { runId } = await small.resume(smallBatch.sessions[0]!.id);
      await resumes.resume();
      await resumes.close();
      await small.waitForRun(runId, { timeoutMs: 30_000 });
      const rows = await fleet.database.sql<{ tenant: string }[]>`
        select tenant from runs where started_at is not null order by started_at, id`;
      return rows.findIndex((r) => r.tenant === "small") + 1;
    } finally {
      await fleet.close();
    }
  }

  it("one tenant's many resumes do not starve another tenant's resume (and first-in-first-out does)", async () => {
    // Two fleets of their own (database, prefix, worker): side by side, not one after the other.
    const [fairRank, fifoRank] = await Promise.all([startRankOfSmall("on"), startRankOfSmall("off")]);
    expect(fifoRank).toBe(17);
    expect(fairRank).toBeLessThanOrEqual(2);
  }, 90_000);
});
