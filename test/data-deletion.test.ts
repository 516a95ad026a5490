/**
 * `DELETE /v1/sessions/:id` and `DELETE /v1/batches/:id` against real Postgres, Redis, a
 * real worker process and an in-process sweeper: a session deleted while idle, while its
 * run waits in the queue, and while a worker is inside a tool (the worker frozen with
 * SIGSTOP across the delete: awake again it appends nothing, starts no further tool, parks
 * and resumes nothing, and goes on serving other sessions); an open event stream ends with
 * SESSION_DELETED; Idempotency-Key replays; another tenant's id is a 404; a batch deleted
 * before it ended owes no webhook; the CLI.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FleetApiError, FleetClient, type FleetEvent } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { eventStreamKey } from "../src/shared/events.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { tenantWorkerId } from "../src/shared/worker-ref.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { exitedWithOutput } from "./support/child-exit.js";
import {
  createFleetEnv,
  FLEET_BIN,
  type FleetEnv,
  readyInfo,
  type WorkerProcess,
  waitFor,
} from "./support/fleet-env.js";
import { readSse } from "./support/sse.js";
import { aWholeWideScan } from "./support/sweeps.js";

const quick = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };

/** First step: sleep `ms` (call `nap`); second: write `marker` (call `mark`); then answer. */
const napThenMark = (ms: number, marker: string) => ({
  model: {
    provider: "scripted" as const,
    steps: [
      { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms } }] },
      { toolCalls: [{ id: "mark", name: "write_file", arguments: { path: marker, content: "ran" } }] },
      { text: "done" },
    ],
  },
  tools: ["sleep", "write_file"],
});

async function metric(port: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return text
    .split("\n")
    .filter((l) => l.startsWith(name))
    .reduce((sum, l) => sum + Number(l.split(" ").at(-1)), 0);
}

