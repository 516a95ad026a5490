/**
 * A real Postgres — a server of this test's own (test/support/private-postgres.ts), not a
 * proxy in front of the shared one — restarted (`pg_ctl stop -m fast`: every connection is
 * ended with 57P01 "terminating connection due to administrator command", new ones refused,
 * then "starting up"), crashed (`-m immediate`, crash recovery at the start) and stopped for
 * 20 s, each in the middle of a batch whose sessions are inside a 6 s tool or a 6 s model
 * call (mid-flight-agent.ts). The fleet — two worker children, a sweeper child, the API in
 * this process — rides it out without a restart of its own: every session ends completed (or
 * parked with a reason), seq contiguous, no tool result stored twice, no tool run twice, the
 * batch's counts and results whole, its event stream (the client's) ends with
 * BATCH_COMPLETED; the workers say what failed and that Postgres answers again, the processes
 * stay up and idle meanwhile, and the API answers every request while Postgres is away with
 * a 503 `unavailable` (no stack, no internal text) and its /healthz 503, then 200.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { RunningApi } from "../src/producer/api-server.js";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { midFlightAgent, pastBefore } from "./support/mid-flight-agent.js";
import { apiAnswersDuring, UNAVAILABLE_ANSWER } from "./support/pg-proxy.js";
import { type PrivatePostgres, startPrivatePostgres } from "./support/private-postgres.js";
import { cpuSeconds } from "./support/process-cpu.js";

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
const COUNT = 6;

describe("a real Postgres restarted under a fleet with a batch mid-flight", () => {
  let pg: PrivatePostgres;
  let fleet: FleetEnv;
  let client: FleetClient;
  let api: RunningApi;
  let workers: WorkerProcess[];
  let sweeper: WorkerProcess;

  beforeAll(async () => {
    pg = await startPrivatePostgres();
    fleet = await createFleetEnv("pgrestart", { adminUrl: pg.adminUrl });
    ({ api, client } = await fleet.startApi());
    workers = await Promise.all([0, 1].map(() => fleet.spawnWorker({ LOG_LEVEL: "info" })));
    sweeper = await fleet.spawnSweeper();
  }, 120_000);
  afterAll(async () => {
    await pg?.start().catch(() => undefined);
    await fleet?.close();
    await pg?.remove();
  });

  async function ride(tag: string, outage: (sessionId: string) => Promise<void>) {
    const { sql } = fleet.database;
    const created = await client.createBatch(
      Array.from({ length: COUNT }, (_, i) => ({
        agent: midFlightAgent(tag, i),
        input: `go ${i}`,
        customId: `${i}`,
      })),
    );
    const ids = created.sessions.map((s) => s.id);
    await waitFor(async () => (await pastBefore(sql, ids)) === COUNT, 30_000, "every session past `before`");
    const events = (async () => {
      const types: string[] = [];
      for await (const event of client.batchEvents(created.id)) types.push(event.type);
      return types;
    })();
    await pause(300);
    const pids = [...workers, sweeper].map((w) => w.child.pid!);
    const cpuBefore = await Promise.all(pids.map(cpuSeconds));
    const started = Date.now();
    await outage(ids[0]!);
    const outageSeconds = (Date.now() - started) / 1000;
    const cpu = (await Promise.all(pids.map(cpuSeconds))).map((s, i) => s - cpuBefore[i]!);
    console.log(`${tag}: ${outageSeconds} s away; CPU seconds meanwhile per process`, cpu);
    // No process spins while Postgres is away (each used a few hundredths of a second a second).
    for (const seconds of cpu) expect(seconds).toBeLessThan(Math.max(1, outageSeconds / 4));

    await waitFor(
      async () => (await client.getBatch(created.id).catch(() => null))?.status === "ended",
      60_000,
      "the batch ended",
    );
    expect(await events).toEqual([
      ...Array.from({ length: COUNT }, () => "SESSION_ENDED"),
      "BATCH_COMPLETED",
    ]);
    const batch = await client.getBatch(created.id);
    expect(batch.counts.completed + batch.counts.parked).toBe(COUNT);
    const results = [];
    for await (const result of client.batchResults(created.id)) results.push(result);
    expect(results.map((r) => r.customId).sort()).toEqual(ids.map((_, i) => `${i}`).sort());
    for (const result of results)
      if (result.status === "parked") expect(result.parkedReason).toBeTruthy();
      else expect(result).toMatchObject({ status: "completed", output: "done" });
    const runs = await sql<{ ended_reason: string; n: number }[]>`
      select ended_reason, count(*)::int as n from runs where session_id in ${sql(ids)} group by 1`;
    console.log(`${tag}: runs by outcome`, runs);
    for (const [i, id] of ids.entries()) {
      const { messages } = await client.getSession(id);
      expect(messages.map((m) => m.seq)).toEqual(messages.map((_, n) => n + 1));
      const answered = messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : []));
      expect(new Set(answered).size).toBe(answered.length);
      // Each write ran once (or, for `after` of a session parked before it, not at all).
      for (const file of ["before", "after"]) {
        const ran = await readFile(join(fleet.config.toolDir, `${tag}-${i}-${file}.txt`), "utf8").catch(
          () => "",
        );
        expect(answered.includes(file) ? ran : "", `${tag}-${i}-${file}`).toBe(
          answered.includes(file) ? "ran\n" : "",
        );
      }
    }
    for (const process of [...workers, sweeper]) expect(process.child.exitCode).toBeNull();
    expect((await fetch(`${api.url}/healthz`)).status).toBe(200);
  }

  it("restarted (fast): every connection ended with 57P01, then refused, then starting up", async () => {
    await ride("fast", async () => {
      await pg.stop("fast");
      await pg.start();
    });
  }, 60_000);

  it("crashed (immediate) and started again after crash recovery", async () => {
    await ride("immediate", async () => {
      await pg.stop("immediate");
      await pg.start();
    });
  }, 60_000);

  it("stopped for 20 s: the API answers 503 meanwhile, the workers say so and go on", async () => {
    const logged = workers.map((w) => w.output().length);
    await ride("stopped", async (sessionId) => {
      await pg.stop("fast");
      const answers = await apiAnswersDuring(api.url, sessionId, 18_000);
      const health = await fetch(`${api.url}/healthz`);
      await pg.start();
      console.log("the API while Postgres was away:", answers);
      expect(answers.length).toBeGreaterThan(3);
      for (const answer of answers) {
        expect(answer).toMatch(UNAVAILABLE_ANSWER);
        expect(answer).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|stack|\bat \S+ \(/i);
      }
      expect(health.status).toBe(503);
    });
    const said = workers.map((w) => w.output().slice(logged[workers.indexOf(w)]!)).join("");
    expect(said).toMatch(/Postgres unavailable: keeping the session and trying the write again/);
    expect(said).toMatch(/Postgres answers again/);
  }, 90_000);
});
