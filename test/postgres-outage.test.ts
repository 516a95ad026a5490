/**
 * Postgres unreachable in the middle of a batch, as a managed failover makes it: a TCP proxy
 * (test/support/pg-proxy.ts) stands between the whole fleet — two worker children, a sweeper
 * child, the in-process API — and the shared Postgres, and answers none of its connections
 * for 7 s, more than twice the fleet's DATABASE_SILENCE_MS (3 s here, 15 s by default: the
 * window is what the outage has to outlast, and a shorter one is less outage and less wait
 * for the requests hung on it: 6 s and 14 s before, 7 s of outage and 3 s of each hung
 * request more for the same proof; postgres-rideout.test.ts's blackhole case runs workers
 * with 2 s); those connections are never answered again (a blackhole). Sessions are inside
 * a 6 s tool, inside a 6 s model call, or queued behind them when it starts (so the tools and
 * model calls still end within it). Checked: every session ends completed (or parked with a
 * reason), seq contiguous, no message stored twice, no tool run twice, the processes stay up,
 * the API answers 503 `unavailable` (no stack) meanwhile and 200 after, and the fleet does not
 * hammer Postgres (connection attempts through the proxy during the outage are counted). The same
 * with the connections reset and refused (a restart) is postgres-rideout.test.ts's
 * first case.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { pastBefore, startMidFlight, untilSessionsEnd } from "./support/mid-flight-agent.js";
import { apiAnswersDuring, type PgProxy, startPgProxy, UNAVAILABLE_ANSWER } from "./support/pg-proxy.js";

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** DATABASE_SILENCE_MS of this fleet's processes. */
const SILENCE_MS = 3_000;

describe("Postgres unreachable in the middle of a batch", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let proxy: PgProxy;
  let apiUrl: string;
  let workers: WorkerProcess[];
  let sweeper: WorkerProcess;

  beforeAll(async () => {
    proxy = await startPgProxy();
    fleet = await createFleetEnv("pgoutage", {
      viaDatabase: (url) => proxy.urlFor(url),
      env: { DATABASE_SILENCE_MS: String(SILENCE_MS) },
    });
    let api: { url: string };
    ({ client, api } = await fleet.startApi());
    apiUrl = api.url;
    workers = await Promise.all(
      [0, 1].map(() => fleet.spawnWorker({ LOG_LEVEL: "info", WORKER_CONCURRENCY: "4" })),
    );
    sweeper = await fleet.spawnSweeper({ LOG_LEVEL: "info" });
  }, 90_000);
  afterAll(async () => {
    await proxy?.restore();
    await fleet?.close();
    await proxy?.close();
  }, 60_000);

  async function ride(tag: string, outageMs: number, cut: () => void, restore: () => Promise<void>) {
    const { sql } = fleet.database;
    const count = 12;
    const ids = await startMidFlight(client, tag, count);
    await waitFor(async () => (await pastBefore(sql, ids)) >= 8, 30_000, "eight sessions past `before`");
    await pause(300);
    const connectsBefore = proxy.connects();
    cut();
    const answers = await apiAnswersDuring(apiUrl, ids[0]!, outageMs);
    const connectsDuring = proxy.connects() - connectsBefore;
    await restore();
    console.log(`${tag}: API answers during the outage:`, answers);
    // Each answered 503 `unavailable`: no stack, no hang (a blackholed connection is dropped
    // after DATABASE_SILENCE_MS, a new one gives up after the connect timeout).
    for (const answer of answers) expect(answer).toMatch(UNAVAILABLE_ANSWER);
    console.log(`${tag}: connections attempted through the proxy during the outage: ${connectsDuring}`);
    await untilSessionsEnd(sql, ids, { orParked: true, timeoutMs: 120_000 });
    const runs = await sql<{ kind: string; ended_reason: string; n: number }[]>`
      select kind, ended_reason, count(*)::int as n from runs where session_id in ${sql(ids)} group by 1, 2 order by 1, 2`;
    console.log(
      `${tag}: runs by kind and outcome`,
      runs.map((r) => `${r.kind}/${r.ended_reason}: ${r.n}`),
    );
    const sessions = await sql<{ status: string; parked_reason: string | null; n: number }[]>`
      select status, parked_reason, count(*)::int as n from sessions where id in ${sql(ids)} group by 1, 2`;
    console.log(`${tag}: sessions`, sessions);
    const after = await fetch(`${apiUrl}/v1/sessions/${ids[0]}`);
    expect(after.status).toBe(200);
    for (const [i, id] of ids.entries()) {
      const { messages } = await client.getSession(id);
      expect(messages.map((m) => m.seq)).toEqual(messages.map((_, n) => n + 1));
      const results = messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : []));
      expect(new Set(results).size).toBe(results.length);
      for (const file of ["before", "after"]) {
        const text = await readFile(join(fleet.config.toolDir, `${tag}-${i}-${file}.txt`), "utf8").catch(
          () => "",
        );
        expect(text === "" || text === "ran\n", `${tag}-${i}-${file}: ${JSON.stringify(text)}`).toBe(true);
      }
    }
    for (const w of [...workers, sweeper]) expect(w.child.exitCode).toBeNull();
    for (const w of [...workers, sweeper])
      expect(w.output()).not.toMatch(/unhandled rejection|uncaught exception/i);
  }

  it("blackholed for 7 s, its connections never answered again (a failover)", async () => {
    await ride(
      "blackhole",
      2 * SILENCE_MS + 1_000,
      () => proxy.blackhole(),
      () => proxy.restore({ keepHung: true }),
    );
  }, 300_000);
});
