/**
 * Batches at scale, as a backend submitting thousands: 3,000 scripted sessions in three parts
 * of an open batch, two worker processes, a sweeper process and two API processes. While the
 * sessions complete: the counts of both APIs stay between what Postgres showed just before and
 * just after each read (never over the total, never backwards), every SESSION_ENDED of the
 * batch's stream names a session Postgres has ended (once), and the results read part-way,
 * broken and resumed hold every session once. Then a cancel part-way, an idempotent submit sent
 * twice at once, customIds repeated across batches, and a batch of one and of the maximum.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import type { BatchJson } from "../src/shared/store/batches.js";
import { type ApiProcess, spawnApi } from "./support/api-process.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { startTcpProxy } from "./support/tcp-proxy.js";

const PART = 1_000;

const agent = (i: number) =>
  i % 7 === 0
    ? {
        model: {
          provider: "scripted" as const,
          steps: [
            { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 50 } }] },
            { text: `slept ${i}` },
          ],
        },
        tools: ["sleep"],
      }
    : { model: { provider: "scripted" as const, steps: [{ text: `out ${i}` }] } };

describe("batches of thousands", () => {
  let fleet: FleetEnv;
  let apis: ApiProcess[];
  let a: FleetClient;
  let b: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-scale");
    apis = await Promise.all([spawnApi(fleet), spawnApi(fleet)]);
    a = new FleetClient({ baseUrl: apis[0]!.url });
    b = new FleetClient({ baseUrl: apis[1]!.url });
    await fleet.spawnSweeper();
  }, 120_000);
  afterAll(async () => {
    for (const api of apis ?? []) if (!api.signalled()) api.signal();
    await Promise.all((apis ?? []).map((api) => api.exited));
    await fleet?.close();
  });

  /** Sessions of the batch Postgres shows terminal: cancelled, parked, or no unfinished run and history done. */
  async function terminalInPostgres(batchId: string): Promise<number> {
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from sessions s
       where s.batch_id = ${batchId}
         and (s.status in ('cancelled', 'parked')
           or (not exists (select 1 from runs r where r.session_id = s.id and r.status <> 'ended')
               and (s.tail_state = 'completed' or not s.run_started)))`;
    return row!.n;
  }

  it("3,000 sessions: counts, the event stream and the results agree with Postgres at every sample", async () => {
    const workers = await Promise.all([
      fleet.spawnWorker({ WORKER_CONCURRENCY: "16" }),
      fleet.spawnWorker({ WORKER_CONCURRENCY: "16" }),
    ]);
    const sessions = (from: number) =>
      Array.from({ length: PART }, (_, k) => ({
        agent: agent(from + k),
        input: `go ${from + k}`,
        customId: `c-${from + k}`,
      }));
    const created = await a.createBatch(sessions(0), { open: true });
    await b.appendToBatch(created.id, sessions(PART));
    await a.appendToBatch(created.id, sessions(2 * PART), { close: true });
    const total = 3 * PART;

    // The event stream, read from the second API all along.
    const ended = new Set<string>();
    const eventProblems: string[] = [];
    let completedEvent: { counts: BatchJson["counts"]; status: string } | undefined;
    const events = (async () => {
      for await (const event of b.batchEvents(created.id)) {
        const data = event.data as { sessionId?: string; counts?: BatchJson["counts"]; status: string };
        if (event.type === "SESSION_ENDED") {
          if (ended.has(data.sessionId!)) eventProblems.push(`${data.sessionId} ended twice`);
          ended.add(data.sessionId!);
          const [row] = await fleet.database.sql<{ n: number }[]>`
            select count(*)::int as n from runs where session_id = ${data.sessionId!} and status <> 'ended'`;
          if (row!.n !== 0) eventProblems.push(`${data.sessionId} ended with a run unfinished`);
        } else if (event.type === "BATCH_COMPLETED")
          completedEvent = { counts: data.counts!, status: data.status };
      }
    })();

    // Results read while the sessions complete: a read broken part-way, then resumed with `after`.
    const partial = await fetch(`${apis[0]!.url}/v1/batches/${created.id}/results`);
    const reader = partial.body!.getReader();
    let text = "";
    while (text.split("\n").length < 1_200) {
      const { value, done } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
    }
    await reader.cancel();
    const firstLines = text.split("\n").slice(0, -1); // the last may be cut
    const lastId = (JSON.parse(firstLines.at(-1)!) as { sessionId: string }).sessionId;
    const rest = await (
      await fetch(`${apis[1]!.url}/v1/batches/${created.id}/results?after=${lastId}`)
    ).text();
    const whole = [...firstLines, ...rest.trim().split("\n")].map(
      (l) => JSON.parse(l) as { sessionId: string },
    );
    expect(whole).toHaveLength(total);
    expect(new Set(whole.map((r) => r.sessionId)).size).toBe(total);

    // The client through a proxy cut every 700 lines, while the sessions complete: it goes on
    // after the last line it read, each session once.
    const proxy = await startTcpProxy(() => apis[1]!.port);
    const cutting = (async () => {
      const viaProxy = new FleetClient({ baseUrl: `http://127.0.0.1:${proxy.port}` });
      const ids: string[] = [];
      for await (const r of viaProxy.batchResults(created.id)) {
        ids.push(r.sessionId);
        if (ids.length % 700 === 0) proxy.cut();
      }
      return ids;
    })();

    // Counts from both APIs, bracketed by Postgres before and after each read.
    const seen: BatchJson[] = [];
    let terminalBefore = 0;
    await waitFor(
      async () => {
        const before = await terminalInPostgres(created.id);
        const batch = await (seen.length % 2 === 0 ? a : b).getBatch(created.id);
        const after = await terminalInPostgres(created.id);
        const { total: t, queued, running, completed, parked, cancelled } = batch.counts;
        const terminal = completed + parked + cancelled;
        expect(t).toBe(total);
        expect(queued + running + terminal, JSON.stringify(batch.counts)).toBe(total);
        expect(terminal).toBeGreaterThanOrEqual(before);
        expect(terminal).toBeLessThanOrEqual(after);
        expect(terminal).toBeGreaterThanOrEqual(terminalBefore);
        terminalBefore = terminal;
        seen.push(batch);
        return batch.status !== "running";
      },
      85_000,
      "the batch to end",
    );
    await events;
    const cutIds = await cutting;
    await proxy.close();
    expect(cutIds).toHaveLength(total);
    expect(new Set(cutIds).size).toBe(total);
    expect(cutIds).toEqual([...cutIds].sort());
    expect(eventProblems).toEqual([]);
    expect(ended.size).toBe(total);
    const last = seen.at(-1)!;
    expect(last.status).toBe("ended");
    expect(completedEvent?.counts).toEqual(last.counts);
    expect(last.counts.completed + last.counts.parked + last.counts.cancelled).toBe(total);

    // The results again, from the client, once it has all ended: every session once, completed.
    const results = new Map<string, string | null>();
    for await (const r of a.batchResults(created.id)) {
      expect(results.has(r.customId!)).toBe(false);
      expect(r.status).toBe("completed");
      results.set(r.customId!, r.output);
    }
    expect(results.size).toBe(total);
    expect(results.get("c-7")).toBe("slept 7");
    expect(results.get("c-2999")).toBe("out 2999");
    for (const w of workers) w.child.kill("SIGTERM");
    await Promise.all(workers.map((w) => w.exited));
  }, 180_000);

  it("3,000 sessions through a worker SIGKILLed mid-way, a tenth refused: counts bracketed, each end streamed once", async () => {
    const mixed = (i: number) =>
      i % 10 === 3
        ? { model: { provider: "scripted" as const, steps: [{ text: "no", stopReason: "refusal" }] } }
        : {
            model: {
              provider: "scripted" as const,
              steps: [
                { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: i % 3 === 0 ? 300 : 20 } }] },
                { text: `done ${i}` },
              ],
            },
            tools: ["sleep"],
          };
    const env = { WORKER_CONCURRENCY: "24" };
    const [victim, other] = await Promise.all([fleet.spawnWorker(env), fleet.spawnWorker(env)]);
    const parts = [0, 1, 2].map((p) =>
      Array.from({ length: PART }, (_, k) => ({
        agent: mixed(p * PART + k),
        input: "go",
        customId: `m-${p * PART + k}`,
      })),
    );
    const created = await a.createBatch(parts[0]!, { open: true });
    await b.appendToBatch(created.id, parts[1]!);
    await a.appendToBatch(created.id, parts[2]!, { close: true });
    const total = 3 * PART;
    const ended = new Map<string, string>();
    const twice: string[] = [];
    let completedEvent: { counts: BatchJson["counts"]; status: string } | undefined;
    const events = (async () => {
      for await (const event of a.batchEvents(created.id)) {
        const data = event.data as { sessionId?: string; counts?: BatchJson["counts"]; status: string };
        if (event.type === "SESSION_ENDED") {
          if (ended.has(data.sessionId!)) twice.push(data.sessionId!);
          ended.set(data.sessionId!, data.status);
        } else if (event.type === "BATCH_COMPLETED")
          completedEvent = { counts: data.counts!, status: data.status };
      }
    })();
    let killed = false;
    let terminalBefore = 0;
    let last: BatchJson | undefined;
    let samples = 0;
    await waitFor(
      async () => {
        const before = await terminalInPostgres(created.id);
        const batch = await (samples++ % 2 === 0 ? a : b).getBatch(created.id);
        const after = await terminalInPostgres(created.id);
        const { queued, running, completed, parked, cancelled } = batch.counts;
        const terminal = completed + parked + cancelled;
        expect(queued + running + terminal, JSON.stringify(batch.counts)).toBe(total);
        expect(terminal).toBeGreaterThanOrEqual(Math.max(before, terminalBefore));
        expect(terminal).toBeLessThanOrEqual(after);
        terminalBefore = terminal;
        if (!killed && terminal > total / 3) {
          victim!.child.kill("SIGKILL");
          killed = true;
        }
        last = batch;
        return batch.status !== "running";
      },
      85_000,
      "the batch to end",
    );
    await events;
    expect(killed).toBe(true);
    expect(twice).toEqual([]);
    expect(ended.size).toBe(total);
    expect(last!.counts).toEqual({
      total,
      queued: 0,
      running: 0,
      completed: total - 300,
      parked: 300,
      cancelled: 0,
    });
    expect(completedEvent).toEqual({ status: "ended", counts: last!.counts });
    for await (const r of b.batchResults(created.id)) {
      const i = Number(r.customId!.slice(2));
      expect(r.status, r.customId!).toBe(i % 10 === 3 ? "parked" : "completed");
      expect(ended.get(r.sessionId)).toBe(r.status);
      if (r.status === "completed") expect(r.output).toBe(`done ${i}`);
    }
    other!.child.kill("SIGTERM");
    await other!.exited;
  }, 180_000);

  it("a cancel part-way: every session ends cancelled or completed, nothing runs on, counts exact", async () => {
    const slow = (i: number) => ({
      model: {
        provider: "scripted" as const,
        steps: [{ toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 200 } }] }, { text: `done ${i}` }],
      },
      tools: ["sleep"],
    });
    const worker = await fleet.spawnWorker({ WORKER_CONCURRENCY: "16" });
    const created = await a.createBatch(
      Array.from({ length: PART }, (_, i) => ({ agent: slow(i), input: "go", customId: `k-${i}` })),
      { open: true },
    );
    await b.appendToBatch(
      created.id,
      Array.from({ length: PART }, (_, i) => ({
        agent: slow(PART + i),
        input: "go",
        customId: `k-${PART + i}`,
      })),
      { close: true },
    );
    const endedEvents = new Map<string, string>();
    let completedEvent: { counts: BatchJson["counts"]; status: string } | undefined;
    const events = (async () => {
      for await (const event of a.batchEvents(created.id)) {
        const data = event.data as { sessionId?: string; counts?: BatchJson["counts"]; status: string };
        if (event.type === "SESSION_ENDED") {
          expect(endedEvents.has(data.sessionId!)).toBe(false);
          endedEvents.set(data.sessionId!, data.status);
        } else if (event.type === "BATCH_COMPLETED")
          completedEvent = { counts: data.counts!, status: data.status };
      }
    })();
    await waitFor(
      async () => (await a.getBatch(created.id)).counts.completed >= 50,
      60_000,
      "some sessions completed",
    );
    await b.cancelBatch(created.id);
    await waitFor(
      async () => (await a.getBatch(created.id)).status !== "running",
      60_000,
      "the batch to end",
    );
    const view = await a.getBatch(created.id);
    expect(view.status).toBe("cancelled");
    // Runs the cancel found running are aborted by their worker as it hears the signal.
    const unfinished = async () => {
      const [u] = await fleet.database.sql<{ n: number; s: string }[]>`
        select count(*)::int as n, string_agg(r.status || ':' || r.kind, ',') as s from runs r
          join sessions s on s.id = r.session_id where s.batch_id = ${created.id} and r.status <> 'ended'`;
      return u!;
    };
    await waitFor(async () => (await unfinished()).n === 0, 30_000, "no run unfinished").catch(async (e) => {
      throw new Error(`${String(e)}: ${JSON.stringify(await unfinished())}`);
    });
    const [row] = await fleet.database.sql<{ unfinished: number; completed: number; cancelled: number }[]>`
      select (select count(*)::int from runs r join sessions s on s.id = r.session_id
               where s.batch_id = ${created.id} and r.status <> 'ended') as unfinished,
             count(*) filter (where status = 'active')::int as completed,
             count(*) filter (where status = 'cancelled')::int as cancelled
        from sessions where batch_id = ${created.id}`;
    expect(row!.unfinished).toBe(0);
    expect(view.counts).toEqual({
      total: 2 * PART,
      queued: 0,
      running: 0,
      completed: row!.completed,
      parked: 0,
      cancelled: row!.cancelled,
    });
    expect(row!.completed + row!.cancelled).toBe(2 * PART);
    expect(row!.cancelled).toBeGreaterThan(0);
    const statuses = new Map<string, string>();
    for await (const r of b.batchResults(created.id)) {
      expect(["completed", "cancelled"]).toContain(r.status);
      statuses.set(r.sessionId, r.status);
    }
    expect(statuses.size).toBe(2 * PART);
    await events;
    expect(completedEvent).toEqual({ status: "cancelled", counts: view.counts });
    expect(endedEvents).toEqual(statuses);
    // A part sent after the cancel is refused: the cancel closed the batch.
    const late = await a
      .appendToBatch(created.id, [{ agent: slow(0), input: "go" }])
      .catch((e: unknown) => e);
    expect((late as FleetApiError).reason).toBe("batch_closed");
    worker.child.kill("SIGTERM");
    await worker.exited;
  }, 120_000);

  it("a submit sent twice at once with one Idempotency-Key makes one batch", async () => {
    const body = Array.from({ length: PART }, (_, i) => ({
      agent: agent(1),
      customId: `i-${i}`,
      messages: [{ role: "user" as const, content: `m ${i}` }],
    }));
    const key = `scale-${Date.now()}`;
    const [one, two] = await Promise.all([
      a.createBatch(body, { idempotencyKey: key }),
      b.createBatch(body, { idempotencyKey: key }),
    ]);
    expect(two.id).toBe(one.id);
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from sessions where custom_id = 'i-0'`;
    expect(row!.n).toBe(1);

    // With input (runs and jobs), an open batch, and an append sent twice at once too.
    const worker = await fleet.spawnWorker({ WORKER_CONCURRENCY: "16" });
    const withInput = body.map((s, i) => ({ agent: s.agent, customId: `j-${i}`, input: `go ${i}` }));
    const [c1, c2, c3] = await Promise.all([
      a.createBatch(withInput, { idempotencyKey: `${key}-in`, open: true }),
      b.createBatch(withInput, { idempotencyKey: `${key}-in`, open: true }),
      a.createBatch(withInput, { idempotencyKey: `${key}-in`, open: true }),
    ]);
    expect(new Set([c1.id, c2.id, c3.id]).size).toBe(1);
    const more = withInput.map((s) => ({ ...s, customId: `${s.customId}-2` }));
    const [p1, p2] = await Promise.all([
      a.appendToBatch(c1.id, more, { idempotencyKey: `${key}-part`, close: true }),
      b.appendToBatch(c1.id, more, { idempotencyKey: `${key}-part`, close: true }),
    ]);
    expect(p2).toEqual(p1);
    await waitFor(async () => (await b.getBatch(c1.id)).status !== "running", 80_000, "the batch to end");
    const [runs] = await fleet.database.sql<{ n: number; s: number }[]>`
      select count(*)::int as n, count(distinct r.session_id)::int as s from runs r
        join sessions s on s.id = r.session_id where s.batch_id = ${c1.id}`;
    expect(runs).toEqual({ n: 2 * PART, s: 2 * PART });
    expect((await a.getBatch(c1.id)).counts).toMatchObject({ total: 2 * PART, completed: 2 * PART });
    worker.child.kill("SIGTERM");
    await worker.exited;
  }, 120_000);

  it("customIds repeated across batches, a batch of one and of the maximum", async () => {
    const one = await a.createBatch([{ agent: agent(1), customId: "same" }]);
    const two = await b.createBatch([{ agent: agent(1), customId: "same" }]);
    expect(one.id).not.toBe(two.id);
    const r1 = [];
    for await (const r of a.batchResults(one.id)) r1.push(r);
    expect(r1).toHaveLength(1);
    expect(r1[0]!.sessionId).toBe(one.sessions[0]!.id);
    expect((await a.getBatch(one.id)).counts).toMatchObject({ total: 1, completed: 1 });
    const max = await a.createBatch(Array.from({ length: PART }, () => ({ agent: agent(1) })));
    expect(max.sessions).toHaveLength(PART);
    const over = await a
      .createBatch(Array.from({ length: PART + 1 }, () => ({ agent: agent(1) })))
      .catch((e: unknown) => e);
    expect((over as FleetApiError).status).toBe(400);
    expect(over).toBeInstanceOf(FleetApiError);
  }, 60_000);
});

describe("fleet batch submit of 5,000 lines, run twice at once with one --idempotency-key", () => {
  let fleet: FleetEnv;
  let apis: ApiProcess[];

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-scale-cli");
    apis = await Promise.all([spawnApi(fleet), spawnApi(fleet)]);
  }, 120_000);
  afterAll(async () => {
    for (const api of apis ?? []) if (!api.signalled()) api.signal();
    await Promise.all((apis ?? []).map((api) => api.exited));
    await fleet?.close();
  });

  it("makes one batch of 5,000 sessions, each once", async () => {
    const dir = await mkdtemp(join(tmpdir(), "batch-scale-"));
    const file = join(dir, "sessions.jsonl");
    const lines = Array.from({ length: 5_000 }, (_, i) =>
      JSON.stringify({
        customId: `f-${i}`,
        agent: agent(1),
        messages: [{ role: "user", content: `m ${i}` }],
      }),
    );
    await writeFile(file, `${lines.join("\n")}\n`);
    const key = `cli-${Date.now()}`;
    const submit = (api: ApiProcess) =>
      runFleetCli(["batch", "submit", file, "--idempotency-key", key, "--api", api.url], fleet.env, 85_000);
    const [one, two] = await Promise.all([submit(apis[0]!), submit(apis[1]!)]);
    await rm(dir, { recursive: true, force: true });
    expect(one.code, one.stderr).toBe(0);
    expect(two.code, two.stderr).toBe(0);
    expect(two.stdout).toBe(one.stdout);
    const id = one.stdout.trim();
    const [row] = await fleet.database.sql<{ n: number; c: number; b: number }[]>`
      select count(*)::int as n, count(distinct custom_id)::int as c, count(distinct batch_id)::int as b
        from sessions`;
    expect(row).toEqual({ n: 5_000, c: 5_000, b: 1 });
    const client = new FleetClient({ baseUrl: apis[0]!.url });
    const view = await client.getBatch(id);
    expect(view).toMatchObject({ status: "ended", open: false });
    expect(view.counts).toMatchObject({ total: 5_000, completed: 5_000 });
  }, 120_000);
});
