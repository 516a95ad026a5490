/**
 * A fleet on a Redis Cluster with replicas while a master fails, as on ElastiCache or
 * Memorystore: `npm run bench:failover -- --scenario kill|failover|freeze`.
 *
 * Starts 3 masters + 3 replicas (bench/failover-cluster.ts, ports --port-base … +5), an API,
 * a sweeper and --workers workers as `fleet` child processes on a scratch database, submits a
 * batch of --sessions scripted sessions (each: append_file, a 1 s sleep, append_file again,
 * an answer; one file per session), and once a quarter of them are done makes a master fail:
 *   kill      SIGKILL; its replica is promoted after the node timeout (2 s); restarted 5 s later
 *   failover  `CLUSTER FAILOVER` on its replica (no data lost, a brief pause of writes)
 *   freeze    SIGSTOP for --freeze-ms (longer than the node timeout), then SIGCONT: it comes
 *             back as a replica of the promoted node
 * --target fleet (default) fails the master holding the fleet's hash slot, `other` one that
 * holds none of its keys (only the workers' liveness connections meet it).
 *
 * Prints the figures, asserts nothing: promotion time, the longest pause of progress (no
 * message committed) after the fault, the API's failed polls, runs that ended crashed or
 * stalled (no worker died: each is a live worker misjudged) and the resumes, and the
 * invariants — every session completed or parked with a reason, each append_file line
 * written once, seq contiguous, every stored message once in the session's event stream.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { FleetClient } from "../src/producer/client.js";
import type { AgentConfigInput } from "../src/shared/agent-config.js";
import { openDatabase } from "../src/shared/db/client.js";
import { migrateDatabase } from "../src/shared/db/migrate.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { closeRedis, createRedis, deleteKeys } from "../src/shared/redis.js";
import { cli, NODE_TIMEOUT_MS, ReplicatedCluster, type Shard } from "./failover-cluster.js";
import { LivenessWatch } from "./failover-liveness.js";
import {
  benchOptions,
  Cleanup,
  createScratchDatabase,
  dropScratchDatabase,
  FLEET_BIN,
  oneOf,
  type ReadyChild,
  shortId,
  sleep,
  spawnFleetWorker,
  spawnUntilReady,
  stopChild,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  scenario: { type: "string" },
  target: { type: "string", default: "fleet" },
  sessions: { type: "string", default: "300" },
  workers: { type: "string", default: "2" },
  "freeze-ms": { type: "string", default: "8000" },
  "port-base": { type: "string", default: "7611" },
  name: { type: "string" },
});
const scenario = oneOf("scenario", values.scenario, ["kill", "failover", "freeze"]);
const target = oneOf("target", values.target, ["fleet", "other"]);
const sessions = wholeNumber("sessions", values.sessions);
const workers = wholeNumber("workers", values.workers);
const freezeMs = wholeNumber("freeze-ms", values["freeze-ms"]);
const portBase = wholeNumber("port-base", values["port-base"], 1024);
const name = values.name ?? `bench_failover_${shortId()}`;

function agent(i: number): AgentConfigInput {
  return {
    model: {
      provider: "scripted",
      steps: [
        {
          toolCalls: [
            { name: "append_file", arguments: { path: `s/${i}.log`, line: "first" } },
            { name: "sleep", arguments: { ms: 1_000 } },
          ],
          delayMs: 20,
        },
        {
          toolCalls: [{ name: "append_file", arguments: { path: `s/${i}.log`, line: "second" } }],
          delayMs: 20,
        },
        { text: `done ${i}`, delayMs: 20 },
      ],
    },
    tools: ["append_file", "sleep"],
    system: "failover bench",
    maxTurns: 10,
  };
}

type Sample = { at: number; messages: number; completed: number };

const cleanup = new Cleanup();
const children: ReadyChild[] = [];
const ports = Array.from({ length: 6 }, (_, i) => portBase + i);
const cluster = new ReplicatedCluster(ports);

async function main(): Promise<void> {
  cleanup.add("stop the cluster", () => cluster.stop());
  await cluster.start();
  const dbName = `fleet_${name}`.replace(/-/g, "_");
  const databaseUrl = await createScratchDatabase(dbName);
  cleanup.add(`drop database ${dbName}`, () => dropScratchDatabase(dbName));
  const migrator = openDatabase(databaseUrl, { max: 1 });
  await migrateDatabase(migrator).finally(() => migrator.close());
  const prefix = `{${name.replace(/_/g, "-")}}`;
  const toolDir = await mkdtemp(join(tmpdir(), "fleet-failover-tools-"));
  cleanup.add(`remove ${toolDir}`, () => rm(toolDir, { recursive: true, force: true }));
  const env: Record<string, string> = {
    DATABASE_URL: databaseUrl,
    REDIS_URL: cluster.url,
    FLEET_PREFIX: prefix,
    FLEET_TOOL_DIR: toolDir,
    LOG_LEVEL: "warn",
    METRICS_PORT: "0",
    HOST: "127.0.0.1",
    WORKER_CONCURRENCY: String(Math.ceil(sessions / workers / 2)),
  };
  cleanup.add("stop the fleet", () => Promise.all(children.map((c) => stopChild(c, "SIGKILL"))));
  const api = await spawnUntilReady([FLEET_BIN, "api", "--port", "0"], env, /fleet api ready: (\S+)/);
  children.push(api);
  // The sweeper at info: what it decides about runs (crashed, stalled) shows in its output.
  const sweeper = await spawnUntilReady(
    [FLEET_BIN, "sweeper"],
    { ...env, LOG_LEVEL: "info" },
    /fleet sweeper ready/,
  );
  children.push(sweeper);
  const workerIds: string[] = [];
  for (let i = 0; i < workers; i++) {
    const worker = await spawnFleetWorker(env);
    children.push(worker);
    workerIds.push(worker.workerId);
  }
  const liveness = new LivenessWatch(cluster.url, ports, prefix);
  cleanup.add("stop the liveness watch", () => liveness.stop());
  liveness.start();
  const logged = () => children.map((c) => c.output().length);

  const fleetShard = await cluster.shardOf(prefix);
  const shards = await cluster.shards();
  const victim: Shard = target === "fleet" ? fleetShard : shards.find((s) => s.master !== fleetShard.master)!;
  console.log(
    `failover bench: ${scenario} of master ${victim.master} (${target === "fleet" ? "holds" : "does not hold"} the fleet's slot; replica ${victim.replica}), ${sessions} sessions, ${workers} workers`,
  );

  const sql = postgres(databaseUrl, { max: 2, onnotice: () => {} });
  cleanup.add("close postgres", () => sql.end());
  const client = new FleetClient({ baseUrl: api.ready[1]! });
  const batch = await client.createBatch(
    Array.from({ length: sessions }, (_, i) => ({ agent: agent(i), metadata: { i }, input: `go ${i}` })),
  );
  const started = Date.now();
  const samples: Sample[] = [];
  let apiFailures = 0;
  let lastApiOk = Date.now();
  let longestApiGap = 0;
  let faultAt = 0;
  let promotedMs = -1;
  let logsAtFault: number[] = [];
  let done = false;
  const fault = async () => {
    faultAt = Date.now();
    logsAtFault = logged();
    if (scenario === "kill") {
      cluster.kill(victim.master);
      promotedMs = await cluster.promoted(victim.replica);
      await sleep(5_000);
      await cluster.restart(victim.master);
    } else if (scenario === "failover") {
      await cli(victim.replica, "cluster", "failover");
      promotedMs = await cluster.promoted(victim.replica);
    } else {
      cluster.freeze(victim.master);
      promotedMs = await cluster.promoted(victim.replica);
      await sleep(Math.max(0, freezeMs - (Date.now() - faultAt)));
      cluster.thaw(victim.master);
    }
  };
  let faulting: Promise<void> | null = null;
  while (!done) {
    const [row] = await sql<{ messages: number; completed: number }[]>`
      select (select count(*)::int from messages) as messages,
             (select count(*)::int from sessions where tail_state = 'completed' or status = 'parked') as completed`;
    samples.push({ at: Date.now(), messages: row!.messages, completed: row!.completed });
    if (!faulting && row!.completed >= sessions / 4) faulting = fault();
    try {
      const status = await client.getBatch(batch.id);
      longestApiGap = Math.max(longestApiGap, Date.now() - lastApiOk);
      lastApiOk = Date.now();
      done = status.status !== "running";
    } catch {
      apiFailures += 1;
    }
    if (Date.now() - started > 240_000) {
      console.log("the batch did not end within 240 s");
      break;
    }
    await sleep(100);
  }
  // When the batch ended, not when the fault's script did (a killed master is restarted 5 s
  // after its replica's promotion, a frozen one resumed after --freeze-ms).
  const elapsed = Date.now() - started;
  await faulting;
  await liveness.stop();
  await report({
    sql,
    samples,
    faultAt,
    promotedMs,
    apiFailures,
    longestApiGap,
    elapsed,
    toolDir,
    prefix,
    logsAtFault,
    databaseUrl,
  });
  for (const line of liveness.report(workerIds, faultAt)) console.log(line);
  for (const [k, child] of children.entries())
    if (child.child.exitCode !== null || child.child.signalCode !== null)
      console.log(
        `${k < 2 ? ["api", "sweeper"][k] : `worker ${k - 2}`} EXITED (${child.child.exitCode ?? child.child.signalCode}):\n${child.output().slice(-2_000)}`,
      );
  const redis = createRedis(cluster.url, "producer");
  cleanup.add("close redis", () => closeRedis(redis));
  cleanup.add(`delete ${prefix}:*`, () => deleteKeys(redis, `${prefix}:*`));
}

async function report(r: {
  sql: postgres.Sql;
  samples: Sample[];
  faultAt: number;
  promotedMs: number;
  apiFailures: number;
  longestApiGap: number;
  elapsed: number;
  toolDir: string;
  prefix: string;
  databaseUrl: string;
  logsAtFault: number[];
}): Promise<void> {
  const { sql, samples, faultAt } = r;
  // The longest stretch after the fault with no message committed, and when work went on.
  let longest = 0;
  let firstProgress = -1;
  for (let i = 1; i < samples.length; i++) {
    const s = samples[i]!;
    if (s.at < faultAt) continue;
    if (firstProgress < 0 && s.messages > samples.find((x) => x.at >= faultAt)!.messages)
      firstProgress = s.at - faultAt;
  }
  let since = faultAt;
  let count = samples.find((x) => x.at >= faultAt)?.messages ?? 0;
  for (const s of samples) {
    if (s.at < faultAt) continue;
    if (s.messages > count) {
      longest = Math.max(longest, s.at - since);
      since = s.at;
      count = s.messages;
    }
  }
  const statuses = await sql<
    { status: string; tail_state: string; parked_reason: string | null; n: number }[]
  >`
    select status, tail_state, parked_reason, count(*)::int as n from sessions group by 1, 2, 3 order by 1, 2`;
  const outcomes = await sql<{ kind: string; outcome: string; n: number }[]>`
    select kind, coalesce(ended_reason, status) as outcome, count(*)::int as n from runs group by 1, 2 order by 1, 2`;
  const gaps = await sql<{ n: number }[]>`
    select count(*)::int as n from (select session_id from messages group by 1
      having count(*) <> max(seq) or count(distinct seq) <> count(*) or min(seq) <> 1) g`;
  const twice = await sql<{ n: number }[]>`
    select count(*)::int as n from (select session_id, tool_call_id from messages where role = 'tool'
      group by 1, 2 having count(*) > 1) d`;
  const ids = await sql<{ id: string; i: number; last_seq: number }[]>`
    select id, (metadata->>'i')::int as i, last_seq from sessions`;
  let appendsWrong = 0;
  for (const { i } of ids) {
    const text = await readFile(join(r.toolDir, "s", `${i}.log`), "utf8").catch(() => "");
    if (text !== "first\nsecond\n") appendsWrong += 1;
  }
  const redis = createRedis(cluster.url, "producer");
  // What a reader gets: the API, opening a stream, first writes the RUN_COMPLETED (after the
  // stored messages) that a writer who lost Redis at the end of a run could not.
  const database = openDatabase(r.databaseUrl, { max: 2 });
  const writer = new EventWriter(redis, r.prefix);
  let streamsWrong = 0;
  let repaired = 0;
  const streamKinds = new Map<string, number>();
  try {
    for (const { id, last_seq } of ids) {
      if (await writer.missingRunEnd(database, id, 0)) repaired += 1;
      const rows = (await redis.xrange(eventStreamKey(r.prefix, id), "-", "+")) as [string, string[]][];
      const seqs = rows
        .filter(([, f]) => f[f.indexOf("type") + 1] === "MESSAGE")
        .map(
          ([, f]) =>
            (JSON.parse(f[f.indexOf("data") + 1] ?? "{}") as { message?: { seq?: number } }).message?.seq,
        );
      if (seqs.length !== last_seq || seqs.some((seq, k) => seq !== k + 1)) {
        streamsWrong += 1;
        const types = rows.map(([, f]) => f[f.indexOf("type") + 1]![0]).join("");
        const kind = rows.length === 0 ? "gone" : `${seqs.join(",")} of ${last_seq}; ${types}`;
        streamKinds.set(kind, (streamKinds.get(kind) ?? 0) + 1);
      }
    }
  } finally {
    await closeRedis(redis);
    await database.close();
  }
  const warnings = children.map((c, k) =>
    c
      .output()
      .slice(r.logsAtFault[k] ?? 0)
      .split("\n")
      .filter((l) => l.trim() !== ""),
  );
  const roles = ["api", "sweeper", ...Array.from({ length: workers }, (_, k) => `worker ${k}`)];
  console.log(`
── ${scenario} (${target}) ──────────────────────────────
replica promoted       ${r.promotedMs} ms after the fault (node timeout ${NODE_TIMEOUT_MS} ms)
first commit after     ${firstProgress} ms
longest pause after    ${longest} ms with no message committed
API polls failed       ${r.apiFailures} (longest gap between answers ${r.longestApiGap} ms)
batch ended after      ${(r.elapsed / 1000).toFixed(1)} s
sessions               ${statuses.map((s) => `${s.status}/${s.tail_state}${s.parked_reason ? `(${s.parked_reason})` : ""}=${s.n}`).join(", ")}
runs                   ${outcomes.map((o) => `${o.kind}:${o.outcome}=${o.n}`).join(", ")}
seq not contiguous     ${gaps[0]!.n} sessions
tool answered twice    ${twice[0]!.n}
append lines wrong     ${appendsWrong} sessions (each file must be "first", "second")
streams repaired       ${repaired} sessions by a reader's look (RUN_COMPLETED and the messages before it)
event stream wrong     ${streamsWrong} sessions (MESSAGE seqs not exactly 1..last_seq)${[...streamKinds]
    .slice(0, 5)
    .map(([k, n]) => `\n  ${n}× ${k}`)
    .join("")}`);
  for (const [k, lines] of warnings.entries()) {
    if (lines.length === 0) continue;
    const kinds = new Map<string, number>();
    for (const line of lines) {
      let key = line.slice(0, 160);
      try {
        const entry = JSON.parse(line) as { msg?: string; err?: { message?: string } | string };
        const err = typeof entry.err === "string" ? entry.err : entry.err?.message;
        key = `${entry.msg ?? ""}${err ? ` [${err.slice(0, 90)}]` : ""}`;
      } catch {}
      key = key.replace(/[0-9a-f]{8}-[0-9a-f-]{27}/g, "…");
      kinds.set(key, (kinds.get(key) ?? 0) + 1);
    }
    console.log(`${roles[k]} logged ${lines.length} lines after the fault:`);
    for (const [key, n] of kinds) console.log(`  ${n}× ${key}`);
  }
}

main()
  .catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(() => cleanup.run());
