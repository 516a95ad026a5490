/**
 * `npm run bench:big-bodies -- --big 4 --seconds 10`: what big request bodies cost everyone
 * else on one API process.
 *
 * A scratch database and FLEET_PREFIX, one `fleet api` child process (bench/loop-probe.mjs
 * preloaded: its event loop's delay, and its peak RSS). Small requests — `GET /v1/sessions/:id`
 * of a 4-message session and `GET /healthz`, one every --small-every-ms — are timed alone,
 * then while --big senders each send big bodies one after another, for --seconds a phase. The
 * big bodies are the largest the limits allow (just under 16 MiB each), in three shapes:
 *
 * - `session`: `POST /v1/sessions` importing 10,000 messages;
 * - `history`: `POST /v1/sessions/:id/history`, a page of 10,000 messages (on a new session);
 * - `batch`: `POST /v1/batches`, 1,000 sessions of 50 messages (50,000 in all).
 *
 * Printed per phase: the small requests' latency p50 / p99 / max, the API's longest event
 * loop stall (monitorEventLoopDelay max) and p99, the big bodies answered and their statuses,
 * and the API's peak RSS. Then, in this process, where one body of each shape spends its
 * CPU: JSON.parse, the body walk (checkBody), the zod schema, our checks (agent, messages),
 * and the store call (rows, JSON.stringify, postgres.js, the round trip). `--profile DIR`
 * writes the API's V8 CPU profile (`node --cpu-prof`) into DIR. BENCH_FLEET_BIN runs another
 * checkout's `bin/fleet.js` as the API (a before/after comparison on one machine).
 */
import { once } from "node:events";
import { resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { Redis } from "ioredis";
import { FleetService } from "../src/producer/fleet-service.js";
import { batchBody, createBody, importPageBody, parseBody } from "../src/producer/request-bodies.js";
import { checkBody, parseJsonBody } from "../src/producer/request-checks.js";
import { BODY_LIMIT } from "../src/producer/request-limits.js";
import { openDatabase } from "../src/shared/db/client.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import {
  benchOptions,
  Cleanup,
  FLEET_BIN,
  fmt,
  percentile,
  REDIS_URL,
  type ReadyChild,
  scratchFleet,
  sleep,
  spawnUntilReady,
  stopChild,
  table,
  usage,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  big: { type: "string", default: "4" },
  seconds: { type: "string", default: "10" },
  "small-every-ms": { type: "string", default: "20" },
  shapes: { type: "string", default: "session,history,batch" },
  profile: { type: "string" },
});
const BIG = wholeNumber("big", values.big);
const PHASE_MS = wholeNumber("seconds", values.seconds) * 1000;
const SMALL_EVERY_MS = wholeNumber("small-every-ms", values["small-every-ms"]);
const SHAPES = values.shapes.split(",");
for (const shape of SHAPES)
  if (!["session", "history", "batch"].includes(shape)) usage(`--shapes: unknown shape ${shape}`);

const AGENT = { model: { provider: "scripted", steps: [{ text: "x" }] }, tools: [] };

/** `n` messages (a multiple of 4): a question, a step asking a tool, its result, an answer, each with `text`. */
function history(n: number, text: string, tag: string): unknown[] {
  const out: unknown[] = [];
  for (let i = 0; i < n; i += 4) {
    out.push(
      { role: "user", content: `${i} ${text}` },
      {
        role: "assistant",
        content: text,
        toolCalls: [{ id: `${tag}c${i}`, name: "write_file", arguments: { path: `${i}.txt`, text } }],
        stopReason: "tool_use",
        usage: { inputTokens: 10, outputTokens: 1 },
      },
      { role: "tool", toolCallId: `${tag}c${i}`, name: "write_file", content: text, success: true },
      {
        role: "assistant",
        content: text,
        stopReason: "end_turn",
        usage: { inputTokens: 20, outputTokens: 2 },
      },
    );
  }
  return out;
}

