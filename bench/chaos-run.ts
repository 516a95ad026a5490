/**
 * One chaos run: a scratch fleet (fresh database, FLEET_PREFIX, tool directory, a private
 * redis-server, W worker and S sweeper processes, the API in-process), sessions submitted
 * in waves, the seeded fault schedule played against it until every session has settled
 * or the deadline passes, then quiescence, the checks and the figures.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import postgres from "postgres";
import { startApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { openDatabase } from "../src/shared/db/client.js";
import { migrateDatabase } from "../src/shared/db/migrate.js";
import { runChecks } from "./chaos-checks.js";
import { readHistory, readStreams } from "./chaos-collect.js";
import {
  explainSlowest,
  type FaultRecord,
  lockTakeovers,
  readRoleLogs,
  splitWaits,
} from "./chaos-explain.js";
import { CHAOS_APP_NAME, freePort, PrivateRedis, RoleSlots, terminatePgConnections } from "./chaos-fleet.js";
import { type ChaosEvent, type ChaosOptions, type ChaosPlan, planChaos } from "./chaos-plan.js";
import { type KillRecord, report, type Tally } from "./chaos-report.js";
import { Cleanup, createScratchDatabase, dropScratchDatabase, fmt, shortId, sleep } from "./support.js";

/** The tool module every chaos worker loads: `chaos_mark` (records when each call started). */
const CHAOS_TOOLS = resolve(import.meta.dirname, "chaos-tools.ts");

export type ChaosRunOptions = ChaosOptions & {
  concurrency: number;
  leaseTtlMs: number;
  /** How long to wait for quiescence after the chaos stopped. */
  settleMs: number;
  /** The private redis-server's port (it is killed and restarted); null: any free port. */
  redisPort: number | null;
  /** Keep the scratch database and tool directory for a look afterwards. */
  keep: boolean;
  /** Print each fault as it lands. */
  verbose: boolean;
  /** Where each worker's and sweeper's log (pino JSON, level info) is kept; null: a new temporary directory. */
  logDir: string | null;
};

type Fleet = {
  redis: PrivateRedis;
  workers: RoleSlots;
  sweepers: RoleSlots;
  client: FleetClient;
  sql: postgres.Sql;
  dbName: string;
  databaseUrl: string;
  prefix: string;
  toolDir: string;
  markDir: string;
  logDir: string;
};

/** Runs the whole thing; resolves with the exit code (0 clean, 1 violations, 2 could not run). */
export async function runChaos(options: ChaosRunOptions): Promise<number> {
  const began = Date.now();
  const plan = planChaos(options);
  console.log(
    `chaos: ${options.sessions} sessions, ${options.workers} workers × ${options.concurrency}, ` +
      `${options.sweepers} sweepers, lease ${options.leaseTtlMs} ms; deadline ${fmt(options.timeoutMs / 1000, 0)} s; ` +
      `seed ${options.seed} (repeat with --seed ${options.seed})`,
  );
  console.log(`  plan: ${plan.waveAtMs.length} waves of sessions, ${describePlan(plan)}`);
  const cleanup = new Cleanup();
  try {
    const fleet = await startFleet(options, cleanup);
    const { kills, faults, t0, tally, finished } = await playChaos(options, plan, fleet);
    const quiet = await settle(options, fleet, finished);
    const closing = Date.now();
    await Promise.all([fleet.workers.close(3_000), fleet.sweepers.close(3_000)]);
    const history = await readHistory(fleet.sql, fleet.toolDir, fleet.markDir);
    history.streams = {
      bySession: await readStreams(
        fleet.databaseUrl,
        fleet.redis.url,
        fleet.prefix,
        history.sessions.map((s) => s.id),
      ),
      // A restart empties the private redis-server: the runs' ends written before it are gone.
      emptiedUntilMs: tally.redisBackAtMs,
    };
    console.log(`  fleet stopped and history read in ${fmt((Date.now() - closing) / 1000, 1)} s`);
    const results = runChecks(history);
    const processes = {
      started: { workers: fleet.workers.started, sweepers: fleet.sweepers.started },
      unexpected: [...fleet.workers.unexpected, ...fleet.sweepers.unexpected],
    };
    report(history, results, kills, tally, processes, quiet, began);
    const logs = await readRoleLogs(fleet.logDir).catch((error: Error) => {
      console.log(`reading the logs failed: ${error.message}`);
      return [];
    });
    for (const [k, v] of splitWaits(history, kills, logs)) console.log(`${k.padEnd(22)} ${v}`);
    const takeovers = lockTakeovers(faults, logs);
    console.log(
      `${"dead sweepers' locks".padEnd(22)} ${takeovers.length} taken over` +
        (takeovers.length
          ? ` (ms after the holder's SIGKILL, when the session next needed a sweeper: ${takeovers.map((ms) => (ms === null ? "?" : Math.round(ms))).join(", ")})`
          : ""),
    );
    console.log("\n── the slowest resumes after a worker SIGKILL ─────");
    for (const line of explainSlowest(history, kills, faults, logs, t0)) console.log(line);
    console.log("\n── the slowest to be queued again (the sweepers' part) ─");
    for (const line of explainSlowest(history, kills, faults, logs, t0, 3, "queued")) console.log(line);
    console.log(`\nlogs of every worker and sweeper: ${fleet.logDir}`);
    if (options.keep)
      console.log(
        `kept: database ${fleet.dbName} (postgres://postgres@127.0.0.1:5432), tool dir ${fleet.toolDir}, ` +
          `tool starts ${fleet.markDir}`,
      );
    return results.some((r) => r.violations.length > 0) ? 1 : 0;
  } catch (error) {
    console.error(`chaos run failed: ${(error as Error).stack ?? error}`);
    return 2;
  } finally {
    await cleanup.run();
  }
}

