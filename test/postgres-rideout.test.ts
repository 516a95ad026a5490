/**
 * Workers riding out a short Postgres outage (src/worker/db-rideout.ts), with real worker
 * processes, a sweeper and the in-process API behind a TCP proxy (test/support/pg-proxy.ts)
 * and 8 sessions inside a 6 s tool or a 6 s model call when it starts
 * (test/support/mid-flight-agent.ts):
 * - reset and refused (a restart) until every session's write has failed once its call came
 *   back (about 6 s), within FLEET_WORKER_DB_RIDEOUT_MS (30 s): the
 *   workers keep their sessions and send their writes again, so every tool's result and every
 *   model answer that came back during the outage is stored: each session completes in its
 *   first run (nothing ended `crashed` or `stalled`, nothing resumed, no call answered as
 *   interrupted), no tool ran twice, seq contiguous, `fleet_db_rideouts_total{result="stored"}`;
 *   the API answers 503 `unavailable` (no stack) meanwhile and 200 after (this was the restart
 *   case of postgres-outage.test.ts, the same outage of the same agent's sessions);
 * - closed at once (a proxy or load balancer with no Postgres behind it, PgBouncer restarting:
 *   each connection accepted and closed before any answer) until every session's write has
 *   failed: the same as a restart. postgres.js took each such close during a connection's
 *   start-up for a reason to connect again at once, for ever (porsager/postgres#1193), and the
 *   statement that needed the connection waited as long: the API's requests hung with no
 *   answer, the workers' writes never failed (so never rode out), a core was busy
 *   reconnecting, and each /healthz probe left one more statement waiting. Checked besides: the
 *   connections attempted during the outage are few (no loop), the workers' /healthz says 503
 *   meanwhile and 200 after, and each worker logged the closed connection;
 * - blackholed longer than the window (2 s here, with DATABASE_SILENCE_MS 2 s): the writes give
 *   up (`gave_up`), and what follows is what happened before the ride-out: those runs are
 *   ended `crashed` or `stalled` and resumed, the tools that were running are answered as
 *   interrupted, never run again, and nothing is lost or stored twice.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { pastBefore, startMidFlight, untilSessionsEnd } from "./support/mid-flight-agent.js";
import { apiAnswersUntil, type PgProxy, startPgProxy, UNAVAILABLE_ANSWER } from "./support/pg-proxy.js";
import { freePort } from "./support/prometheus.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";

const COUNT = 8;
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whether every session of `ids` has had a write fail and kept its session (the workers' log). */
function ridingOut(ids: string[], workers: WorkerProcess[]): boolean {
  const lines = workers
    .flatMap((w) => w.output().split("\n"))
    .filter((l) => l.includes("Postgres unavailable: keeping the session and trying the write again"));
  return ids.every((id) => lines.some((l) => l.includes(id)));
}

/** `fleet_db_rideouts_total` by result, summed over the workers' /metrics. */
async function rideouts(ports: number[]): Promise<Record<string, number>> {
  const out: Record<string, number> = { stored: 0, gave_up: 0, fenced: 0 };
  for (const port of ports) {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    for (const [, result, n] of text.matchAll(
      /^fleet_db_rideouts_total\{[^}]*result="(\w+)"[^}]*\} (\S+)$/gm,
    ))
      out[result!] = (out[result!] ?? 0) + Number(n);
  }
  return out;
}

