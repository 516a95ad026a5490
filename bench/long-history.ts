/**
 * `npm run bench:long -- --messages 5000,50000 --runs 4`: what one run costs a
 * worker when its session already holds a long history.
 *
 * For each size: a scratch database and FLEET_PREFIX, the real HTTP API in this process and
 * one `fleet worker` child process. A session is created through the API, then its history is
 * written straight into Postgres (user → assistant asking a `sleep` tool → its result →
 * assistant answer with usage, repeated; 300-character texts). Then --runs messages are sent
 * one after another; each run's scripted model asks for two `sleep {ms: 0}` calls and then
 * answers, so a run appends 1 user + 1 assistant + 2 results + 1 answer. The first run also
 * replays the imported history into the session's event stream (contracts §7).
 *
 * Printed per run: the run's time in Postgres (runs.started_at → ended_at), the time from
 * POST /messages to the run's end as seen here, the worker's CPU time for it (user + system,
 * until 300 ms after its end: less noisy than times on a shared machine) and RSS after it; then the time of
 * GET /v1/sessions/:id/resume-point and the worker's peak RSS. `--profile DIR` writes a V8
 * CPU profile of the worker (`node --cpu-prof`) into DIR.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { Redis } from "ioredis";
import postgres from "postgres";
import { startApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import {
  benchOptions,
  Cleanup,
  cpuSeconds,
  fmt,
  REDIS_URL,
  scratchFleet,
  sleep,
  spawnFleetWorker,
  stopChild,
  usage,
} from "./support.js";

const values = benchOptions({
  messages: { type: "string", default: "5000,50000" },
  runs: { type: "string", default: "4" },
  profile: { type: "string" },
  /** What the scratch database's name and the FLEET_PREFIX start with. */
  name: { type: "string", default: "bench" },
});
const SIZES = values.messages.split(",").map((s) => {
  const n = Number(s.replace(/_/g, ""));
  if (!Number.isInteger(n) || n < 4 || n % 4 !== 0) usage(`--messages: ${s} is not a positive multiple of 4`);
  return n;
});
const RUNS = Number(values.runs);
const NODE_ARGS = values.profile ? ["--cpu-prof", `--cpu-prof-dir=${resolve(values.profile)}`] : [];
const TEXT = "lorem ipsum dolor sit amet ".repeat(12).slice(0, 300);

/** kB of the process's VmRSS / VmHWM. */
function memory(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
  return { rss: kb("VmRSS"), peak: kb("VmHWM") };
}

/** MB of the V8 heap in use, from the worker's /metrics (fleet_process_nodejs_heap_size_used_bytes). */
async function heapUsed(readyLine: string): Promise<number> {
  const port = /metrics on port (\d+)/.exec(readyLine)?.[1];
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return (
    Number(/^fleet_process_nodejs_heap_size_used_bytes(?:{[^}]*})? (\S+)/m.exec(text)?.[1] ?? Number.NaN) /
    1e6
  );
}