/** The longest text for which `build(text)` stays under BODY_LIMIT (less 64 KiB of slack). */
function largest(build: (text: string) => unknown): Buffer {
  let low = 1;
  let high = 4096;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    if (Buffer.byteLength(JSON.stringify(build("x".repeat(mid)))) <= BODY_LIMIT - 65_536) low = mid;
    else high = mid - 1;
  }
  return Buffer.from(JSON.stringify(build("x".repeat(low))));
}

const BODIES: Record<string, Buffer> = {
  session: largest((text) => ({ agent: AGENT, messages: history(10_000, text, "") })),
  history: largest((text) => ({ afterSeq: 0, messages: history(10_000, text, "") })),
  batch: largest((text) => ({
    sessions: Array.from({ length: 1_000 }, () => ({ agent: AGENT, messages: history(48, text, "") })),
  })),
};

type Api = { url: string; child: ReadyChild };

async function post(url: string, body: Buffer | string): Promise<{ status: number; json: unknown }> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : undefined };
}

/** Sends `shape`'s body over and over until `stop`; the statuses answered. */
async function bigSender(
  api: Api,
  shape: string,
  stop: { done: boolean },
  statuses: number[],
): Promise<void> {
  while (!stop.done) {
    let path = "/v1/sessions";
    if (shape === "batch") path = "/v1/batches";
    if (shape === "history") {
      const created = await post(`${api.url}/v1/sessions`, JSON.stringify({ agent: AGENT }));
      path = `/v1/sessions/${(created.json as { id: string }).id}/history`;
    }
    const { status } = await post(`${api.url}${path}`, BODIES[shape]!);
    statuses.push(status);
  }
}

/**
 * Small requests, one every SMALL_EVERY_MS (not waiting for each other), until `stop`: their
 * latencies, and how many were not answered 200 (a `/healthz` whose checks wait past 2 s is a 503).
 */
async function smallRequests(
  api: Api,
  sessionId: string,
  stop: { done: boolean },
): Promise<{ latencies: number[]; failed: number }> {
  const latencies: number[] = [];
  let failed = 0;
  const pending: Promise<void>[] = [];
  for (let i = 0; !stop.done; i++) {
    const path = i % 2 === 0 ? `/v1/sessions/${sessionId}` : "/healthz";
    const started = performance.now();
    pending.push(
      fetch(`${api.url}${path}`).then(async (response) => {
        await response.arrayBuffer();
        if (response.status !== 200) failed++;
        latencies.push(performance.now() - started);
      }),
    );
    await sleep(SMALL_EVERY_MS);
  }
  await Promise.all(pending);
  return { latencies, failed };
}

/** The API's loop delay and peak RSS since the last call (bench/loop-probe.mjs). */
async function loopDelay(api: Api): Promise<{ p50: number; p99: number; max: number; peakRssMb: number }> {
  const before = api.child.output().length;
  api.child.child.kill("SIGUSR2");
  for (;;) {
    const match = /loop-delay (\{.*\})\n/.exec(api.child.output().slice(before));
    if (match) return JSON.parse(match[1]!);
    await sleep(20);
  }
}

async function phase(api: Api, sessionId: string, shape: string | null): Promise<string[]> {
  await loopDelay(api);
  const stop = { done: false };
  const statuses: number[] = [];
  const senders = shape ? Array.from({ length: BIG }, () => bigSender(api, shape, stop, statuses)) : [];
  const small = smallRequests(api, sessionId, stop);
  await sleep(PHASE_MS);
  stop.done = true;
  const [{ latencies, failed }] = await Promise.all([small, ...senders]);
  const loop = await loopDelay(api);
  const counts = new Map<number, number>();
  for (const status of statuses) counts.set(status, (counts.get(status) ?? 0) + 1);
  return [
    shape ? `${BIG} × ${shape}` : "none",
    `${latencies.length}${failed ? ` (${failed} not 200)` : ""}`,
    fmt(percentile(latencies, 50)),
    fmt(percentile(latencies, 99)),
    fmt(Math.max(...latencies)),
    fmt(loop.max),
    fmt(loop.p99),
    [...counts].map(([status, n]) => `${n}×${status}`).join(" ") || "-",
    String(loop.peakRssMb),
  ];
}