describe("workers ride out a short Postgres outage", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let apiUrl: string;
  let proxy: PgProxy;
  let sweeper: WorkerProcess;
  let queries: SessionQueries;

  beforeAll(async () => {
    proxy = await startPgProxy();
    fleet = await createFleetEnv("pgrideout", { viaDatabase: (url) => proxy.urlFor(url) });
    let api: { url: string };
    ({ client, api } = await fleet.startApi());
    apiUrl = api.url;
    queries = new SessionQueries(fleet.database);
    sweeper = await fleet.spawnSweeper({ LOG_LEVEL: "info" });
  }, 90_000);
  afterAll(async () => {
    await proxy?.restore();
    await fleet?.close();
    await proxy?.close();
  }, 60_000);

  async function startWorkers(env: Record<string, string>) {
    const ports = [await freePort(), await freePort()];
    const workers = await Promise.all(
      ports.map((port) =>
        fleet.spawnWorker({ LOG_LEVEL: "info", WORKER_CONCURRENCY: "4", ...env }, [
          "--metrics-port",
          String(port),
        ]),
      ),
    );
    return { ports, workers };
  }

  /** Starts the sessions and waits until each is inside its tool or its model call. */
  async function midFlight(tag: string): Promise<string[]> {
    const { sql } = fleet.database;
    const ids = await startMidFlight(client, tag, COUNT);
    await waitFor(async () => (await pastBefore(sql, ids)) === COUNT, 30_000, "every session past `before`");
    await pause(300);
    return ids;
  }

  async function untilEnded(ids: string[], workers: WorkerProcess[]) {
    const { sql } = fleet.database;
    await untilSessionsEnd(sql, ids, {
      orParked: true,
      timeoutMs: 60_000,
      logs: () => [workers[0]!.output(), sweeper.output()],
    });
  }

  /** What holds after any outage: seq contiguous, one result per call, no tool run twice, processes up. */
  async function checkInvariants(tag: string, ids: string[], workers: WorkerProcess[]) {
    const interrupted: string[] = [];
    for (const [i, id] of ids.entries()) {
      // Read straight from Postgres: the API's connections stay blackholed after the failover.
      const messages = await queries.loadHistory(id);
      expect(messages.map((m) => m.seq)).toEqual(messages.map((_, n) => n + 1));
      const results = messages.flatMap((m) => (m.role === "tool" ? [m] : []));
      expect(new Set(results.map((m) => m.toolCallId)).size).toBe(results.length);
      for (const m of results) if (m.content === INTERRUPTED_TEXT) interrupted.push(`${i}:${m.toolCallId}`);
      for (const file of ["before", "after"]) {
        const text = await readFile(join(fleet.config.toolDir, `${tag}-${i}-${file}.txt`), "utf8").catch(
          () => "",
        );
        expect(text === "" || text === "ran\n", `${tag}-${i}-${file}: ${JSON.stringify(text)}`).toBe(true);
      }
    }
    for (const w of [...workers, sweeper]) {
      expect(w.child.exitCode).toBeNull();
      expect(w.output()).not.toMatch(/unhandled rejection|uncaught exception/i);
    }
    return interrupted;
  }

  async function runsOf(ids: string[]) {
    const { sql } = fleet.database;
    return sql<{ kind: string; ended_reason: string; n: number }[]>`
      select kind, ended_reason, count(*)::int as n from runs where session_id in ${sql(ids)}
       group by 1, 2 order by 1, 2`;
  }

  /** The status of each worker's /healthz. */
  async function health(ports: number[]): Promise<number[]> {
    return Promise.all(ports.map(async (port) => (await fetch(`http://127.0.0.1:${port}/healthz`)).status));
  }

  async function stop(workers: WorkerProcess[]) {
    for (const w of workers) w.child.kill("SIGTERM");
    await Promise.all(workers.map((w) => w.exited));
  }

  it("reset and refused until every write has failed: every result is stored, no run is redone", async () => {
    const { ports, workers } = await startWorkers({ FLEET_WORKER_DB_RIDEOUT_MS: "30000" });
    const ids = await midFlight("reset");
    const before = await rideouts(ports);
    const connectsBefore = proxy.connects();
    void proxy.reset();
    // Until each session's write, once its tool or model call came back, has failed and is
    // being sent again (once a fixed 10 s: the calls end within 6 s of the cut).
    const answers = await apiAnswersUntil(
      apiUrl,
      ids[0]!,
      waitFor(() => ridingOut(ids, workers), 30_000, "every session riding out a failed write"),
    );
    const connectsDuring = proxy.connects() - connectsBefore;
    await proxy.restore();
    console.log("reset: API answers during the outage:", answers);
    console.log(`reset: connections attempted through the proxy during the outage: ${connectsDuring}`);
    for (const answer of answers) expect(answer).toMatch(UNAVAILABLE_ANSWER);
    await untilEnded(ids, workers);
    expect((await fetch(`${apiUrl}/v1/sessions/${ids[0]}`)).status).toBe(200);
    const runs = await runsOf(ids);
    const counts = await rideouts(ports);
    console.log(
      "reset: runs",
      runs.map((r) => `${r.kind}/${r.ended_reason}: ${r.n}`),
      "ride-outs",
      counts,
    );
    // One run each, completed: nothing ended crashed or stalled, nothing resumed.
    expect(runs).toEqual([{ kind: "run", ended_reason: "completed", n: COUNT }]);
    expect(await checkInvariants("reset", ids, workers)).toEqual([]);
    for (const [i, id] of ids.entries()) {
      const messages = await queries.loadHistory(id);
      expect(messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : []))).toEqual(
        i % 2 === 0 ? ["before", "nap", "after"] : ["before", "after"],
      );
      expect(messages.at(-1)).toMatchObject({ role: "assistant", content: "done" });
      for (const file of ["before", "after"])
        expect(await readFile(join(fleet.config.toolDir, `reset-${i}-${file}.txt`), "utf8")).toBe("ran\n");
    }
    // Each session in flight had a write fail in the outage and stored it after.
    expect(counts.stored! - before.stored!).toBeGreaterThanOrEqual(COUNT);
    expect(counts.gave_up).toBe(0);
    expect(counts.fenced).toBe(0);
    for (const w of workers) expect(w.output()).not.toMatch(/fenced out/);
    expect(sweeper.output()).not.toMatch(/run abandoned/);
    await stop(workers);
  }, 120_000);

  it("closed at once until every write has failed: no reconnect loop, every result is stored, no run is redone", async () => {
    const { ports, workers } = await startWorkers({ FLEET_WORKER_DB_RIDEOUT_MS: "30000" });
    const ids = await midFlight("closing");
    const before = await rideouts(ports);
    const connectsBefore = proxy.connects();
    proxy.closeEach();
    const answers = await apiAnswersUntil(
      apiUrl,
      ids[0]!,
      waitFor(() => ridingOut(ids, workers), 30_000, "every session riding out a failed write"),
    );
    const healthDuring = await health(ports);
    const connectsDuring = proxy.connects() - connectsBefore;
    await proxy.restore();
    console.log("closing: API answers during the outage:", answers);
    console.log(`closing: connections attempted through the proxy during the outage: ${connectsDuring}`);
    for (const answer of answers) expect(answer).toMatch(UNAVAILABLE_ANSWER);
    expect(healthDuring).toEqual([503, 503]);
    // A few attempts a second for each connection a statement waits for (client.ts
    // reconnectDelaySeconds), across the API, the sweeper and two workers: the loop made
    // hundreds a second for each.
    expect(connectsDuring).toBeLessThan(1_000);
    for (const w of workers)
      expect(
        w
          .output()
          .split("\n")
          .some((l) => l.includes("Postgres unavailable") && l.includes("CONNECTION_CLOSED")),
      ).toBe(true);
    await untilEnded(ids, workers);
    expect(await health(ports)).toEqual([200, 200]);
    expect((await fetch(`${apiUrl}/v1/sessions/${ids[0]}`)).status).toBe(200);
    const runs = await runsOf(ids);
    const counts = await rideouts(ports);
    // One run each, completed: nothing ended crashed or stalled, nothing resumed.
    expect(runs).toEqual([{ kind: "run", ended_reason: "completed", n: COUNT }]);
    expect(await checkInvariants("closing", ids, workers)).toEqual([]);
    for (const [i, id] of ids.entries()) {
      const messages = await queries.loadHistory(id);
      expect(messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : []))).toEqual(
        i % 2 === 0 ? ["before", "nap", "after"] : ["before", "after"],
      );
      expect(messages.at(-1)).toMatchObject({ role: "assistant", content: "done" });
    }
    expect(counts.stored! - before.stored!).toBeGreaterThanOrEqual(COUNT);
    expect(counts.gave_up).toBe(0);
    expect(counts.fenced).toBe(0);
    await stop(workers);
  }, 150_000);

  it("blackholed longer than the window: the writes give up and the runs are resumed, as before", async () => {
    const { ports, workers } = await startWorkers({
      FLEET_WORKER_DB_RIDEOUT_MS: "2000",
      DATABASE_SILENCE_MS: "2000",
    });
    const ids = await midFlight("blackhole");
    proxy.blackhole();
    // Until the tools' writes have given up: the tool ends (6 s), its write waits for silence
    // (2 s), tries again for 2 s, and its last try is given 2 s more. (A statement with
    // parameters sent on a connection it was not yet prepared on waited past the silence
    // until dead-links.ts counted its Flush as owed an answer.)
    await waitFor(
      async () => (await rideouts(ports)).gave_up! >= COUNT / 2,
      40_000,
      "the tools' ride-outs given up",
    ).catch(async (error) => {
      console.log(await rideouts(ports), workers[0]!.output().slice(-4_000));
      throw error;
    });
    await proxy.restore();
    await untilEnded(ids, workers);
    const runs = await runsOf(ids);
    const counts = await rideouts(ports);
    console.log(
      "blackhole: runs",
      runs.map((r) => `${r.kind}/${r.ended_reason}: ${r.n}`),
      "ride-outs",
      counts,
    );
    // Each session whose write gave up had its run ended `crashed` or `stalled` and resumed.
    const redone = runs.filter((r) => r.ended_reason === "crashed" || r.ended_reason === "stalled");
    expect(redone.reduce((n, r) => n + r.n, 0)).toBe(counts.gave_up);
    expect(runs.filter((r) => r.kind === "resume").reduce((n, r) => n + r.n, 0)).toBe(counts.gave_up);
    expect(counts.fenced).toBe(0);
    // A tool running when its result could not be stored is answered as interrupted (a model
    // answer that could not be stored is asked for again): only `nap` can be.
    const interrupted = await checkInvariants("blackhole", ids, workers);
    console.log("blackhole: calls answered as interrupted", interrupted);
    for (const answer of interrupted) expect(answer).toMatch(/^\d*[02468]:nap$/);
  }, 120_000);
});
