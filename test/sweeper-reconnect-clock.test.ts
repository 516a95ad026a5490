/**
 * After its own Redis connection comes back, the sweeper process waits a few seconds before it
 * reads CLIENT LIST for dead workers again (they are reconnecting too). That wait was timed on
 * the wall clock: a clock stepped back (NTP correcting a host that ran an hour fast) right after
 * such a reconnect stopped the liveness pass for as long as the step — an hour with no dead or
 * frozen worker found, no session of theirs resumed. It is timed on a monotonic clock now.
 * Here the sweeper's connection is killed from outside (CLIENT KILL), Date is stepped an hour
 * back once it is back, and a run of a worker that is not connected (killed) must still end.
 */
import { randomUUID } from "node:crypto";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { QUEUES } from "../src/shared/queues.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { sweeperName } from "../src/sweeper/liveness.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "resumed answer" }] } });

describe("the sweeper process after a reconnect", () => {
  let fleet: FleetEnv;
  let running: RunningSweeper | undefined;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweepreconnclock");
  });
  afterAll(async () => {
    vi.useRealTimers();
    await running?.stop();
    await fleet?.close();
  });

  it("finds dead workers again when the wall clock stepped back after it", async () => {
    vi.useFakeTimers({ toFake: ["Date"], shouldAdvanceTime: true });
    running = await startSweeper(fleet.config, { serveMetrics: false, logger: pino({ level: "silent" }) });
    const sweeper = running.sweeper;
    let reconnected = false;
    const reset = sweeper.resetLiveness.bind(sweeper);
    // Called by the process's `ready` handler right after it set its quiet period.
    sweeper.resetLiveness = () => {
      reset();
      reconnected = true;
    };
    const mine = sweeperName(fleet.config.prefix, "");
    const connection = async () => {
      const list = (await fleet.redis.call("CLIENT", "LIST")) as string;
      const ids = list
        .split("\n")
        .filter((line) => / name=(\S+)/.exec(line)?.[1]?.startsWith(mine))
        .map((line) => /^id=(\d+)/.exec(line)![1]!);
      return ids.length === 1 ? ids[0]! : null;
    };
    // Killed until the process has seen a reconnect.
    let killed: string | null = null;
    while (!reconnected) {
      const now = await connection();
      if (now !== null && now !== killed) {
        await fleet.redis.call("CLIENT", "KILL", "ID", now);
        killed = now;
      }
      await waitFor(
        async () => reconnected || ((await connection()) ?? killed) !== killed,
        30_000,
        "a reconnect",
      );
    }
    vi.setSystemTime(Date.now() - 60 * 60_000); // NTP steps this host's clock an hour back

    const { sql } = fleet.database;
    const { id } = await new SessionQueries(fleet.database).createSession({
      agent: AGENT,
      messages: [{ role: "user", content: "question" }],
    });
    await sql`update sessions set run_started = true where id = ${id}`;
    const runId = randomUUID();
    await sql`
      insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
      values (${runId}, ${id}, 'run', 'api', 'running', ${`gone-${randomUUID().slice(0, 8)}`},
              now() - interval '1 minute', ${QUEUES.runs.jobId({ sessionId: id, runId })})`;
    const ended = async () =>
      (await sql<{ status: string }[]>`select status from runs where id = ${runId}`)[0]?.status === "ended";
    await waitFor(ended, 60_000, "the dead worker's run to end");
    const [run] = await sql<{ ended_reason: string }[]>`select ended_reason from runs where id = ${runId}`;
    expect(run!.ended_reason).toBe("crashed");
  }, 120_000);
});
