/**
 * A session used for days: thousands of runs (each message sent is one) and a long history.
 * What the API reads for one request on it must not grow with the session's whole life:
 * counted in rows and index entries read (Postgres's statistics), not in time.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { FleetService } from "../src/producer/fleet-service.js";
import { sessionStreamStart } from "../src/producer/stream-places.js";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import { STREAM_START } from "../src/shared/event-expiry.js";
import { EventReader } from "../src/shared/event-reader.js";
import { eventStreamKey } from "../src/shared/events.js";
import type { Message } from "../src/shared/messages.js";
import { DEFAULT_RESUME_POLICY, progressMark } from "../src/shared/resume-policy.js";
import { AutomaticResumes } from "../src/shared/store/automatic-resumes.js";
import { BatchStore } from "../src/shared/store/batches.js";
import { queriesEnvForFile } from "./support/queries-env.js";
import { readsWhile, runsAndSessionsReads } from "./support/stat-reads.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "hi" }] } });
/** Runs of the long session: each a message sent, its input 1 KB. */
const RUNS = 3_000;

const env = queriesEnvForFile("long-session-reads");

/** A session with `RUNS` ended runs, oldest first; their ids in that order. */
async function sessionWithRuns(): Promise<{ id: string; runIds: string[] }> {
  const { id } = await env.queries.createSession({ agent: AGENT });
  const rows = await env.fleet.database.sql<{ id: string }[]>`
    insert into runs (id, session_id, tenant, kind, trigger, status, ended_reason, input, started_at, ended_at)
    select 'r-' || ${id} || '-' || lpad(i::text, 5, '0'), ${id}, 'default', 'run', 'api', 'ended', 'completed',
           repeat('x', 1024), now(), now()
      from generate_series(1, ${RUNS}) i
     order by i
    returning id`;
  await env.fleet.database.sql`analyze runs`;
  return { id, runIds: rows.map((row) => row.id) };
}

describe("a session's event stream opened without an id", () => {
  it("finds the run it starts at without reading every run of the session", async () => {
    const { id, runIds } = await sessionWithRuns();
    const reader = new EventReader(env.fleet.redis, env.fleet.config.prefix);
    const key = eventStreamKey(env.fleet.config.prefix, id);
    const start = (run?: string) => sessionStreamStart(reader, env.queries, key, id, "default", run);

    // No stream yet: the latest run's RUN_STARTED is not kept, so the stream's end (none: its start).
    expect(await start()).toEqual({ id: STREAM_START, kind: "kept" });
    // `?run=` an early run: found, and from what is kept.
    expect(await start(runIds[10])).toEqual({ id: STREAM_START, kind: "kept" });
    await expect(start(randomUUID())).rejects.toThrow(/run .* of session/);
    // Another tenant's run id of this session is not found either.
    await expect(sessionStreamStart(reader, env.queries, key, id, "other", runIds[10])).rejects.toThrow(
      /not found|run .* of session/,
    );

    const latest = await runsAndSessionsReads(env.db, () => start());
    const named = await runsAndSessionsReads(env.db, () => start(runIds[10]));
    // Before: every run of the session, 3,000 index entries and rows (with their inputs) per connect.
    expect(latest.index + latest.seq).toBeLessThan(20);
    expect(named.index + named.seq).toBeLessThan(20);
  }, 60_000);

  it("starts at the RUN_STARTED of the running run a queued latest run waits behind", async () => {
    const { id, runIds } = await sessionWithRuns();
    const running = runIds[RUNS - 2]!;
    const queued = randomUUID();
    await env.fleet.database.sql`update runs set status = 'running', ended_reason = null, ended_at = null,
                                  queue_seq = nextval('runs_queue_seq') where id = ${running}`;
    await env.fleet.database.sql`
      insert into runs (id, session_id, tenant, kind, trigger, status, input)
      values (${queued}, ${id}, 'default', 'run', 'api', 'queued', 'next')`;
    const key = eventStreamKey(env.fleet.config.prefix, id);
    const started = await env.fleet.redis.xadd(
      key,
      "*",
      "type",
      "RUN_STARTED",
      "data",
      JSON.stringify({ runId: running, kind: "run", resumeKind: null, trigger: "api" }),
    );
    const reader = new EventReader(env.fleet.redis, env.fleet.config.prefix);
    const reads = await runsAndSessionsReads(env.db, async () =>
      expect(await sessionStreamStart(reader, env.queries, key, id, "default", undefined)).toEqual({
        id: started,
        kind: "at",
      }),
    );
    expect(reads.index + reads.seq).toBeLessThan(20);
    // Named, the queued run starts at the stream's end (its RUN_STARTED comes next).
    expect(await sessionStreamStart(reader, env.queries, key, id, "default", queued)).toEqual({
      id: started,
      kind: "entry",
    });
  }, 60_000);
});

/**
 * `n` messages (a multiple of 4) whose tool results are 6 KB of text that does not compress
 * (stored out of line, in the messages table's TOAST), ending with a user's question.
 */
function bigResults(n: number): Message[] {
  const out: Message[] = [];
  for (let i = 0; i < n - 1; i += 4)
    out.push(
      { role: "user", content: `question ${i}` },
      {
        role: "assistant",
        content: "",
        toolCalls: [{ id: `c${i}`, name: "read_file", arguments: { path: `${i}.txt` } }],
        stopReason: "tool_use",
      },
      {
        role: "tool",
        toolCallId: `c${i}`,
        name: "read_file",
        content: randomBytes(4_500).toString("base64"),
        success: true,
      },
      { role: "assistant", content: `answer ${i}`, stopReason: "end_turn" },
    );
  out.push({ role: "user", content: "and now?" });
  return out;
}

