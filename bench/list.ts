/**
 * `npm run bench:list`: the operator's parked list (`GET /v1/sessions?status=parked`) on a
 * database of 1,000,000 sessions (`--sessions N`), through the real HTTP API in this process.
 *
 * Seeding is one generate_series INSERT into a scratch database migrated as a fleet's is
 * (every index in place), then VACUUM ANALYZE and a CHECKPOINT: --parked (default 0.5 %) of them parked, spread over
 * --tenants tenants (the default tenant gets its share), the rest completed or active; about
 * a fifth belong to batches. The API runs as it is deployed: `fleet api` in a process of its
 * own. This process is the client: one keep-alive connection (node:http), a request at a time.
 * It times the API's first 500 requests as they come (the cold line: a fresh process runs
 * unoptimised code for its first few thousand), then, after --warmup requests (default 5,000,
 * a few seconds of traffic): the first page (50) of the default tenant's parked list, the page
 * after it (cursor), the list filtered by a parked reason, and — for comparison — the first
 * page of the whole list (no filter) and this machine's floor (the same client against a bare
 * Node HTTP server answering `{}`, also in a process of its own). Printed: p50 / p99 / max of
 * each over --requests requests, the rows each page returned, and the plan Postgres chose for
 * the parked page; then the store's part alone (SessionQueries in this process) and the
 * sweeper's attention scan on the same database (2 % of the sessions are mid-run) and its
 * plan. No assertion: the aim (≤ 5 ms) is a figure to read.
 *
 *   npm run bench:list -- --sessions 1000000 --requests 500
 */
import { Agent, get } from "node:http";
import { Redis } from "ioredis";
import postgres from "postgres";
import { openDatabase } from "../src/shared/db/client.js";
import { DEFAULT_TENANT } from "../src/shared/store/api-keys.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { SweepQueries } from "../src/sweeper/sweep-queries.js";
import {
  benchOptions,
  Cleanup,
  FLEET_BIN,
  fmt,
  percentile,
  REDIS_URL,
  scratchFleet,
  spawnUntilReady,
  stopChild,
  table,
  wholeNumber,
} from "./support.js";

const values = benchOptions({
  sessions: { type: "string", default: "1000000" },
  parked: { type: "string", default: "0.005" },
  tenants: { type: "string", default: "20" },
  requests: { type: "string", default: "500" },
  /** Requests the API serves before the timed lines (the cold line's not counted). */
  warmup: { type: "string", default: "5000" },
});
const SESSIONS = wholeNumber("sessions", values.sessions);
const PARKED = Number(values.parked);
const TENANTS = wholeNumber("tenants", values.tenants);
const REQUESTS = wholeNumber("requests", values.requests);
const WARMUP = wholeNumber("warmup", values.warmup, 0);
/** The cold line: the API's first requests after it started. */
const COLD = Math.min(REQUESTS, 500);
if (!(PARKED > 0 && PARKED < 1)) throw new Error("--parked must be a fraction between 0 and 1");

// One keep-alive connection, a request at a time: what is timed is the server's answer, not
// a client's connection set-up (nor the garbage of fetch, which in this process would land
// in the same heap as the figures it takes).
const agent = new Agent({ keepAlive: true, maxSockets: 1 });

function getText(url: string): Promise<{ status: number; body: string }> {
  return new Promise((done, fail) => {
    get(url, { agent }, (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        body += chunk;
      });
      response.on("end", () => done({ status: response.statusCode ?? 0, body }));
      response.on("error", fail);
    }).on("error", fail);
  });
}

async function timed(
  url: string,
  count: number,
): Promise<{ ms: number[]; rows: number; next: string | null }> {
  const ms: number[] = [];
  let rows = 0;
  let next: string | null = null;
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    const response = await getText(url);
    const body = JSON.parse(response.body) as { sessions?: unknown[]; nextCursor?: string | null };
    ms.push(performance.now() - started);
    if (response.status !== 200) throw new Error(`GET ${url}: ${response.status} ${response.body}`);
    rows = body.sessions?.length ?? 0;
    next = body.nextCursor ?? null;
  }
  return { ms, rows, next };
}