describe("deleting sessions and batches", () => {
  let fleet: FleetEnv;
  let a: FleetClient;
  let b: FleetClient;
  let keyA: string;
  let base: string;
  let sweeper: RunningSweeper;
  let worker: WorkerProcess;
  let receiver: { server: Server; url: string; deliveries: string[] };

  beforeAll(async () => {
    fleet = await createFleetEnv("data-deletion", {
      env: { FLEET_WEBHOOK_SECRET: "whsec-deletion", FLEET_WEBHOOK_RETRY_MS: "200" },
    });
    const { api } = await fleet.startApi();
    base = api.url;
    const keys = new ApiKeys(fleet.database);
    keyA = (await keys.create("tenant-a")).key;
    a = new FleetClient({ baseUrl: base, apiKey: keyA });
    b = new FleetClient({ baseUrl: base, apiKey: (await keys.create("tenant-b")).key });
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    const deliveries: string[] = [];
    const server = createServer((req, res) => {
      let body = "";
      req.on("data", (d) => {
        body += d;
      });
      req.on("end", () => {
        deliveries.push(body);
        res.writeHead(200).end();
      });
    });
    receiver = await new Promise((resolve) =>
      server.listen(0, "127.0.0.1", () =>
        resolve({
          server,
          url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
          deliveries,
        }),
      ),
    );
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    receiver?.server.close();
    await fleet?.close();
  });

  const rowsOf = async (id: string) => {
    const { sql } = fleet.database;
    const [row] = await sql<{ s: number; m: number; r: number }[]>`
      select (select count(*)::int from sessions where id = ${id}) as s,
             (select count(*)::int from messages where session_id = ${id}) as m,
             (select count(*)::int from runs where session_id = ${id}) as r`;
    return row!;
  };
  const status = (error: unknown) => (error as FleetApiError).status;

  it("a queued run's session: its run and job go, and no worker ever acts on it", async () => {
    // No worker yet: the run waits in the queue.
    const { id } = await a.createSession({ agent: quick });
    const { runId } = await a.send(id, "hello");
    const queue = (await import("bullmq")).Queue;
    const runs = new queue("runs", { connection: fleet.redis, prefix: fleet.config.prefix });
    try {
      const jobId = (await import("../src/shared/queues.js")).QUEUES.runs.jobId({ sessionId: id, runId });
      expect(await runs.getJob(jobId)).toBeDefined();
      expect(await a.deleteSession(id)).toEqual({ id, deleted: true });
      expect(await runs.getJob(jobId)).toBeUndefined();
    } finally {
      await runs.close();
    }
    expect(await rowsOf(id)).toEqual({ s: 0, m: 0, r: 0 });
    expect(status(await a.getSession(id).catch((e) => e))).toBe(404);
    expect(status(await a.deleteSession(id).catch((e) => e))).toBe(404);
    worker = await fleet.spawnWorker({ WORKER_CONCURRENCY: "4" });
    // The worker serves others; the deleted session stays gone.
    const other = await a.createSession({ agent: quick });
    await a.send(other.id, "hi");
    await waitFor(
      async () => (await a.getSession(other.id)).status === "completed",
      20_000,
      "another session",
    );
    expect(await rowsOf(id)).toEqual({ s: 0, m: 0, r: 0 });
  }, 60_000);

  it("an idle session: 200 then 404; an Idempotency-Key replays the first answer; its stream is ended", async () => {
    const { id } = await a.createSession({ agent: quick });
    await a.send(id, "hello");
    await waitFor(async () => (await a.getSession(id)).status === "completed", 20_000, "completed");
    const stream = eventStreamKey(fleet.config.prefix, id);
    expect(await fleet.redis.exists(stream)).toBe(1);
    const del = (key?: string) =>
      fetch(`${base}/v1/sessions/${id}`, {
        method: "DELETE",
        headers: { authorization: `Bearer ${keyA}`, ...(key ? { "idempotency-key": key } : {}) },
      });
    const first = await del("erase-1");
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ id, deleted: true });
    const replay = await del("erase-1");
    expect(replay.status).toBe(200);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await replay.json()).toEqual({ id, deleted: true });
    expect((await del()).status).toBe(404);
    expect((await del("erase-2")).status).toBe(404);
    expect(await rowsOf(id)).toEqual({ s: 0, m: 0, r: 0 });
    // The stream's last entry says so, and it expires within a minute; its seq key is gone.
    const [last] = (await fleet.redis.xrevrange(stream, "+", "-", "COUNT", 1)) as [string, string[]][];
    expect(last![1]).toContain("SESSION_DELETED");
    const ttl = await fleet.redis.pttl(stream);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60_000);
    // Its seq key is only a tombstone (a late writer recreates nothing), expiring with the stream.
    const seqKey = `${fleet.config.prefix}:events-seq:${id}`;
    expect(await fleet.redis.hgetall(seqKey)).toEqual({ deleted: "1" });
    expect(await fleet.redis.pttl(seqKey)).toBeLessThanOrEqual(60_000);
    // A new reader gets 404, like the session.
    const events = await fetch(`${base}/v1/sessions/${id}/events`, {
      headers: { authorization: `Bearer ${keyA}` },
    });
    expect(events.status).toBe(404);
  }, 60_000);

  it("another tenant's session or batch answers 404 and is left as it was", async () => {
    const { id } = await a.createSession({ agent: quick });
    const batch = await a.createBatch([{ agent: quick }]);
    expect(status(await b.deleteSession(id).catch((e) => e))).toBe(404);
    expect(status(await b.deleteBatch(batch.id).catch((e) => e))).toBe(404);
    expect(status(await b.deleteSession("no-such-session").catch((e) => e))).toBe(404);
    expect((await rowsOf(id)).s).toBe(1);
    expect((await a.getBatch(batch.id)).counts.total).toBe(1);
  });

  it("a worker frozen inside a tool across the delete appends nothing and starts no further tool", async () => {
    const { workerId, metricsPort } = readyInfo(worker);
    const fencedBefore = await metric(metricsPort, "fleet_fenced_writes_total");
    const marker = `deleted-mid-tool-${Date.now()}.txt`;
    const { id } = await a.createSession({ agent: napThenMark(1_500, marker) });
    await a.send(id, "go");
    const { sql } = fleet.database;
    await waitFor(
      async () =>
        (await sql`select 1 from messages where session_id = ${id} and role = 'assistant'`).length === 1,
      20_000,
      "the sleep call committed",
    );
    // A reader follows the session while it is deleted.
    const seen: FleetEvent[] = [];
    const reading = (async () => {
      for await (const event of a.events(id, { after: "0-0" })) seen.push(event);
    })();
    await waitFor(
      () => seen.some((e) => e.type === "TOOL_STARTED"),
      10_000,
      "the reader sees the tool start",
    );
    worker.child.kill("SIGSTOP");
    try {
      expect(await a.deleteSession(id)).toEqual({ id, deleted: true });
    } finally {
      worker.child.kill("SIGCONT");
    }
    // The reader's iterator ends by itself, SESSION_DELETED last.
    await reading;
    expect(seen.at(-1)).toMatchObject({ type: "SESSION_DELETED", data: { sessionId: id } });
    // Awake, the worker's tool result is refused by the fence; the next step's tool never runs.
    await waitFor(
      async () => (await metric(metricsPort, "fleet_fenced_writes_total")) > fencedBefore,
      15_000,
      "the late write fenced",
    );
    // A whole pass of the sweeper since (a resume of the session would be one): no tool ran.
    await aWholeWideScan(sweeper);
    expect(existsSync(join(fleet.config.toolDir, marker))).toBe(false);
    expect(await rowsOf(id)).toEqual({ s: 0, m: 0, r: 0 });
    expect(worker.child.exitCode).toBeNull();
    expect(worker.output()).not.toMatch(/session parked/);
    // Nothing parked, nothing resumed: no session of the fleet is parked, no run was added for it.
    const [parked] = await sql<
      { n: number }[]
    >`select count(*)::int as n from sessions where status = 'parked'`;
    expect(parked!.n).toBe(0);
    // The same worker goes on serving (no crash loop).
    const next = await a.createSession({ agent: quick });
    await a.send(next.id, "after");
    await waitFor(async () => (await a.getSession(next.id)).status === "completed", 20_000, "served after");
    expect((await a.getSession(next.id)).runs[0]).toMatchObject({ workerId: tenantWorkerId(workerId) });
  }, 90_000);

  it("a batch deleted before it ended: 404 at once, its sessions gone, no webhook", async () => {
    const batch = await a.createBatch(
      [
        ...Array.from({ length: 4 }, (_, i) => ({
          agent: napThenMark(3_000, `batch-${i}-${Date.now()}.txt`),
          input: "go",
          customId: `s${i}`,
        })),
        { agent: quick, customId: "idle" },
      ],
      { webhook: { url: receiver.url } },
    );
    const ids = batch.sessions.map((s) => s.id);
    const { sql } = fleet.database;
    await waitFor(
      async () =>
        (await sql`select 1 from runs where session_id in ${sql(ids)} and status = 'running'`).length >= 1,
      20_000,
      "a session of the batch running",
    );
    // A reader follows the batch while it is deleted.
    const seen: FleetEvent[] = [];
    let opened = false;
    const reading = (async () => {
      for await (const event of a.batchEvents(batch.id, { after: "0-0" })) seen.push(event);
    })();
    // And a plain SSE reader: the server ends the response after BATCH_DELETED (no client logic).
    const raw = readSse(`${base}/v1/batches/${batch.id}/events`, {
      after: "0-0",
      headers: { authorization: `Bearer ${keyA}` },
      stop: () => false,
      timeoutMs: 20_000,
    });
    await waitFor(
      async () => {
        opened ||= (await fleet.redis.exists(`${fleet.config.prefix}:batch-events:${batch.id}`)) === 1;
        return opened;
      },
      10_000,
      "the batch's stream written (its idle session ended)",
    );
    const deleted = await a.deleteBatch(batch.id);
    expect(deleted).toEqual({ id: batch.id, deleted: true, sessionsDeleted: 5, complete: true });
    // The reader's iterator ends by itself, BATCH_DELETED last.
    await reading;
    expect(seen.at(-1)).toMatchObject({ type: "BATCH_DELETED", data: { batchId: batch.id } });
    const rawRead = await raw;
    expect(rawRead.status).toBe(200);
    expect(rawRead.events.at(-1)?.type).toBe("BATCH_DELETED");
    expect(status(await a.getBatch(batch.id).catch((e) => e))).toBe(404);
    expect(status(await a.deleteBatch(batch.id).catch((e) => e))).toBe(404);
    for (const id of ids) expect(await rowsOf(id)).toEqual({ s: 0, m: 0, r: 0 });
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from batches where id = ${batch.id}`;
    expect(row!.n).toBe(0);
    // Two whole passes of the sweeper (each ending batches and queueing what they owe), each
    // longer than the webhook's retry interval (200 ms): nothing was posted.
    await aWholeWideScan(sweeper);
    await aWholeWideScan(sweeper);
    expect(receiver.deliveries).toEqual([]);
    for (const id of ids) expect(await rowsOf(id)).toEqual({ s: 0, m: 0, r: 0 });
  }, 60_000);

  it("a batch deletion the API left unfinished is finished by a sweeper (retention off), its webhook never posted", async () => {
    // Ended at once (no session has input), with a webhook still owed.
    const batch = await a.createBatch([{ agent: quick }, { agent: quick }, { agent: quick }], {
      webhook: { url: receiver.url },
    });
    // The API marked it deleted and stopped there (a crash, a deploy).
    const { DataDeletion } = await import("../src/shared/store/data-deletion.js");
    expect(await new DataDeletion(fleet.database).markBatchDeleted("tenant-a", batch.id)).not.toBeNull();
    // Counted from the mark: the suite's sweeper may have ended the batch and posted its webhook
    // before it (the batch ended at once), which is no post of a deleted batch's.
    const before = receiver.deliveries.length;
    expect(status(await a.getBatch(batch.id).catch((e) => e))).toBe(404);
    // A minute ago: a younger mark's purge is left to its request (test/batch-delete-sweeper-race.test.ts).
    await fleet.database
      .sql`update batches set deleted_at = now() - interval '61 seconds' where id = ${batch.id}`;
    const finisher = await startSweeper(
      { ...loadConfig({ ...fleet.env, FLEET_RETENTION_INTERVAL_MS: "50" }), logLevel: "silent" },
      { serveMetrics: false },
    );
    try {
      expect(loadConfig(fleet.env).retention.maxIdleMs).toBeNull();
      const { sql } = fleet.database;
      await waitFor(
        async () => (await sql`select 1 from batches where id = ${batch.id}`).length === 0,
        15_000,
        "the batch's row deleted by the sweeper",
      );
      for (const s of batch.sessions) expect(await rowsOf(s.id)).toEqual({ s: 0, m: 0, r: 0 });
      // A whole pass of this sweeper after it deleted the row (its batch ends owe nothing).
      await aWholeWideScan(finisher);
      expect(receiver.deliveries.length).toBe(before);
    } finally {
      await finisher.stop();
    }
  }, 60_000);

  it("a run queued for a session deleted meanwhile is a 404 (NotFoundError), not a 500", async () => {
    // The API checks that the session exists, then queues the run: a delete can fall between.
    const { SessionQueries } = await import("../src/shared/store/session-queries.js");
    const { NotFoundError } = await import("../src/shared/errors.js");
    const queries = new SessionQueries(fleet.database);
    const { id } = await a.createSession({ agent: quick });
    await a.deleteSession(id);
    for (const options of [{}, { unpark: true }, { maxActiveSessions: 10, tenant: "tenant-a" }]) {
      const error = await queries
        .createRun({ sessionId: id, kind: "run", trigger: "api", input: "late" }, options)
        .catch((e: unknown) => e);
      expect(error, JSON.stringify(options)).toBeInstanceOf(NotFoundError);
    }
    expect(await rowsOf(id)).toEqual({ s: 0, m: 0, r: 0 });
  });

  it("fleet session delete / fleet batch delete print the answer; a missing id exits 2", async () => {
    const { id } = await a.createSession({ agent: quick });
    const batch = await a.createBatch([{ agent: quick }]);
    const cli = (args: string[], key: string | null = keyA) =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const env: NodeJS.ProcessEnv = {
          ...process.env,
          ...fleet.env,
          FLEET_API_URL: base,
        };
        if (key === null) delete env.FLEET_API_KEY;
        else env.FLEET_API_KEY = key;
        const child = spawn(process.execPath, [FLEET_BIN, ...args], { env });
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (d) => {
          stdout += d;
        });
        child.stderr.on("data", (d) => {
          stderr += d;
        });
        void exitedWithOutput(child).then((code) => resolve({ code, stdout, stderr }));
      });
    const session = await cli(["session", "delete", id]);
    expect(session.code, session.stderr).toBe(0);
    expect(JSON.parse(session.stdout)).toEqual({ id, deleted: true });
    const again = await cli(["session", "delete", id]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/fleet session delete: .*not found|session/i);
    const deleted = await cli(["batch", "delete", batch.id]);
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(JSON.parse(deleted.stdout)).toMatchObject({ id: batch.id, deleted: true, sessionsDeleted: 1 });
    expect(status(await a.getSession(batch.sessions[0]!.id).catch((e) => e))).toBe(404);
    // Without a key, or with one the API refuses: the line says what to set, not which header to send.
    const keyless = await cli(["session", "delete", id], null);
    expect(keyless.code).toBe(2);
    expect(keyless.stderr).toMatch(
      /^fleet session delete: .*; set FLEET_API_KEY to a key \(`fleet keys create/,
    );
    const wrong = await cli(["batch", "delete", batch.id], "fk_000000000000_nope");
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/^fleet batch delete: .*; FLEET_API_KEY is not a key this API accepts/);
  }, 60_000);
});