/** TOAST blocks of `messages` (its texts stored out of line) read while `fn` runs. */
function toastReads(fn: () => Promise<unknown>): Promise<{ toast: number }> {
  return readsWhile(
    env.db,
    async () => {
      const [row] = await env.db.sql<{ toast: string }[]>`
        select coalesce(toast_blks_read, 0) + coalesce(toast_blks_hit, 0) as toast
          from pg_statio_user_tables where relname = 'messages'`;
      return { toast: Number(row!.toast) };
    },
    fn,
  );
}

describe("an explicit resume of a long session", () => {
  it("reads neither the history's texts nor every run", async () => {
    const messages = bigResults(2_000);
    const { id } = await env.queries.createSession({ agent: AGENT, messages });
    // Its runs so far: a thousand, ended.
    await env.fleet.database.sql`
      insert into runs (id, session_id, tenant, kind, trigger, status, ended_reason, input, started_at, ended_at)
      select ${id} || '-' || i, ${id}, 'default', 'run', 'api', 'ended', 'completed', repeat('x', 1024), now(), now()
        from generate_series(1, 1000) i`;
    await env.fleet.database.sql`analyze runs`;
    const enqueued: unknown[] = [];
    const service = new FleetService({
      queries: env.queries,
      queues: {
        enqueue: async (...args: unknown[]) => enqueued.push(args),
        enqueueMany: async () => {},
        getJob: async () => undefined,
      },
      metrics: { resumeRefusals: { inc: () => {} }, runs: { inc: () => {} } },
      toolNames: { known: async () => new Set<string>() },
      models: { endpoints: new Map(), allowedBaseUrls: [] },
    } as never);

    let resumed: { runId: string; kind: string } | undefined;
    let runs = { index: 0, seq: 0 };
    const toast = await toastReads(async () => {
      runs = await runsAndSessionsReads(env.db, async () => {
        resumed = await service.resume("default", id, {});
      });
    });
    expect(resumed?.kind).toBe("call_model");
    expect(enqueued).toHaveLength(1);
    const [run] = await env.fleet.database.sql<{ status: string; resume_kind: string }[]>`
      select status, resume_kind from runs where id = ${resumed!.runId}`;
    expect(run).toEqual({ status: "queued", resume_kind: "call_model" });
    // Before: every text of the history (1,000 results of 6 KB: 500 TOAST blocks) and
    // every run (1,000 index entries and rows).
    expect(toast.toast).toBe(0);
    expect(runs.index + runs.seq).toBeLessThan(50);

    // A second resume while that one waits joins it; the session's lock still judges the rest.
    await expect(service.resume("default", id, {})).resolves.toMatchObject({ runId: resumed!.runId });
  }, 60_000);
});

describe("an automatic resume of a long session", () => {
  it("is decided without reading the history's texts", async () => {
    const agent = parseAgentConfig({
      model: { provider: "scripted", steps: [{ text: "hi" }] },
      tools: ["read_file"],
    });
    const { id } = await env.queries.createSession({ agent, messages: bigResults(2_000) });
    const resumes = new AutomaticResumes(env.db, DEFAULT_RESUME_POLICY, {
      sessionsParked: { inc: () => {} },
    } as never);
    let first: Awaited<ReturnType<AutomaticResumes["schedule"]>> | undefined;
    const toast = await toastReads(async () => {
      first = await resumes.schedule({ sessionId: id, trigger: "sweeper" });
    });
    expect(first).toMatchObject({ action: "resume", attempt: 1, run: { resumeKind: "call_model" } });
    // Before: every text of the history, under the session's row lock (500 TOAST blocks here).
    expect(toast.toast).toBe(0);

    // The point's mark is the one of the whole history (its last message's text included).
    const [stood] = await env.fleet.database.sql<{ attempt_point: string }[]>`
      select attempt_point from sessions where id = ${id}`;
    const mark = progressMark(await env.queries.loadHistory(id));
    expect(mark).toMatch(/^call_model:.*\["user","and now\?"\]$/);
    expect(stood!.attempt_point).toBe(createHash("sha256").update(mark).digest("base64url"));
  }, 60_000);
});

describe("cancelling a long session", () => {
  it("answers its status without reading every run", async () => {
    const { id } = await sessionWithRuns();
    const queued = randomUUID();
    await env.fleet.database.sql`
      insert into runs (id, session_id, tenant, kind, trigger, status, input)
      values (${queued}, ${id}, 'default', 'run', 'api', 'queued', 'next')`;
    const service = new FleetService({
      queries: env.queries,
      batches: new BatchStore(env.db),
      queues: { enqueue: async () => {}, enqueueMany: async () => {}, getJob: async () => undefined },
      metrics: { resumeRefusals: { inc: () => {} }, runs: { inc: () => {} } },
      toolNames: { known: async () => new Set<string>() },
      models: { endpoints: new Map(), allowedBaseUrls: [] },
    } as never);
    let answer: unknown;
    const reads = await runsAndSessionsReads(env.db, async () => {
      answer = await service.cancelSession("default", id);
    });
    expect(answer).toEqual({ id, status: "cancelled", cancelled: true });
    const [run] = await env.fleet.database.sql<
      { status: string }[]
    >`select status from runs where id = ${queued}`;
    expect(run?.status).toBe("ended");
    // Before: every run of the session again for its status (3,000 index entries and rows).
    expect(reads.index + reads.seq).toBeLessThan(200);
  }, 60_000);
});
