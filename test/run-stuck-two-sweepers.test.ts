/**
 * FleetRunStuck with two sweepers, one of which stopped sweeping while it still answers
 * scrapes (its Postgres unanswered: its liveness pass hangs). Each sweeper exports
 * fleet_run_progress_age_seconds as of its own last liveness pass, so the stopped one kept the
 * age it read last, and `max()` over both sweepers kept FleetRunStuck firing for a run that
 * had long ended (and would fire for a run it saw stuck before it stopped, ended since). The
 * rules now read only sweepers whose liveness pass ended within 3 of its intervals, at least a
 * minute (recording.yml `fleet:fleet_run_progress_age_seconds:max`; a minute here, at 200 ms). Two real sweepers (in this
 * process, each on its own metrics port and Postgres pool, one through a proxy the test cuts),
 * a real Prometheus scraping them and evaluating the shipped rules, real Postgres and Redis.
 *
 * Needs the `prometheus` binary (Debian package `prometheus`): without it this test fails.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { loadConfig } from "../src/shared/config.js";
import { SessionLease } from "../src/shared/lease.js";
import { closeRedis, createRedis } from "../src/shared/redis.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { livenessName } from "../src/shared/worker-signals.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { type PgProxy, startPgProxy } from "./support/pg-proxy.js";
import { freePort, type RunningPrometheus, startPrometheus, testConfig } from "./support/prometheus.js";
import { instance } from "./support/prometheus-fleet.js";
import { alertRules } from "./support/promql.js";

const INTERVAL_S = 1;
const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "never" }] } });

describe("FleetRunStuck with two sweepers, one no longer sweeping", () => {
  let fleet: FleetEnv;
  let proxy: PgProxy;
  let live: RunningSweeper;
  let stopped: RunningSweeper;
  let prometheus: RunningPrometheus;
  let workerConnection: ReturnType<typeof createRedis>;

  beforeAll(async () => {
    fleet = await createFleetEnv("run-stuck-two-sweepers");
    proxy = await startPgProxy();
    const config = { ...loadConfig(fleet.env), logLevel: "silent" as const };
    live = await startSweeper(config, { serveMetrics: true });
    stopped = await startSweeper(
      { ...config, databaseUrl: proxy.urlFor(config.databaseUrl) },
      { serveMetrics: true },
    );
    // The fleet's API and workers are not running: their targets are down.
    const [api, worker] = [await freePort(), await freePort()];
    prometheus = await startPrometheus(
      testConfig(
        {
          "fleet-api": [instance(api)],
          "fleet-worker": [instance(worker)],
          "fleet-sweeper": [instance(live.metricsPort!), instance(stopped.metricsPort!)],
        },
        INTERVAL_S,
      ),
    );
  }, 90_000);

  afterAll(async () => {
    await prometheus?.stop();
    await proxy?.restore();
    await Promise.all([live?.stop(), stopped?.stop()]);
    if (workerConnection) await closeRedis(workerConnection);
    await proxy?.close();
    await fleet?.close();
  });

  /** The alert's expression as shipped, evaluated now by Prometheus: its value, or null when quiet. */
  async function runStuckAlert(): Promise<number | null> {
    const rule = alertRules().find((r) => r.alert === "FleetRunStuck")!;
    const result = await prometheus.query(rule.expr);
    return result.result.length === 0 ? null : Number(result.result[0]!.value![1]);
  }

  /** A sweeper's series as Prometheus scraped it last. */
  async function scraped(name: string, sweeper: RunningSweeper, labels = ""): Promise<number | undefined> {
    const result = await prometheus.query(`${name}{instance="${instance(sweeper.metricsPort!)}"${labels}}`);
    const value = result.result[0]?.value?.[1];
    return value === undefined ? undefined : Number(value);
  }

  it("fires while a live worker's run makes no progress, and stops once it ended though one sweeper stopped", async () => {
    // A run on a live worker holding its lease, its session's last append two hours back.
    const workerId = `stuck-${randomUUID().slice(0, 8)}`;
    workerConnection = createRedis(
      fleet.config.redisUrl,
      "worker",
      livenessName(fleet.config.prefix, workerId),
    );
    const { id } = await new SessionQueries(fleet.database).createSession({
      agent: AGENT,
      messages: [{ role: "user", content: "question" }],
    });
    const runId = randomUUID();
    await fleet.database.sql`
      update sessions set run_started = true, lease_owner = ${workerId},
             last_active_at = now() - interval '2 hours' where id = ${id}`;
    await fleet.database.sql`
      insert into runs (id, session_id, kind, trigger, status, worker_id, started_at, job_id)
      values (${runId}, ${id}, 'run', 'api', 'running', ${workerId}, now() - interval '2 hours', 'stuck-job')`;
    const lease = new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs);
    await fleet.redis.set(lease.key(id), `${workerId}/held`, "PX", 600_000);

    await waitFor(
      async () =>
        ((await scraped("fleet_run_progress_age_seconds", live)) ?? 0) > 3600 &&
        ((await scraped("fleet_run_progress_age_seconds", stopped)) ?? 0) > 3600 &&
        (await runStuckAlert()) !== null,
      60_000,
      `both sweepers' ages scraped and the alert's expression true\n${prometheus.output()}`,
    );
    expect(await runStuckAlert()).toBeGreaterThan(3600);

    // One sweeper stops sweeping (its Postgres answers nothing), still answering scrapes; the
    // run ends meanwhile. The other reads no running run.
    proxy.blackhole();
    await fleet.database
      .sql`update runs set status = 'ended', ended_reason = 'cancelled', ended_at = now() where id = ${runId}`;
    await fleet.redis.del(lease.key(id));
    await waitFor(
      async () => (await scraped("fleet_run_progress_age_seconds", live)) === 0,
      30_000,
      "the live sweeper's age back to 0",
    );
    // The stopped sweeper still says what it read last, and has not ended a liveness pass for
    // over a minute now.
    await waitFor(
      async () => ((await scraped("fleet_sweeper_pass_age_seconds", stopped, ',pass="liveness"')) ?? 0) > 65,
      120_000,
      "the stopped sweeper's liveness pass over a minute old",
    );
    expect(await scraped("fleet_run_progress_age_seconds", stopped)).toBeGreaterThan(3600);
    expect(await runStuckAlert()).toBeNull();
  }, 240_000);
});