function describePlan(plan: ChaosPlan): string {
  const n = (pred: (e: ChaosEvent) => boolean) => plan.events.filter(pred).length;
  return (
    `${n((e) => e.action === "kill" && e.role === "worker")} worker SIGKILLs, ` +
    `${n((e) => e.action === "stop" && e.role === "worker")} worker SIGSTOPs, ` +
    `${n((e) => e.action === "kill" && e.role === "sweeper")} sweeper SIGKILLs, ` +
    `${n((e) => e.action === "stop" && e.role === "sweeper")} sweeper SIGSTOPs, ` +
    `${n((e) => e.action === "pg_terminate")} Postgres terminations, ${n((e) => e.action === "redis_restart")} Redis restarts`
  );
}

async function startFleet(options: ChaosRunOptions, cleanup: Cleanup): Promise<Fleet> {
  const id = shortId();
  const redis = new PrivateRedis(options.redisPort ?? (await freePort()));
  cleanup.add("stop the private redis-server", () => redis.stop());
  await redis.start();
  const dbName = `fleet_chaos_${id}`;
  const databaseUrl = await createScratchDatabase(dbName);
  if (!options.keep) cleanup.add(`drop database ${dbName}`, () => dropScratchDatabase(dbName));
  const toolDir = await mkdtemp(join(tmpdir(), "fleet-chaos-"));
  // Kept whatever the outcome: what the sweepers saw and did is how a slow resume is explained.
  const logDir = options.logDir ?? `${toolDir}-logs`;
  await mkdir(logDir, { recursive: true });
  const markDir = `${toolDir}-marks`;
  await mkdir(markDir);
  if (!options.keep)
    cleanup.add(`remove ${toolDir}`, async () => {
      await rm(toolDir, { recursive: true, force: true });
      await rm(markDir, { recursive: true, force: true });
    });
  const migrator = openDatabase(databaseUrl, { max: 2 });
  try {
    await migrateDatabase(migrator);
  } finally {
    await migrator.close();
  }
  const env: Record<string, string> = {
    DATABASE_URL: databaseUrl,
    REDIS_URL: redis.url,
    FLEET_PREFIX: `chaos-${id}`,
    FLEET_TOOL_DIR: toolDir,
    LOG_LEVEL: "info",
    METRICS_PORT: "0",
    LEASE_TTL_MS: String(options.leaseTtlMs),
    SWEEP_INTERVAL_MS: "100",
    SWEEPER_BACKOFF_MS: "250",
    WORKER_CONCURRENCY: String(options.concurrency),
    WORKER_DB_POOL: "4",
    SHUTDOWN_GRACE_MS: "2000",
    CHAOS_MARK_DIR: markDir,
  };
  const config = { ...loadConfig(env), logLevel: "silent" as const };
  const api = await startApi(config, { port: 0 });
  cleanup.add("stop the API", () => api.stop());
  const sql = postgres(databaseUrl, {
    max: 2,
    onnotice: () => {},
    connection: { application_name: CHAOS_APP_NAME },
  });
  cleanup.add("close the monitor connection", () => sql.end({ timeout: 2 }));
  const log = (line: string) => console.log(`  ${line}`);
  const workers = new RoleSlots("worker", options.workers, env, log, ["--tools", CHAOS_TOOLS], logDir);
  const sweepers = new RoleSlots("sweeper", options.sweepers, env, log, [], logDir);
  // Both at once: neither role may start replacements while the other is being stopped.
  cleanup.add("stop workers and sweepers", () => Promise.all([workers.close(1_000), sweepers.close(1_000)]));
  const starting = Date.now();
  await Promise.all([workers.startAll(), sweepers.startAll()]);
  console.log(
    `  fleet up in ${fmt((Date.now() - starting) / 1000, 1)} s: redis-server on port ${redis.port}, database ${dbName}`,
  );
  return {
    redis,
    workers,
    sweepers,
    client: new FleetClient({ baseUrl: api.url }),
    sql,
    dbName,
    databaseUrl,
    prefix: env.FLEET_PREFIX!,
    toolDir,
    markDir,
    logDir,
  };
}