async function main(): Promise<void> {
  const began = Date.now();
  const cleanup = new Cleanup();
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  cleanup.add("close Redis", () => redis.quit());
  try {
    const { databaseUrl, env } = await scratchFleet(cleanup, redis, "list", 1);
    const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
    cleanup.add("close the seeding connection", () => sql.end({ timeout: 5 }));
    console.log(
      `seeding ${SESSIONS.toLocaleString("en")} sessions (${fmt(PARKED * 100, 2)} % parked, ${TENANTS} tenants)…`,
    );
    const seedStarted = Date.now();
    await sql`set synchronous_commit = off`;
    await sql`
      insert into sessions (id, tenant, agent, status, tail_state, last_seq, run_started, parked_reason,
                            batch_id, custom_id, created_at, updated_at, last_active_at)
      select 's-' || g,
             case when g % ${TENANTS} = 0 then ${DEFAULT_TENANT} else 'tenant-' || (g % ${TENANTS}) end,
             '{"model":{"provider":"scripted","steps":[{"text":"hi"}]},"tools":[]}'::jsonb,
             case when (hashint4(g)::bigint & 1048575) < ${Math.round(PARKED * 1_048_576)} then 'parked' else 'active' end,
             case when g % 50 = 0 then 'awaiting_model' else 'completed' end,
             4, true,
             case when (hashint4(g)::bigint & 1048575) < ${Math.round(PARKED * 1_048_576)}
                  then (array['attempts_exhausted: 3 automatic resumes', 'max_turns', 'budget_exhausted'])[1 + g % 3]
             end,
             case when g % 5 = 0 then 'batch-' || (g / 5000) end,
             case when g % 5 = 0 then 'c-' || g end,
             now() - (${SESSIONS} - g) * interval '10 ms', now() - (${SESSIONS} - g) * interval '10 ms',
             now() - (${SESSIONS} - g) * interval '10 ms'
        from generate_series(1, ${SESSIONS}) g`;
    // A table that has just taken a million rows in one statement is not what a live fleet's
    // looks like: autovacuum would now set every row's hint bits and the visibility map, and a
    // checkpoint would write it all out, while the requests are being timed. Settle it first,
    // as autovacuum would have long since done on a live database.
    await sql`vacuum (analyze) sessions`;
    await sql`checkpoint`;
    const [counts] = await sql<{ parked: number; mine: number }[]>`
      select count(*) filter (where status = 'parked')::int as parked,
             count(*) filter (where status = 'parked' and tenant = ${DEFAULT_TENANT})::int as mine
        from sessions`;
    console.log(
      `seeded in ${fmt((Date.now() - seedStarted) / 1000, 1)} s: ${counts!.parked.toLocaleString("en")} parked, ` +
        `${counts!.mine.toLocaleString("en")} of them the default tenant's`,
    );

    const api = await spawnUntilReady([FLEET_BIN, "api", "--port", "0"], env, /fleet api ready: (\S+)/);
    cleanup.add("stop the API", () => stopChild(api, "SIGTERM"));
    const base = `${api.ready[1]}/v1/sessions`;
    const parkedUrl = `${base}?status=parked&limit=50`;
    // The API's first requests, timed as they come: a process that has just started runs its
    // code unoptimised and compiles it (V8's optimising compiler, on the other core) for its
    // first few thousand requests. Printed apart, as the cold line.
    const cold = await timed(parkedUrl, COLD);
    // Warm-up: the route, the planner's caches, the index pages, and the JIT of both processes
    // (otherwise whichever line is timed first pays it), as in an API that has been serving
    // for a while.
    for (let served = 0; served < WARMUP; served += 400) {
      await timed(parkedUrl, 200);
      await timed(`${base}?limit=50`, 200);
    }
    const first = await timed(parkedUrl, REQUESTS);
    const cursorUrl = first.next ? `${parkedUrl}&before=${encodeURIComponent(first.next)}` : parkedUrl;
    const second = await timed(cursorUrl, REQUESTS);
    const byReason = await timed(`${parkedUrl}&parkedReason=max_turns`, REQUESTS);
    const all = await timed(`${base}?limit=50`, REQUESTS);
    // The floor of this machine, in the same run: the same client against a bare Node HTTP
    // server in a process of its own that answers `{}` at once (no framework, no database).
    // Tail latencies below it are not the list's to lose.
    const bare = await spawnUntilReady(
      [
        "-e",
        `const s = require("node:http").createServer((q, r) => r.end("{}"));
         s.listen(0, "127.0.0.1", () => console.log("bare ready: http://127.0.0.1:" + s.address().port + "/"));`,
      ],
      {},
      /bare ready: (\S+)/,
    );
    cleanup.add("stop the bare server", () => stopChild(bare));
    const floorUrl = bare.ready[1]!;
    await timed(floorUrl, 200);
    const floor = await timed(floorUrl, REQUESTS);

    // The store's part alone, in this process: the same first page through SessionQueries.
    const store = openDatabase(databaseUrl, { max: 1 });
    cleanup.add("close the store's connection", () => store.close());
    const storeQueries = new SessionQueries(store);
    const storeMs: number[] = [];
    let storeRows = 0;
    for (let i = 0; i < REQUESTS + 20; i++) {
      const t0 = performance.now();
      storeRows = (await storeQueries.listSessions({ tenant: DEFAULT_TENANT, status: "parked", limit: 50 }))
        .length;
      if (i >= 20) storeMs.push(performance.now() - t0);
    }
    const inStore = { ms: storeMs, rows: storeRows };
    const rows = [["GET /v1/sessions (default tenant)", "rows", "p50", "p99", "max"]];
    for (const [label, r] of [
      [`?status=parked, first page: the API's first ${COLD} requests (cold)`, cold],
      [`?status=parked, first page (after ${WARMUP.toLocaleString("en")} warm-up requests)`, first],
      ["?status=parked, next page (before=cursor)", second],
      ["?status=parked&parkedReason=max_turns", byReason],
      ["no filter, first page (for comparison)", all],
      ["parked, first page: the store alone (no HTTP)", inStore],
      ["floor: a bare Node server answering {} (same client)", floor],
    ] as const) {
      rows.push([
        label,
        String(r.rows),
        `${fmt(percentile(r.ms, 50), 2)} ms`,
        `${fmt(percentile(r.ms, 99), 2)} ms`,
        `${fmt(Math.max(...r.ms), 2)} ms`,
      ]);
    }
    console.log("");
    console.log(table(rows));
    // The sweeper's attention scan on the same database (2 % of the sessions are mid-run).
    const database = openDatabase(databaseUrl, { max: 1 });
    cleanup.add("close the sweeper's connection", () => database.close());
    const sweeps = new SweepQueries(database);
    await sweeps.sessionsNeedingAttention(200);
    const scanMs: number[] = [];
    let scanned = 0;
    for (let i = 0; i < Math.min(REQUESTS, 50); i++) {
      const t0 = performance.now();
      scanned = (await sweeps.sessionsNeedingAttention(200)).length;
      scanMs.push(performance.now() - t0);
    }
    console.log(
      `sweeper attention scan (sessionsNeedingAttention(200), ${scanned} rows): p50 ${fmt(percentile(scanMs, 50), 2)} ms, ` +
        `p99 ${fmt(percentile(scanMs, 99), 2)} ms`,
    );
    const scanPlan = await sql<{ "QUERY PLAN": string }[]>`
      explain (costs off)
      select s.id from sessions s
       where s.status = 'active' and s.run_started and s.tail_phase = 'open'
         and (s.next_resume_at is null or s.next_resume_at <= now())
       order by s.next_resume_at nulls first limit 200`;
    console.log(`  its plan: ${scanPlan.map((l) => l["QUERY PLAN"].trim()).join(" / ")}`);
    const plan = await sql<{ "QUERY PLAN": string }[]>`
      explain (analyze, buffers, costs off, timing off)
      select * from sessions where tenant = ${DEFAULT_TENANT} and status = 'parked'
       order by updated_at desc, id desc limit 50`;
    console.log("");
    console.log("plan of the parked page's query:");
    for (const line of plan) console.log(`  ${line["QUERY PLAN"]}`);
  } finally {
    agent.destroy();
    await cleanup.run();
  }
  console.log(`total run time: ${fmt((Date.now() - began) / 1000, 1)} s`);
}

await main();
process.exit(0);
