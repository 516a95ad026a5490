/**
 * The queue's handling of bad input, and the `fleet` command as real child processes:
 * concurrent `fleet migrate`, and `fleet resume-point SESSION_ID` against a stored session.
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { type Job, Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";
import { CRASH_HISTORY } from "./support/histories.js";

type Exit = { code: number | null; stdout: string; stderr: string };

/** Runs `fleet ...args` as a child process; resolves with its exit code and output. */
function fleetCli(args: string[], env: Record<string, string>, timeoutMs = 30_000): Promise<Exit> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [FLEET_BIN, ...args],
      { cwd: ROOT, env: { ...process.env, ...env }, timeout: timeoutMs },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : null) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

describe("queue and CLI", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  /** The file's one fleet worker, started by the first test that needs it (after its claim). */
  let worker: Promise<unknown> | undefined;
  const aWorker = () => {
    worker ??= fleet.spawnWorker();
    return worker;
  };
  beforeAll(async () => {
    fleet = await createFleetEnv("queuecli");
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => fleet?.close());

  it("tells the sweeper (PREFIX:events) when BullMQ fails a job or finds one stalled", async () => {
    // Before any fleet worker runs, another worker claims a job and dies holding it: its
    // lock lapses; a fleet worker's stalled check puts the job back, says so, takes it and
    // fails it (the payload is malformed), and says that too. The sweeper wakes on both
    // without reading BullMQ's event streams.
    const prefix = fleet.env.FLEET_PREFIX!;
    const subscriber = new Redis(fleet.env.REDIS_URL!, { maxRetriesPerRequest: null });
    const messages: { type?: string; queue?: string; jobId?: string }[] = [];
    subscriber.on("message", (_channel, text: string) => messages.push(JSON.parse(text)));
    await subscriber.subscribe(`${prefix}:events`);
    const connection = new Redis(fleet.env.REDIS_URL!, { maxRetriesPerRequest: null });
    const queue = new Queue("runs", { connection, prefix });
    const claimer = new Worker("runs", null, { connection, prefix, lockDuration: 1_000, autorun: false });
    try {
      const jobId = `stalls-${randomUUID()}`;
      await queue.add("run", { nope: 1 }, { jobId });
      let claimed: Job | undefined;
      await waitFor(
        async () => {
          claimed = await claimer.getNextJob("dead-claimer", { block: false });
          return claimed?.id === jobId;
        },
        5_000,
        "the other worker to claim the job",
      );
      await claimer.close(true);
      await aWorker();
      await waitFor(
        async () => messages.some((m) => m.type === "job_stalled" && m.jobId === jobId),
        20_000,
        "job_stalled on PREFIX:events",
      );
      await waitFor(
        async () => messages.some((m) => m.type === "job_failed" && m.jobId === jobId),
        10_000,
        "job_failed on PREFIX:events",
      );
      expect(messages.find((m) => m.jobId === jobId)).toMatchObject({ type: "job_stalled", queue: "runs" });
      expect(await queue.getJobState(jobId)).toBe("failed");
    } finally {
      await claimer.close(true);
      await queue.close();
      await connection.quit();
      await subscriber.quit();
    }
  }, 40_000);

  it("fails a malformed job payload once, naming the field, and never retries it", async () => {
    await aWorker();
    const connection = new Redis(fleet.env.REDIS_URL!, { maxRetriesPerRequest: null });
    const queue = new Queue("runs", { connection, prefix: fleet.env.FLEET_PREFIX });
    try {
      const job = await queue.add(
        "run",
        { nope: 1 },
        { attempts: 5, backoff: { type: "fixed", delay: 100 }, jobId: `bad-${randomUUID()}` },
      );
      await waitFor(async () => (await queue.getJobState(job.id!)) === "failed", 15_000, "the job to fail");
      const failedAt = Date.now();
      const failed = (await queue.getJob(job.id!))!;
      expect(failed.attemptsMade).toBe(1);
      expect(failed.failedReason).toContain("job.data.sessionId");
      // The worker is still alive and serving.
      const { id } = await client.createSession({
        agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } },
      });
      const { runId } = await client.send(id, "still there?");
      expect((await client.waitForRun(runId, { timeoutMs: 15_000 })).endedReason).toBe("completed");
      // A second after the failure, well past the retry backoff (the run above took part of
      // it): still failed, still one attempt.
      await new Promise((r) => setTimeout(r, Math.max(0, failedAt + 1_000 - Date.now())));
      expect(await queue.getJobState(job.id!)).toBe("failed");
      const after = (await queue.getJob(job.id!))!;
      expect(after.attemptsMade).toBe(1);
      expect(after.failedReason).toBe(failed.failedReason);
    } finally {
      await queue.close();
      await connection.quit();
    }
  });

  // A name this worker does not know is a newer release's job (a rolling deploy): it is handed
  // back, no attempt counted, not failed at once (test/newer-job-name.test.ts follows it to the
  // end of FLEET_NEWER_AGENT_WAIT_MS, where it fails naming the job).
  it("hands a job with an unknown name back, counting no attempt", async () => {
    await aWorker();
    const connection = new Redis(fleet.env.REDIS_URL!, { maxRetriesPerRequest: null });
    const queue = new Queue("runs", { connection, prefix: fleet.env.FLEET_PREFIX });
    try {
      const job = await queue.add(
        "explode",
        { sessionId: "s", runId: "r" },
        { attempts: 5, backoff: { type: "fixed", delay: 100 } },
      );
      await waitFor(
        async () =>
          (await connection.hget(`${fleet.env.FLEET_PREFIX}:runs:${job.id}`, "fleetUnknownNameSince")) !==
          null,
        15_000,
        "a worker to hand the job back",
      );
      await waitFor(
        async () => (await queue.getJobState(job.id!)) === "delayed",
        15_000,
        "the job to be delayed",
      );
      const handedBack = (await queue.getJob(job.id!))!;
      expect(handedBack.attemptsMade).toBe(0);
      expect(handedBack.failedReason).toBeUndefined();
    } finally {
      await queue.close();
      await connection.quit();
    }
  });

  describe("fleet migrate run 3 times at once", () => {
    const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
    const created: string[] = [];
    afterAll(async () => {
      for (const name of created) await admin.unsafe(`drop database if exists "${name}" with (force)`);
      await admin.end();
    });

    function urlOf(name: string): string {
      const url = new URL(ADMIN_URL);
      url.pathname = `/${name}`;
      return url.toString();
    }

    async function expectFullyMigrated(name: string): Promise<void> {
      const files = (await readdir(join(ROOT, "drizzle"))).filter((f) => f.endsWith(".sql"));
      expect(files.length).toBeGreaterThan(0);
      const sql = postgres(urlOf(name), { max: 1, onnotice: () => {} });
      try {
        const [row] = await sql<{ n: number }[]>`select count(*)::int as n from drizzle.__drizzle_migrations`;
        expect(row!.n).toBe(files.length);
        const tables = await sql<{ table_name: string }[]>`
          select table_name from information_schema.tables where table_schema = 'public' order by table_name`;
        // Every migration's tables (later migrations add more).
        expect(tables.map((t) => t.table_name)).toEqual(
          expect.arrayContaining(["api_keys", "messages", "runs", "sessions"]),
        );
      } finally {
        await sql.end();
      }
    }

    it("on a fresh empty database: all exit 0, each migration applied once", async () => {
      const name = `fleet_t_migrate_${randomUUID().slice(0, 8)}`;
      created.push(name);
      await admin.unsafe(`create database "${name}"`);
      const env = { ...fleet.env, DATABASE_URL: urlOf(name) };
      const exits = await Promise.all([1, 2, 3].map(() => fleetCli(["migrate"], env)));
      for (const exit of exits) expect(exit.code, exit.stderr).toBe(0);
      await expectFullyMigrated(name);
      // And once more: repeated runs change nothing.
      const again = await fleetCli(["migrate"], env);
      expect(again.code, again.stderr).toBe(0);
      await expectFullyMigrated(name);
    });

    it("on a database that does not exist yet: all exit 0 and it is created once", async () => {
      const name = `fleet_t_migrate_${randomUUID().slice(0, 8)}`;
      created.push(name);
      const env = { ...fleet.env, DATABASE_URL: urlOf(name) };
      const exits = await Promise.all([1, 2, 3].map(() => fleetCli(["migrate"], env)));
      for (const exit of exits) expect(exit.code, exit.stderr).toBe(0);
      await expectFullyMigrated(name);
    });
  });

  describe("fleet resume-point SESSION_ID", () => {
    it("prints the stored point and exits 0 for a resumable session", async () => {
      const { id } = await client.createSession({
        agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } },
        messages: CRASH_HISTORY,
      });
      const exit = await fleetCli(["resume-point", id], fleet.env);
      expect(exit.code, exit.stderr).toBe(0);
      const printed = JSON.parse(exit.stdout);
      expect(printed).toEqual(await client.resumePoint(id));
      expect(printed).toMatchObject({
        resumable: true,
        kind: "recover_tools",
        unansweredToolCalls: [{ id: "b", name: "write_file", arguments: { path: "b.txt", content: "b" } }],
      });
      // Reading the point wrote nothing.
      const session = await client.getSession(id);
      expect(session.messages).toHaveLength(3);
      expect(session.runs).toHaveLength(0);
    });

    it("exits 3 for a completed session", async () => {
      const { id } = await client.createSession({
        agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } },
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "hello", stopReason: "end_turn" },
        ],
      });
      const exit = await fleetCli(["resume-point", id], fleet.env);
      expect(exit.code, exit.stderr).toBe(3);
      expect(JSON.parse(exit.stdout)).toEqual({ resumable: false, reason: "completed" });
    });

    it("exits 2 with one line saying the session was not found", async () => {
      const unknown = randomUUID();
      const exit = await fleetCli(["resume-point", unknown], fleet.env);
      expect(exit.code).toBe(2);
      expect(exit.stdout).toBe("");
      const lines = exit.stderr.trim().split("\n");
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/not found/i);
      expect(lines[0]).toContain(unknown);
      expect(exit.stderr).not.toContain("    at ");
    });
  });
});