type Progress = { total: number; settled: number; open: number };

async function progress(sql: postgres.Sql): Promise<Progress> {
  const [row] = await sql<Progress[]>`
    select (select count(*) from sessions)::int as total,
           (select count(*) from sessions where status = 'parked' or tail_state = 'completed')::int as settled,
           (select count(*) from runs where status <> 'ended')::int as open`;
  return row!;
}

/** Submits one wave; a batch that failed after its commit is kept (the sweeper re-enqueues lost jobs). */
async function submitWave(fleet: Fleet, plan: ChaosPlan, wave: number): Promise<void> {
  const items = plan.sessions.filter((s) => s.wave === wave);
  const labels = items.map((s) => s.label);
  for (let attempt = 1; ; attempt++) {
    try {
      await fleet.client.createBatch(
        items.map((s) => ({ agent: s.agent, metadata: { chaos: s.label }, input: s.input })),
      );
      return;
    } catch (error) {
      const [row] = await fleet.sql<{ n: number }[]>`
        select count(*)::int as n from sessions where metadata->>'chaos' = any(${labels})`;
      if (row!.n === items.length) return;
      if (row!.n > 0) throw new Error(`wave ${wave}: ${row!.n} of ${items.length} sessions stored`);
      if (attempt >= 120) throw new Error(`wave ${wave} could not be submitted: ${(error as Error).message}`);
      await sleep(500);
    }
  }
}

async function playChaos(options: ChaosRunOptions, plan: ChaosPlan, fleet: Fleet) {
  const t0 = Date.now();
  const deadline = t0 + options.timeoutMs;
  const at = () => `${fmt((Date.now() - t0) / 1000, 1).padStart(6)} s`;
  const say = (line: string) => {
    if (options.verbose) console.log(`  ${at()}  ${line}`);
  };
  const tally: Tally = {
    workerKills: 0,
    workerStops: 0,
    workerStopsPastLease: 0,
    sweeperKills: 0,
    sweeperStops: 0,
    pgTerminations: 0,
    pgConnections: 0,
    redisRestarts: 0,
    redisBackAtMs: null,
    skipped: 0,
  };
  const kills: KillRecord[] = [];
  const faults: FaultRecord[] = [];
  let submitted = 0;
  let finished = false;
  const submitting = (async () => {
    for (const [wave, atMs] of plan.waveAtMs.entries()) {
      await sleep(Math.max(0, t0 + atMs - Date.now()));
      if (Date.now() > deadline) break;
      await submitWave(fleet, plan, wave);
      submitted += plan.sessions.filter((s) => s.wave === wave).length;
    }
  })();
  const submitFailed = submitting.then(
    () => null,
    (error: Error) => error,
  );
  // Watches progress: stops the chaos early once every session has settled.
  const watching = (async () => {
    let lastPrint = Date.now();
    while (!finished && Date.now() < deadline) {
      await sleep(500);
      const p = await progress(fleet.sql).catch(() => null);
      if (!p) continue;
      if (submitted === options.sessions && p.settled === p.total && p.open === 0) finished = true;
      if (Date.now() - lastPrint >= 10_000 || finished) {
        lastPrint = Date.now();
        console.log(
          `  ${at()}  submitted ${submitted}/${options.sessions}, settled ${p.settled}, runs open ${p.open} | ` +
            `kills ${tally.workerKills + tally.sweeperKills}, stops ${tally.workerStops + tally.sweeperStops}, ` +
            `pg ${tally.pgTerminations}, redis ${tally.redisRestarts}`,
        );
      }
    }
  })();

  for (const event of plan.events) {
    while (!finished && Date.now() < Math.min(deadline, t0 + event.atMs)) await sleep(50);
    if (finished || Date.now() >= deadline) break;
    await play(event, fleet, tally, kills, options, (line) => {
      faults.push({ atMs: Date.now(), what: line });
      say(line);
    });
  }
  while (!finished && Date.now() < deadline) await sleep(100);
  finished = true;
  fleet.workers.contAll();
  fleet.sweepers.contAll();
  await watching;
  const failure = await submitFailed;
  if (failure) throw failure;
  console.log(`  ${at()}  chaos stopped; every frozen process woken`);
  if (submitted < options.sessions)
    console.log(`  only ${submitted} of ${options.sessions} sessions were submitted before the deadline`);
  return { kills, faults, t0, tally, finished: Date.now() < deadline };
}

