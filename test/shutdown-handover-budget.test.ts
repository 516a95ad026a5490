/**
 * Graceful stops (SIGTERM, a rolling deploy) cutting a long model step, again and again: each
 * stopping worker hands the session over (its run ends `cancelled`, a resume is queued for
 * another worker) and that hand-over is not a crash. It must not spend the session's attempt
 * budget (SWEEPER_MAX_ATTEMPTS) nor wait for a crash's backoff: before, the third deploy here
 * (SWEEPER_MAX_ATTEMPTS 2) parked the session `attempts_exhausted`. Kills (SIGKILL) of the
 * same session still count as before, and park it after SWEEPER_MAX_ATTEMPTS of them.
 * Real `fleet worker` processes, stopped one after another, an in-process sweeper.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { WORKER_STOPPED_ERROR } from "../src/shared/run-outcomes.js";
import { type AttemptBudgetFleet, attemptBudgetFleet } from "./support/attempt-budget-fleet.js";
import { type FleetEnv, waitFor } from "./support/fleet-env.js";

const MAX_ATTEMPTS = 2;
/** More graceful stops than the attempt budget allows crashes. */
const DEPLOYS = MAX_ATTEMPTS + 1;

describe("a long model step cut by graceful worker stops", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let budget: AttemptBudgetFleet;

  beforeAll(async () => {
    budget = await attemptBudgetFleet("handoverbudget", MAX_ATTEMPTS);
    ({ fleet, client } = budget);
  }, 60_000);
  afterAll(async () => {
    await budget?.close();
  });

  /** Waits for a run of the session not in `seen` to be running (or the session to park); returns it. */
  async function nextRunningRun(id: string, seen: Set<string>): Promise<string | undefined> {
    let runId: string | undefined;
    await waitFor(
      async () => {
        if ((await client.getSession(id)).status === "parked") return true;
        const rows = await fleet.database.sql<{ id: string }[]>`
          select id from runs where session_id = ${id} and status = 'running' and started_at is not null`;
        runId = rows.map((r) => r.id).find((r) => !seen.has(r));
        return runId !== undefined;
      },
      60_000,
      "the session's next run started, or the session parked",
    );
    return runId;
  }

  it("hands the session over at each stop without spending its attempts; kills still count", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "never arrives", delayMs: 600_000 }] } },
    });
    await client.send(id, "go");
    const stopped = new Set<string>();
    for (let deploy = 0; deploy < DEPLOYS; deploy++) {
      const worker = await fleet.spawnWorker({ SHUTDOWN_GRACE_MS: "200" });
      const runId = await nextRunningRun(id, stopped);
      expect((await client.getSession(id)).parkedReason, `deploy ${deploy + 1}`).toBeNull();
      stopped.add(runId!);
      worker.child.kill("SIGTERM");
      expect(await worker.exited, worker.output()).toBe(0);
    }
    const handed = await client.getSession(id);
    // Not parked: its hand-over waits for the next worker.
    expect(handed.status, handed.parkedReason ?? "").toBe("queued");
    // The hand-overs spent nothing of the session's budget.
    expect(await budget.attempts(id)).toBe(0);
    const cut = handed.runs.filter((r) => stopped.has(r.id));
    expect(cut.map((r) => [r.endedReason, r.error])).toEqual(
      Array(DEPLOYS).fill(["cancelled", WORKER_STOPPED_ERROR]),
    );
    const queued = handed.runs.filter((r) => r.status === "queued");
    expect(queued).toMatchObject([{ kind: "resume", trigger: "worker", resumeKind: "call_model" }]);

    // Kills: each is a crash, counted against SWEEPER_MAX_ATTEMPTS as before.
    const killed = new Set<string>();
    let parked = false;
    for (let kill = 0; kill < MAX_ATTEMPTS + 3 && !parked; kill++) {
      const worker = await fleet.spawnWorker();
      const runId = await nextRunningRun(id, new Set([...stopped, ...killed]));
      parked = runId === undefined;
      if (runId) killed.add(runId);
      worker.child.kill("SIGKILL");
      await worker.exited;
    }
    // The sweeper parks it once the last kill's crash is seen.
    await waitFor(async () => (await client.getSession(id)).status === "parked", 30_000, "the park");
    const session = await client.getSession(id);
    expect(session.parkedReason).toMatch(/^attempts_exhausted: 2 automatic resumes made no progress/);
    // The queued hand-over's run and one per counted attempt.
    expect(killed.size).toBe(MAX_ATTEMPTS + 1);
    expect(session.messages.filter((m) => m.role === "assistant")).toHaveLength(0);
  }, 300_000);
});
