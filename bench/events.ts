/**
 * `npm run bench:events`: what session events (contracts §7) cost and carry, in one run.
 *
 * 1. Fan-out: the real API in this process and --clients SSE clients (default 100), each
 *    following one of --streams sessions; an EventWriter in this process writes --events
 *    events into those sessions' streams as fast as it can. Reported: events written per
 *    second, and events delivered per second to all clients together (from the first write
 *    to the last client's last event), with the delivery lag p50/p95.
 * 2. Session throughput with events on and off: the same scripted sessions (user → tool call
 *    → result → answer) through W `fleet worker` processes, once with FLEET_EVENTS=on and
 *    once with FLEET_EVENTS=off, each on a scratch database and prefix of its own.
 *
 *   npm run bench:events -- --clients 100 --streams 10 --events 20000 --sessions 400 --workers 2
 */
import { Redis } from "ioredis";
import { startApi } from "../src/producer/api-server.js";
import { FleetClient, parseSse } from "../src/producer/client.js";
import { openDatabase } from "../src/shared/db/client.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { benchAgent } from "./producer.js";
import {
  benchOptions,
  Cleanup,
  fmt,
  inPool,
  percentile,
  REDIS_URL,
  scratchFleet,
  spawnFleetWorker,
  stopChild,
  table,
  waitUntil,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  clients: { type: "string", default: "100" },
  streams: { type: "string", default: "10" },
  events: { type: "string", default: "20000" },
  sessions: { type: "string", default: "400" },
  workers: { type: "string", default: "2" },
  concurrency: { type: "string", default: "16" },
});
const CLIENTS = wholeNumber("clients", values.clients);
const STREAMS = wholeNumber("streams", values.streams);
const EVENTS = wholeNumber("events", values.events);
const SESSIONS = wholeNumber("sessions", values.sessions);
const WORKERS = wholeNumber("workers", values.workers);
const CONCURRENCY = wholeNumber("concurrency", values.concurrency);

const cleanup = new Cleanup();
const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
cleanup.add("close Redis", async () => redis.disconnect());

async function fanOut(): Promise<string[][]> {
  const { config } = await scratchFleet(cleanup, redis, "evfan", 8);
  const api = await startApi(
    { ...config, events: { ...config.events, maxStreamsPerTenant: CLIENTS } },
    { port: 0 },
  );
  cleanup.add("stop the API", () => api.stop());
  const client = new FleetClient({ baseUrl: api.url });
  const sessions: string[] = [];
  for (let i = 0; i < STREAMS; i++)
    sessions.push(
      (await client.createSession({ agent: { model: { provider: "scripted", steps: [{ text: "x" }] } } })).id,
    );
  const perStream = Math.floor(EVENTS / STREAMS);
  const writtenAt = new Map<string, number>();
  const lags: number[] = [];
  let delivered = 0;
  let lastDelivery = 0;
  const controller = new AbortController();
  const readers = Array.from({ length: CLIENTS }, async (_, c) => {
    const sessionId = sessions[c % STREAMS]!;
    const response = await fetch(`${api.url}/v1/sessions/${sessionId}/events?after=0-0`, {
      signal: controller.signal,
    });
    let got = 0;
    try {
      for await (const event of parseSse(response.body as AsyncIterable<Uint8Array>)) {
        if (!event.data) continue;
        const sent = writtenAt.get(JSON.parse(event.data).reason as string);
        const now = performance.now();
        if (sent !== undefined && got % 10 === 0) lags.push(now - sent);
        delivered++;
        lastDelivery = now;
        if (++got >= perStream) break;
      }
    } catch {
      // aborted
    }
  });
  await new Promise((r) => setTimeout(r, 500));
  const writer = new EventWriter(redis, config.prefix, { maxEvents: 100_000, maxAgeMs: 3_600_000 });
  const start = performance.now();
  await inPool(
    Array.from({ length: STREAMS }, (_, s) => s),
    STREAMS,
    async (s) => {
      for (let i = 0; i < perStream; i++) {
        const reason = `${s}-${i}`;
        writtenAt.set(reason, performance.now());
        await writer.write(sessions[s]!, [], [{ type: "SESSION_PARKED", reason }]);
      }
    },
  );
  const writeSeconds = (performance.now() - start) / 1000;
  const deadline = Date.now() + 120_000;
  while (delivered < perStream * CLIENTS && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 50));
  controller.abort();
  await Promise.all(readers);
  const deliverSeconds = (lastDelivery - start) / 1000;
  lags.sort((a, b) => a - b);
  return [
    ["fan-out", "value"],
    ["SSE clients", String(CLIENTS)],
    ["streams (sessions)", String(STREAMS)],
    ["events written", String(perStream * STREAMS)],
    ["written / s", fmt((perStream * STREAMS) / writeSeconds, 0)],
    ["delivered (all clients)", `${delivered} of ${perStream * CLIENTS}`],
    ["delivered / s", fmt(delivered / deliverSeconds, 0)],
    ["lag p50 / p95 (ms)", `${fmt(percentile(lags, 50))} / ${fmt(percentile(lags, 95))}`],
  ];
}

async function throughput(events: "on" | "off"): Promise<number> {
  const { env, databaseUrl, config } = await scratchFleet(cleanup, redis, `ev${events}`, CONCURRENCY);
  const workerEnv = { ...env, FLEET_EVENTS: events };
  const workers = await Promise.all(Array.from({ length: WORKERS }, () => spawnFleetWorker(workerEnv)));
  const api = await startApi(
    { ...config, events: { ...config.events, enabled: events === "on" } },
    { port: 0 },
  );
  const client = new FleetClient({ baseUrl: api.url });
  const database = openDatabase(databaseUrl, { max: 2 });
  try {
    const agentOf = (i: number) => benchAgent(i, "done");
    const start = performance.now();
    const indexes = Array.from({ length: SESSIONS }, (_, i) => i);
    const batches: number[][] = [];
    for (let i = 0; i < indexes.length; i += 50) batches.push(indexes.slice(i, i + 50));
    await inPool(batches, 8, (batch) =>
      client.createBatch(batch.map((i) => ({ agent: agentOf(i), input: `session ${i}` }))),
    );
    await waitUntil(
      async () => {
        const [row] = await database.sql<{ n: number }[]>`
          select count(*)::int as n from runs where status = 'ended'`;
        return row!.n >= SESSIONS;
      },
      300_000,
      "every run ended",
      50,
    );
    const [last] = await database.sql<{ t: string }[]>`select max(ended_at) as t from runs`;
    const seconds = (new Date(last!.t).getTime() - (performance.timeOrigin + start)) / 1000;
    return SESSIONS / seconds;
  } finally {
    await database.close();
    await api.stop();
    for (const worker of workers) await stopChild(worker, "SIGTERM");
  }
}

try {
  console.log(table(await fanOut()));
  console.log("");
  const on = await throughput("on");
  const off = await throughput("off");
  console.log(
    table([
      ["session throughput", "sessions/s"],
      ["events on", fmt(on)],
      ["events off", fmt(off)],
      ["on / off", fmt(on / off, 2)],
    ]),
  );
  console.log(`(${SESSIONS} sessions, ${WORKERS} workers × ${CONCURRENCY} slots, 4 messages each)`);
} finally {
  await cleanup.run();
}
