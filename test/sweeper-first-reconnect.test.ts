/**
 * After its own Redis connection comes back (Redis restarted, the link dropped), the sweeper
 * process forgets what it saw of the workers and waits before reading CLIENT LIST again:
 * workers are reconnecting too, and their absence means nothing for a moment. It listened for
 * that reconnect only after its connection was first ready, and counted the first `ready` it
 * heard as the first connection: the first reconnect after its start went unnoticed, and live
 * workers still reconnecting were taken for dead, their runs ended `crashed` and resumed
 * elsewhere. Here the sweeper's connection and a worker's liveness connection are dropped
 * together (a restart, without touching the Redis other tests share), and the worker comes
 * back once the sweeper has seen its own reconnect (or has looked twice without it).
 */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { QUEUES } from "../src/shared/queues.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { livenessName } from "../src/shared/worker-signals.js";
import { sweeperName } from "../src/sweeper/liveness.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "answer" }] } });

describe("the sweeper process's first reconnect", () => {
  let fleet: FleetEnv;
  let running: RunningSweeper | undefined;
  let worker: Redis | undefined;

  beforeAll(async () => {
    fleet = await createFleetEnv("sweepfirstreconn");
  });
  afterAll(async () => {
    worker?.disconnect();
    await running?.stop();
    await fleet?.close();
  });

  it("does not take workers reconnecting with it for dead", async () => {
    const { prefix } = fleet.config;
    const workerId = `w-${randomUUID().slice(0, 8)}`;
    const connectWorker = async () => {
      const connection = new Redis(fleet.env.REDIS_URL!, { connectionName: livenessName(prefix, workerId) });
      await connection.ping();
      return connection;
    };
    worker = await connectWorker();
    const { sql } = fleet.database;
    const { id } = await new SessionQueries(fleet.database).createSession({
      agent: AGENT,
      messages: [{ role: "user", content: "question" }],
    });
    await sql`update sessions set run_started = true where id = ${id}`;
    const runId = randomUUID();
    await sql`
      insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
      values (${runId}, ${id}, 'run', 'api', 'running', ${workerId}, now() - interval '1 minute',
              ${QUEUES.runs.jobId({ sessionId: id, runId })})`;
    // The worker holds the session's lease (it outlives the test).
    await fleet.redis.set(`${prefix}:lease:${id}`, `${workerId}/${randomUUID()}`, "PX", 120_000);

    running = await startSweeper(fleet.config, { serveMetrics: false, logger: pino({ level: "silent" }) });
    const sweeper = running.sweeper;
    let passes = 0;
    const sweepWorkers = sweeper.sweepWorkers.bind(sweeper);
    sweeper.sweepWorkers = async () => {
      const result = await sweepWorkers();
      passes++;
      return result;
    };
    let reset = false;
    const resetLiveness = sweeper.resetLiveness.bind(sweeper);
    sweeper.resetLiveness = () => {
      resetLiveness();
      reset = true;
    };
    await waitFor(() => passes >= 2, 30_000, "the sweeper's first looks");
    const status = async () =>
      (await sql<{ status: string }[]>`select status from runs where id = ${runId}`)[0]!.status;
    expect(await status()).toBe("running");

    // A Redis restart, as these two connections see it.
    const list = (await fleet.redis.call("CLIENT", "LIST")) as string;
    const [sweeperId] = list
      .split("\n")
      .filter((line) => / name=(\S+)/.exec(line)?.[1]?.startsWith(sweeperName(prefix, "")))
      .map((line) => /^id=(\d+)/.exec(line)![1]!);
    worker.disconnect();
    await fleet.redis.call("CLIENT", "KILL", "ID", sweeperId!);
    const before = passes;
    await waitFor(
      () => reset || passes >= before + 3,
      30_000,
      "the sweeper's reconnect, or its looks without it",
    );
    worker = await connectWorker();
    const back = passes;
    await waitFor(() => passes >= back + 3, 30_000, "the sweeper's looks after the worker is back");
    expect(await status()).toBe("running");
  }, 120_000);
});