async function one(cleanup: Cleanup, redis: Redis, size: number): Promise<void> {
  const { databaseUrl, env, config } = await scratchFleet(cleanup, redis, "long", 4, {
    database: `fleet_${values.name}`,
    prefix: values.name,
  });
  const worker = await spawnFleetWorker(env, NODE_ARGS);
  cleanup.add("stop the worker", () => stopChild(worker, "SIGTERM"));
  const api = await startApi(config, { port: 0 });
  cleanup.add("stop the API", () => api.stop());
  const sql = postgres(databaseUrl, { max: 2, onnotice: () => {} });
  cleanup.add("close Postgres", () => sql.end());
  const client = new FleetClient({ baseUrl: api.url });
  // The scripted model answers step k with steps[k], k = assistant messages so far: the
  // history's steps get empty ones, and each run's two steps follow.
  const pad = size / 2;
  const steps: unknown[] = Array.from({ length: pad }, () => ({}));
  for (let r = 0; r < RUNS; r++)
    steps.push(
      {
        toolCalls: [
          { name: "sleep", arguments: { ms: 0 } },
          { name: "sleep", arguments: { ms: 0 } },
        ],
      },
      { text: `answer ${r}` },
    );
  const { id } = await client.createSession({
    agent: { model: { provider: "scripted", steps: [{ text: "x" }] }, tools: ["sleep"] },
  });
  const seeded = performance.now();
  await sql.begin(async (tx) => {
    await tx`update sessions set agent = jsonb_set(agent, '{model,steps}', ${tx.json(steps as never)}) where id = ${id}`;
    await tx`
      insert into messages (session_id, seq, role, content, tool_calls, tool_call_id, call_seq, name, success, stop_reason, usage)
      select ${id}, i,
        case i % 4 when 1 then 'user' when 2 then 'assistant' when 3 then 'tool' else 'assistant' end,
        ${TEXT} || i,
        case i % 4 when 2 then jsonb_build_array(jsonb_build_object('id', 'c' || i, 'name', 'sleep', 'arguments', '{"ms":0}'::jsonb)) end,
        case i % 4 when 3 then 'c' || (i - 1) end,
        case i % 4 when 3 then i - 1 end,
        case i % 4 when 3 then 'sleep' end,
        case i % 4 when 3 then true end,
        case i % 4 when 2 then 'tool_use' when 0 then 'end_turn' end,
        case i % 4 when 0 then '{"inputTokens":100,"outputTokens":20}'::jsonb end
      from generate_series(1, ${size}) i`;
    await tx`update sessions set last_seq = ${size}, tail_state = 'completed' where id = ${id}`;
  });
  console.log(
    `\n${size} messages seeded in ${fmt(performance.now() - seeded)} ms; worker RSS ${fmt(memory(worker.child.pid!).rss / 1024)} MB`,
  );
  for (let r = 0; r < RUNS; r++) {
    const cpuBefore = cpuSeconds(worker.child.pid!);
    const sent = performance.now();
    const { runId } = await client.send(id, `message ${r}`);
    let row: { status: string; ended_reason: string | null; ms: number | null } | undefined;
    for (;;) {
      [row] = await sql<{ status: string; ended_reason: string | null; ms: number | null }[]>`
        select status, ended_reason,
               extract(epoch from (ended_at - started_at)) * 1000 as ms from runs where id = ${runId}`;
      if (row?.status === "ended") break;
      await sleep(5);
    }
    const seen = performance.now() - sent;
    // The job may still be finishing (its event writes): its CPU is counted when settled.
    await sleep(300);
    const cpu = (cpuSeconds(worker.child.pid!) - cpuBefore) * 1000;
    const mem = memory(worker.child.pid!);
    const heap = await heapUsed(worker.ready[0]);
    console.log(
      `run ${r + 1}: ${row!.ended_reason}, ${fmt(Number(row!.ms))} ms in Postgres, ${fmt(seen)} ms from POST to end, worker CPU ${fmt(cpu, 0)} ms, RSS ${fmt(mem.rss / 1024)} MB, heap used ${fmt(heap)} MB`,
    );
  }
  for (let i = 0; i < 3; i++) {
    const asked = performance.now();
    const point = await client.resumePoint(id);
    console.log(
      `resume-point: ${fmt(performance.now() - asked)} ms (${point.resumable ? point.kind : point.reason})`,
    );
  }
  console.log(`worker peak RSS ${fmt(memory(worker.child.pid!).peak / 1024)} MB`);
}

const cleanup = new Cleanup();
const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
cleanup.add("close Redis", async () => redis.disconnect());
try {
  for (const size of SIZES) {
    const each = new Cleanup();
    try {
      await one(each, redis, size);
    } finally {
      await each.run();
    }
  }
} finally {
  await cleanup.run();
}
