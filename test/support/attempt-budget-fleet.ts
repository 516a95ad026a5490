/**
 * A fleet whose sweeper has a small attempt budget (SWEEPER_MAX_ATTEMPTS) and a short backoff,
 * with the API and an in-process sweeper started: for the tests that kill or stop workers
 * again and again and count what a session's attempts became (poison-session-kills,
 * shutdown-handover-budget).
 */
import type { FleetClient } from "../../src/producer/client.js";
import { type RunningSweeper, startSweeper } from "../../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv } from "./fleet-env.js";

export type AttemptBudgetFleet = {
  fleet: FleetEnv;
  client: FleetClient;
  /** The session's `resume_attempts` as stored. */
  attempts(sessionId: string): Promise<number>;
  close(): Promise<void>;
};

export async function attemptBudgetFleet(name: string, maxAttempts: number): Promise<AttemptBudgetFleet> {
  const fleet = await createFleetEnv(name, {
    env: { SWEEPER_MAX_ATTEMPTS: String(maxAttempts), SWEEPER_BACKOFF_MS: "100" },
  });
  let sweeper: RunningSweeper | undefined;
  try {
    const { client } = await fleet.startApi();
    sweeper = await startSweeper({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false });
    const running = sweeper;
    return {
      fleet,
      client,
      async attempts(sessionId) {
        const [row] = await fleet.database.sql<{ attempts: number }[]>`
          select resume_attempts as attempts from sessions where id = ${sessionId}`;
        return row!.attempts;
      },
      async close() {
        await running.stop();
        await fleet.close();
      },
    };
  } catch (error) {
    await sweeper?.stop();
    await fleet.close();
    throw error;
  }
}