async function play(
  event: ChaosEvent,
  fleet: Fleet,
  tally: Tally,
  kills: KillRecord[],
  options: ChaosRunOptions,
  say: (line: string) => void,
): Promise<void> {
  switch (event.action) {
    case "kill":
    case "stop": {
      const slots = event.role === "worker" ? fleet.workers : fleet.sweepers;
      const victim = event.action === "kill" ? slots.kill(event.slot) : slots.stop(event.slot, event.stopMs);
      if (victim === null) {
        tally.skipped++;
        say(`${event.action} ${event.role}: none available, skipped`);
        return;
      }
      if (event.action === "kill") {
        if (event.role === "worker") {
          tally.workerKills++;
          kills.push({ workerId: victim, atMs: Date.now() });
        } else tally.sweeperKills++;
      } else if (event.role === "worker") {
        tally.workerStops++;
        if (event.stopMs > options.leaseTtlMs) tally.workerStopsPastLease++;
      } else tally.sweeperStops++;
      const running =
        event.role === "worker"
          ? await fleet.sql<{ n: number }[]>`
              select count(*)::int as n from runs where status = 'running' and worker_id = ${victim}`.then(
              (rows) => `, ${rows[0]!.n} runs on it`,
              () => "",
            )
          : "";
      say(
        event.action === "kill"
          ? `SIGKILL ${event.role} ${victim}${running}`
          : `SIGSTOP ${event.role} ${victim} for ${fmt(event.stopMs / 1000, 1)} s${running}`,
      );
      return;
    }
    case "pg_terminate": {
      const n = await terminatePgConnections(fleet.dbName).catch(() => 0);
      tally.pgTerminations++;
      tally.pgConnections += n;
      say(`terminated ${n} Postgres connections`);
      return;
    }
    case "redis_restart": {
      say(`redis-server down for ${fmt(event.downMs / 1000, 1)} s`);
      await fleet.redis.restart(event.downMs);
      tally.redisRestarts++;
      tally.redisBackAtMs = Date.now();
      say("redis-server back, empty");
      return;
    }
    default: {
      const never: never = event;
      throw new Error(`unknown chaos event ${JSON.stringify(never)}`);
    }
  }
}

/** Waits until every role is back to size and nothing changes any more; false on timeout. */
async function settle(options: ChaosRunOptions, fleet: Fleet, finishedEarly: boolean): Promise<boolean> {
  const deadline = Date.now() + options.settleMs;
  if (!finishedEarly)
    console.log(`  deadline passed; waiting up to ${fmt(options.settleMs / 1000, 0)} s for quiescence`);
  let quietSince: number | null = null;
  while (Date.now() < deadline) {
    const p = await progress(fleet.sql).catch(() => null);
    const quiet =
      p !== null && p.settled === p.total && p.open === 0 && fleet.workers.full() && fleet.sweepers.full();
    if (!quiet) quietSince = null;
    else {
      quietSince ??= Date.now();
      // Longer than a lease: a late write from a process that was frozen would show by then.
      if (Date.now() - quietSince >= options.leaseTtlMs) return true;
    }
    await sleep(250);
  }
  const p = await progress(fleet.sql).catch(() => null);
  console.log(
    `  not quiescent after ${fmt(options.settleMs / 1000, 0)} s: ${p ? `${p.total - p.settled} sessions unsettled, ${p.open} runs open` : "Postgres unreachable"}`,
  );
  return false;
}
