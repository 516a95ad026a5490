/**
 * Redis unreachable for 8 s — four lease TTLs (2 s here) — while sessions are inside a
 * model call and inside a tool: frozen (SIGSTOP, as a hung failover), then killed and
 * started again empty (no persistence: every lease key is gone). The workers are alive
 * throughout, so they take their leases back when Redis answers, check their epoch, and
 * go on: every session completes in its first run, none is redone as `stalled` or
 * `crashed`, no tool runs twice or is answered as interrupted, and seq stays contiguous.
 * What an operator sees on the workers' /metrics: the writes and tool starts that waited
 * (`fleet_lease_wait_seconds{result="proven"}`) and the leases taken back
 * (`fleet_lease_retakes_total{result="verified"}`, one per "taken back" log line), none lost.
 * Redis is a server of this test's own (port 7101: helper 1's range).
 */
import type { ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { pastBefore, startMidFlight, untilSessionsEnd } from "./support/mid-flight-agent.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { freePort } from "./support/prometheus.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";

const PORT = 7101;
const OUTAGE_MS = 8_000;
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

type LeaseCounts = Record<string, number>;

/** The lease series of the workers' /metrics, summed over the workers. */
async function leaseCounts(ports: number[]): Promise<LeaseCounts> {
  const out: LeaseCounts = {};
  for (const port of ports) {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    for (const [, name, result, n] of text.matchAll(
      /^(fleet_lease_wait_seconds_count|fleet_lease_retakes_total)\{[^}]*result="(\w+)"[^}]*\} (\S+)$/gm,
    ))
      out[`${name} ${result}`] = (out[`${name} ${result}`] ?? 0) + Number(n);
  }
  return out;
}

describe("Redis unreachable for 8 s with sessions mid-model-call and mid-tool", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let redis: ChildProcess;
  let workers: WorkerProcess[];
  let metricsPorts: number[];
  let sweeper: WorkerProcess;

  beforeAll(async () => {
    redis = await startRedis(PORT);
    fleet = await createFleetEnv("redisoutage", { redisUrl: `redis://127.0.0.1:${PORT}` });
    ({ client } = await fleet.startApi());
    metricsPorts = [await freePort(), await freePort()];
    workers = await Promise.all(
      metricsPorts.map((port) => fleet.spawnWorker({ LOG_LEVEL: "info" }, ["--metrics-port", String(port)])),
    );
    sweeper = await fleet.spawnSweeper();
  }, 90_000);
  afterAll(async () => {
    redis?.kill("SIGCONT");
    await fleet?.close();
    if (redis) await stopRedis(redis);
  });

  async function ride(tag: string, outage: () => Promise<void>) {
    const { sql } = fleet.database;
    const count = 8;
    const ids = await startMidFlight(client, tag, count);
    await waitFor(
      async () => (await pastBefore(sql, ids)) === count,
      30_000,
      "every session past `before`, inside its sleep or its slow model call",
    );
    await pause(300);
    // Inside `nap`: the step asking for it is the last message; in the model call: `before`'s result.
    const [inFlight] = await sql<{ tool: number; model: number }[]>`
      select count(*) filter (where last = 'assistant')::int as tool,
             count(*) filter (where last = 'tool')::int as model
        from (select (select role from messages m where m.session_id = s.id order by seq desc limit 1) as last
                from sessions s where s.id in ${sql(ids)} and s.tail_state <> 'completed') t`;
    console.log(
      `${tag}: when Redis went, ${inFlight!.tool} sessions were inside \`nap\`, ${inFlight!.model} in a model call`,
    );
    expect(inFlight!.tool).toBeGreaterThan(0);
    expect(inFlight!.model).toBeGreaterThan(0);
    const before = await leaseCounts(metricsPorts);
    await outage();
    await untilSessionsEnd(sql, ids, {
      orParked: false,
      timeoutMs: 60_000,
      logs: () => [workers[0]!.output(), sweeper.output()],
    });

    if (process.env.DUMP_OUTAGE)
      for (const [n, w] of [...workers, sweeper].entries())
        (await import("node:fs")).writeFileSync(`/tmp/h1-${tag}-${n}.log`, w.output());
    const runs = await sql<{ kind: string; ended_reason: string; n: number }[]>`
      select kind, ended_reason, count(*)::int as n from runs where session_id in ${sql(ids)} group by 1, 2`;
    console.log(
      `${tag}: runs by kind and outcome`,
      runs.map((r) => `${r.kind}/${r.ended_reason}: ${r.n}`),
    );
    // One run each, completed: nothing was redone as stalled or crashed, nothing resumed.
    expect(runs).toEqual([{ kind: "run", ended_reason: "completed", n: count }]);
    for (const [i, id] of ids.entries()) {
      const { messages } = await client.getSession(id);
      expect(messages.map((m) => m.seq)).toEqual(messages.map((_, n) => n + 1));
      const results = messages.flatMap((m) => (m.role === "tool" ? [m] : []));
      expect(results.map((m) => m.toolCallId)).toEqual(
        i % 2 === 0 ? ["before", "nap", "after"] : ["before", "after"],
      );
      expect(results.filter((m) => m.content === INTERRUPTED_TEXT)).toEqual([]);
      expect(messages.at(-1)).toMatchObject({ role: "assistant", content: "done" });
      for (const file of ["before", "after"])
        expect(await readFile(join(fleet.config.toolDir, `${tag}-${i}-${file}.txt`), "utf8")).toBe("ran\n");
    }
    const takenBack = workers
      .map(
        (w) =>
          w
            .output()
            .split("\n")
            .filter((l) => l.includes("taken back, epoch unchanged")).length,
      )
      .reduce((a, b) => a + b, 0);
    const fenced = workers.map(
      (w) =>
        w
          .output()
          .split("\n")
          .filter((l) => l.includes("fenced out")).length,
    );
    console.log(
      `${tag}: leases taken back after the outage: ${takenBack}; fenced-out lines per worker: ${fenced}`,
    );
    expect(fenced).toEqual([0, 0]);
    expect(sweeper.output()).not.toMatch(/run abandoned/);
    const after = await leaseCounts(metricsPorts);
    const lease: LeaseCounts = Object.fromEntries(
      Object.entries(after).map(([k, n]) => [k, n - (before[k] ?? 0)]),
    );
    console.log(`${tag}: lease metrics over the outage`, lease);
    // The model calls that ended while Redis was away waited to append their step.
    expect(lease["fleet_lease_wait_seconds_count proven"]).toBeGreaterThan(0);
    expect(lease["fleet_lease_wait_seconds_count lost"]).toBe(0);
    expect(lease["fleet_lease_wait_seconds_count timed_out"]).toBe(0);
    // One per "taken back" line the workers logged since they started (both outages).
    expect(after["fleet_lease_retakes_total verified"]).toBe(takenBack);
    expect(lease["fleet_lease_retakes_total lost"]).toBe(0);
  }

  it("frozen (SIGSTOP) for 8 s: every run goes on where it was", async () => {
    await ride("frozen", async () => {
      redis.kill("SIGSTOP");
      await pause(OUTAGE_MS);
      redis.kill("SIGCONT");
    });
  }, 120_000);

  it("killed and started again empty 8 s later: the leases are taken back", async () => {
    await ride("restarted", async () => {
      await stopRedis(redis);
      await pause(OUTAGE_MS);
      redis = await startRedis(PORT);
    });
  }, 120_000);
});