/** Where one body of `shape` spends its CPU, stage by stage, in this process. */
async function stages(queries: SessionQueries, service: FleetService, shape: string): Promise<string[]> {
  const times: number[] = [];
  const time = async <T>(fn: () => T | Promise<T>): Promise<T> => {
    const started = performance.now();
    const result = await fn();
    times.push(performance.now() - started);
    return result;
  };
  const body = BODIES[shape]!;
  const text = await time(() => body.toString("utf8"));
  const parsed = await time(() => parseJsonBody(text));
  await time(() => checkBody(parsed));
  const schema = shape === "batch" ? batchBody : shape === "history" ? importPageBody : createBody;
  await time(() => parseBody(schema as never, parsed));
  // The whole service call: zod again, our checks, the rows, the statement, the round trip.
  let id = "";
  if (shape === "history")
    id = (await queries.createSession({ agent: AGENT as never, tenant: "default" })).id;
  await time<unknown>(() =>
    shape === "batch"
      ? service.createBatch("default", parsed)
      : shape === "history"
        ? service.importMessages("default", id, parsed)
        : service.createSession("default", parsed),
  );
  return [shape, fmt(body.length / 2 ** 20, 2), ...times.map((t) => fmt(t, 0))];
}

async function main(): Promise<void> {
  const cleanup = new Cleanup();
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  cleanup.add("close Redis", () => redis.quit());
  try {
    const { env, config } = await scratchFleet(cleanup, redis, "bigbody", 1);
    const nodeArgs = ["--import", resolve(import.meta.dirname, "loop-probe.mjs")];
    if (values.profile) nodeArgs.push("--cpu-prof", `--cpu-prof-dir=${resolve(values.profile)}`);
    const child = await spawnUntilReady(
      [...nodeArgs, process.env.BENCH_FLEET_BIN ?? FLEET_BIN, "api"],
      { ...env, PORT: "0", HOST: "127.0.0.1" },
      /fleet api ready: (\S+)/,
    );
    cleanup.add("stop the API", () => stopChild(child, "SIGTERM"));
    const api = { url: child.ready[1]!, child };
    const created = await post(
      `${api.url}/v1/sessions`,
      JSON.stringify({ agent: AGENT, messages: history(4, "small", "") }),
    );
    const sessionId = (created.json as { id: string }).id;
    console.log(
      `bodies: ${Object.entries(BODIES)
        .map(([shape, body]) => `${shape} ${fmt(body.length / 2 ** 20, 2)} MiB`)
        .join(", ")}; small requests every ${SMALL_EVERY_MS} ms, ${PHASE_MS / 1000} s a phase`,
    );
    const rows = [
      ["big bodies", "small", "p50 ms", "p99 ms", "max ms", "loop max", "loop p99", "big answered", "RSS MB"],
    ];
    for (const shape of SHAPES) {
      rows.push(await phase(api, sessionId, null));
      rows.push(await phase(api, sessionId, shape));
    }
    console.log(table(rows));
    const database = openDatabase(config.databaseUrl, { max: 2 });
    cleanup.add("close the database", () => database.close());
    const queries = new SessionQueries(database);
    const service = new FleetService({
      queries,
      toolNames: { known: async () => new Set<string>() },
      models: config.models,
      metrics: undefined,
    } as never);
    const stageRows = [["shape", "MiB", "toString", "JSON.parse", "checkBody", "zod body", "service call"]];
    for (const shape of SHAPES) stageRows.push(await stages(queries, service, shape));
    console.log(`\none body in this process, ms:\n${table(stageRows)}`);
    if (values.profile) {
      child.child.kill("SIGTERM");
      await once(child.child, "exit");
      console.log(`CPU profile of the API in ${resolve(values.profile)}`);
    }
  } finally {
    await cleanup.run();
  }
}

await main();
