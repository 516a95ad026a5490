/**
 * What a delete leaves outside Postgres and Redis's known keys, against real Postgres,
 * Redis and real worker processes: transcripts (FLEET_TRANSCRIPT_DIR) on a worker's disk go at
 * once, or when a worker that was down starts, also after a retention delete; a worker frozen (SIGSTOP) mid-model-call across the
 * delete does not recreate the session's event stream when it wakes; nor does any late write
 * of a session deleted with a run not ended (the worker missed the cancel).
 */
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { DeletionCleanup } from "../src/shared/deletion-cleanup.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { startSweeper } from "../src/sweeper/sweeper-process.js";
import {
  createFleetEnv,
  type FleetEnv,
  readyInfo,
  type WorkerProcess,
  waitFor,
} from "./support/fleet-env.js";

async function metric(port: number, name: string, label = ""): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return text
    .split("\n")
    .filter((l) => l.startsWith(name) && l.includes(label))
    .reduce((sum, l) => sum + Number(l.split(" ").at(-1)), 0);
}

describe("what a delete leaves behind", () => {
  let fleet: FleetEnv;
  let a: FleetClient;
  let worker: WorkerProcess;
  let transcriptDir: string;
  let ledger: string;
  let extensionFile: string;
  const spawnWorker = () =>
    fleet.spawnWorker(
      { WORKER_CONCURRENCY: "4", FLEET_TRANSCRIPT_DIR: transcriptDir, FLEET_HOOK_TIMEOUT_MS: "1500" },
      ["--extensions", extensionFile],
    );
  const calls = async () =>
    existsSync(ledger)
      ? (await readFile(ledger, "utf8"))
          .trim()
          .split("\n")
          .map((line) => JSON.parse(line) as { id: string; tenant: string; attempt: number; signal: boolean })
      : [];
  const owed = async () =>
    (await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from session_deletions`)[0]!.n;
  const quick = { model: { provider: "scripted" as const, steps: [{ text: "done" }] } };
  const transcript = (id: string) => join(transcriptDir, `${id}.jsonl`);
  const completed = async (id: string) => {
    await waitFor(async () => (await a.getSession(id)).status === "completed", 20_000, "completed");
    await waitFor(() => existsSync(transcript(id)), 10_000, "its transcript written");
  };
  /** Two sessions, `gone` (to delete) and `kept`, each sent "hello" and completed with its transcript written. */
  const twoCompleted = async () => {
    const gone = await a.createSession({ agent: quick });
    const kept = await a.createSession({ agent: quick });
    await a.send(gone.id, "hello");
    await a.send(kept.id, "hello");
    await completed(gone.id);
    await completed(kept.id);
    return { gone, kept };
  };

  beforeAll(async () => {
    fleet = await createFleetEnv("deletion-leftovers");
    const { api } = await fleet.startApi();
    const key = (await new ApiKeys(fleet.database).create("tenant-a")).key;
    a = new FleetClient({ baseUrl: api.url, apiKey: key });
    transcriptDir = await mkdtemp(join(tmpdir(), "fleet-transcripts-"));
    // Extensions whose onSessionDeleted hooks throw, hang (while a `hang` file exists), and
    // record each call (in load order: the failing ones first).
    ledger = join(transcriptDir, "ledger.txt");
    extensionFile = join(transcriptDir, "hooks.mjs");
    await writeFile(
      extensionFile,
      `import { appendFileSync, existsSync } from "node:fs";
export default [
  { name: "broken", onSessionDeleted() { throw new Error("broken hook"); } },
  { name: "slow", onSessionDeleted() { if (existsSync(${JSON.stringify(join(transcriptDir, "hang"))})) return new Promise(() => {}); } },
  { name: "ledger", onSessionDeleted(id, ctx) {
      appendFileSync(${JSON.stringify(ledger)}, JSON.stringify({ id, tenant: ctx.tenant, attempt: ctx.attempt, signal: ctx.signal instanceof AbortSignal }) + "\\n");
  } },
];
`,
    );
    worker = await spawnWorker();
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    if (transcriptDir) await rm(transcriptDir, { recursive: true, force: true });
  });

  it("a deleted session's transcript is removed from the worker's disk at once; another's stays", async () => {
    const { gone, kept } = await twoCompleted();
    await a.deleteSession(gone.id);
    await waitFor(() => !existsSync(transcript(gone.id)), 10_000, "the deleted session's transcript removed");
    expect(existsSync(transcript(kept.id))).toBe(true);
  }, 60_000);

  it("onSessionDeleted: each deleted session's hooks are called once by a worker; failing and hanging hooks are logged and counted, never blocking the delete", async () => {
    const { metricsPort } = readyInfo(worker);
    const failuresBefore = await metric(metricsPort, "fleet_hook_failures_total", 'hook="onSessionDeleted"');
    await writeFile(join(transcriptDir, "hang"), "");
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await a.createSession({ agent: quick })).id);
    // Each delete answers at once, whatever the hooks do.
    for (const id of ids) expect(await a.deleteSession(id)).toEqual({ id, deleted: true });
    await waitFor(
      async () => (await calls()).filter((c) => ids.includes(c.id)).length === 3,
      30_000,
      "the ledger hook called for each",
    );
    await rm(join(transcriptDir, "hang"));
    const mine = (await calls()).filter((c) => ids.includes(c.id));
    expect(mine.map((c) => c.id).sort()).toEqual([...ids].sort());
    for (const c of mine) expect(c).toMatchObject({ tenant: "tenant-a", attempt: 1, signal: true });
    // Per session: the broken hook threw, the slow one timed out.
    await waitFor(
      async () =>
        (await metric(metricsPort, "fleet_hook_failures_total", 'hook="onSessionDeleted"')) >=
        failuresBefore + 6,
      10_000,
      "the failures counted",
    );
    expect(worker.output()).toMatch(/broken hook/);
    expect(worker.output()).toMatch(
      /did not finish within 1500 ms.*"extension":"slow","hook":"onSessionDeleted"/,
    );
  }, 90_000);

  it("a worker that was down during a delete removes the transcript when it starts, and no live session's", async () => {
    const { gone, kept } = await twoCompleted();
    worker.child.kill("SIGTERM");
    await worker.exited;
    // No worker hears of this delete (none runs: only a worker removes transcripts, so there is
    // nothing to wait for before looking).
    await a.deleteSession(gone.id);
    // A file that is no transcript is not touched either.
    await writeFile(join(transcriptDir, "notes.txt"), "keep");
    expect(existsSync(transcript(gone.id))).toBe(true);
    expect(await owed()).toBe(1);
    worker = await spawnWorker();
    await waitFor(() => !existsSync(transcript(gone.id)), 20_000, "the pass at start removed it");
    // Its onSessionDeleted hooks were owed, and called once the worker was back.
    await waitFor(async () => (await calls()).some((c) => c.id === gone.id), 20_000, "the hook called");
    await waitFor(async () => (await owed()) === 0, 10_000, "nothing owed");
    expect(existsSync(transcript(kept.id))).toBe(true);
    expect(existsSync(join(transcriptDir, "notes.txt"))).toBe(true);
  }, 90_000);

  it("a session retention deletes loses its transcript too", async () => {
    const old = await a.createSession({ agent: quick });
    await a.send(old.id, "hello");
    await completed(old.id);
    // Retention of about 0.9 s, a pass every 50 ms.
    const sweeper = await startSweeper(
      {
        ...loadConfig({ ...fleet.env, FLEET_RETENTION_DAYS: "0.00001", FLEET_RETENTION_INTERVAL_MS: "50" }),
        logLevel: "silent",
      },
      { serveMetrics: false },
    );
    try {
      await waitFor(
        async () => (await a.getSession(old.id).catch(() => null)) === null,
        20_000,
        "retention deleted it",
      );
      await waitFor(() => !existsSync(transcript(old.id)), 10_000, "its transcript removed");
    } finally {
      await sweeper.stop();
    }
  }, 60_000);

  it("a late event write for a session deleted while its run was on its way is refused; the stream still expires within a minute", async () => {
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    const cleanup = new DeletionCleanup({
      redis: fleet.redis,
      prefix: fleet.config.prefix,
      removeJob: async () => {},
      metrics: { sessionsDeleted: { inc: () => {} } },
      eventsEnabled: true,
    });
    const id = `late-writer-${Date.now()}`;
    const message = { seq: 1, role: "user", content: "hi", createdAt: new Date().toISOString() } as never;
    expect((await writer.write(id, [{ runId: "r1", message }], [])).ok).toBe(true);
    await cleanup.afterSessions(
      {
        sessionIds: [id],
        runs: [{ id: "r1", sessionId: id, kind: "run", status: "running", tenant: "default" }],
      },
      "api",
    );
    const stream = eventStreamKey(fleet.config.prefix, id);
    const before = await fleet.redis.xrange(stream, "-", "+");
    // The frozen worker wakes: its deltas, and the stored message again (as after a lost write).
    const late = await writer.write(
      id,
      [{ runId: "r1", message }],
      [{ type: "MESSAGE_DELTA", runId: "r1", text: "late" }],
    );
    expect(late).toMatchObject({ ok: true, written: 0 });
    expect(await fleet.redis.xrange(stream, "-", "+")).toEqual(before);
    expect(await fleet.redis.pttl(stream)).toBeLessThanOrEqual(60_000);
    // The tombstone outlives the stream (a day, FLEET_EVENTS_MAX_AGE_MS): a write after the stream expired is refused too.
    await fleet.redis.del(stream);
    expect(await fleet.redis.pttl(`${fleet.config.prefix}:events-seq:${id}`)).toBeGreaterThan(60_000);
    await writer.write(id, [], [{ type: "RUN_COMPLETED", runId: "r1", outcome: "completed" }]);
    expect(await fleet.redis.exists(stream)).toBe(0);
  });

  it("a worker frozen mid-model-call across the delete does not recreate the session's event stream", async () => {
    const { metricsPort } = readyInfo(worker);
    const fencedBefore = await metric(metricsPort, "fleet_fenced_writes_total");
    // The model answers after 3 s, streaming its text in pieces (MESSAGE_DELTA events).
    const slow = {
      model: {
        provider: "scripted" as const,
        steps: [{ text: "a long answer, streamed in four pieces", delayMs: 3_000 }],
      },
    };
    const { id } = await a.createSession({ agent: slow });
    await a.send(id, "go");
    const stream = eventStreamKey(fleet.config.prefix, id);
    await waitFor(
      async () =>
        ((await fleet.redis.xrange(stream, "-", "+")) as [string, string[]][]).some((e) =>
          e[1].includes("RUN_STARTED"),
        ),
      20_000,
      "the run started (the model call on its way)",
    );
    worker.child.kill("SIGSTOP");
    try {
      expect(await a.deleteSession(id)).toEqual({ id, deleted: true });
      // The frozen model call's time passes while the worker cannot see the delete.
      await new Promise((r) => setTimeout(r, 3_500));
    } finally {
      worker.child.kill("SIGCONT");
    }
    await waitFor(
      async () => (await metric(metricsPort, "fleet_fenced_writes_total")) > fencedBefore,
      15_000,
      "the late write fenced",
    );
    // Whatever it wrote meanwhile was refused: the stream is the delete's (SESSION_DELETED
    // last) and expires within a minute, or it is gone already.
    const entries = (await fleet.redis.xrange(stream, "-", "+")) as [string, string[]][];
    if (entries.length > 0) {
      expect(entries.at(-1)![1]).toContain("SESSION_DELETED");
      expect(entries.map((e) => e[1][1])).not.toContain("MESSAGE_DELTA");
      const ttl = await fleet.redis.pttl(stream);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(60_000);
    }
    // The sequence key holds only the tombstone, and expires too.
    const seq = await fleet.redis.hgetall(`${fleet.config.prefix}:events-seq:${id}`);
    expect(seq).toEqual({ deleted: "1" });
    expect(await fleet.redis.pttl(`${fleet.config.prefix}:events-seq:${id}`)).toBeGreaterThan(0);
    const events = await a.getSession(id).catch((e: { status: number }) => e.status);
    expect(events).toBe(404);
  }, 60_000);
});
