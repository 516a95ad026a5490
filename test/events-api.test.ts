/**
 * The event routes' rules (contracts §7, §10): 410 `expired` for an id older than what is
 * kept, another tenant's session or batch answers 404 like a missing one, bad ids are 400s,
 * at most FLEET_SSE_MAX_STREAMS_PER_TENANT streams per tenant (429, freed when a client goes
 * away, `fleet_sse_clients`), heartbeats, batch events, the client's reconnecting iterator
 * and `fleet watch`.
 */
import { spawn } from "node:child_process";
import { createServer, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient, type FleetEvent } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { startSweeper } from "../src/sweeper/sweeper-process.js";
import { exitedWithOutput } from "./support/child-exit.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { readSse, sseClients } from "./support/sse.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("event routes", () => {
  let fleet: FleetEnv;
  let base: string;
  let a: FleetClient;
  let b: FleetClient;
  let keyA: string;
  let keyB: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("eventsapi", {
      env: { FLEET_SSE_MAX_STREAMS_PER_TENANT: "2", FLEET_SSE_HEARTBEAT_MS: "200" },
    });
    const keys = new ApiKeys(fleet.database);
    keyA = (await keys.create("acme")).key;
    keyB = (await keys.create("globex")).key;
    base = (await fleet.startApi()).api.url;
    a = new FleetClient({ baseUrl: base, apiKey: keyA });
    b = new FleetClient({ baseUrl: base, apiKey: keyB });
  }, 60_000);
  afterAll(() => fleet?.close());

  const auth = (key: string) => ({ authorization: `Bearer ${key}` });
  const url = (id: string, query = "") => `${base}/v1/sessions/${id}/events${query}`;

  it("answers 410 expired for an id older than what is kept, 400 for a malformed one, 404 for another tenant's", async () => {
    const { id } = await a.createSession({ agent: AGENT });
    const writer = new EventWriter(fleet.redis, fleet.config.prefix, { maxEvents: 10, maxAgeMs: 3_600_000 });
    const ids: string[] = [];
    for (let i = 0; i < 300; i++) {
      await writer.write(id, [], [{ type: "SESSION_PARKED", reason: `r${i}` }]);
      // The write does not send the id back: its entry is the stream's newest.
      const [newest] = await fleet.redis.xrevrange(
        eventStreamKey(fleet.config.prefix, id),
        "+",
        "-",
        "COUNT",
        1,
      );
      if (newest) ids.push(newest[0]);
    }
    expect(await fleet.redis.xlen(eventStreamKey(fleet.config.prefix, id))).toBeLessThan(300);
    const old = await readSse(url(id), { after: ids[0], headers: auth(keyA), stop: () => true });
    expect(old.status).toBe(410);
    expect(old.body).toMatchObject({ error: { code: "gone", reason: "expired" } });
    const viaQuery = await readSse(url(id, `?after=${ids[0]}`), { headers: auth(keyA), stop: () => true });
    expect(viaQuery.status).toBe(410);
    // The latest id is kept: the stream resumes after it (the next event arrives live).
    await waitFor(async () => (await sseClients(base)) === 0, 10_000, "the streams before closed");
    const live = readSse(url(id), { after: ids.at(-1), headers: auth(keyA), stop: () => true });
    await waitFor(async () => (await sseClients(base)) === 1, 10_000, "the live stream open");
    await writer.write(id, [], [{ type: "SESSION_PARKED", reason: "live" }]);
    expect((await live).events).toMatchObject([
      { type: "SESSION_PARKED", data: { reason: "live", sessionId: id } },
    ]);

    const bad = await readSse(url(id, "?after=yesterday"), { headers: auth(keyA), stop: () => true });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ error: { field: "after" } });
    const badHeader = await readSse(url(id), { after: "x", headers: auth(keyA), stop: () => true });
    expect(badHeader.body).toMatchObject({ error: { field: "Last-Event-ID" } });
    // Past what Redis takes (each part an unsigned 64-bit number): a 400, not a stream that closes.
    for (const after of ["99999999999999999999-0", "0-18446744073709551616", "18446744073709551615-0"]) {
      const huge = await readSse(url(id, `?after=${after}`), { headers: auth(keyA), stop: () => true });
      expect(huge.status, after).toBe(400);
      expect(huge.body).toMatchObject({ error: { field: "after" } });
    }
    // The largest id Redis can read after is taken as an id, not refused as malformed; it is
    // past every entry of this stream, a place the stream never had (one from a stream since
    // lost, say Redis restored from an older snapshot: events-restore.test.ts), so 410.
    const edge = await readSse(url(id, "?after=18446744073709551614-18446744073709551615"), {
      headers: auth(keyA),
      stop: () => true,
      timeoutMs: 500,
    });
    expect(edge.status).toBe(410);
    expect(edge.body).toMatchObject({ error: { code: "gone", reason: "expired" } });

    const theirs = await readSse(url(id), { headers: auth(keyB), stop: () => true });
    const missing = await readSse(url("00000000-0000-4000-8000-000000000000"), {
      headers: auth(keyB),
      stop: () => true,
    });
    expect(theirs.status).toBe(404);
    expect(missing.status).toBe(404);
    expect((theirs.body as { error: { code: string } }).error.code).toBe(
      (missing.body as { error: { code: string } }).error.code,
    );
    const batch = await a.createBatch([{ agent: AGENT }]);
    const otherBatch = await readSse(`${base}/v1/batches/${batch.id}/events`, {
      headers: auth(keyB),
      stop: () => true,
    });
    expect(otherBatch.status).toBe(404);
    const noAuth = await readSse(url(id), { stop: () => true });
    expect(noAuth.status).toBe(401);
  }, 30_000);

  it("holds at most N streams per tenant, frees a slot when a client goes away, and sends heartbeats", async () => {
    const { id } = await a.createSession({ agent: AGENT });
    const open = async (key: string) => {
      const controller = new AbortController();
      const response = await fetch(url(id), { headers: auth(key), signal: controller.signal });
      return { response, close: () => controller.abort() };
    };
    const first = await open(keyA);
    const second = await open(keyA);
    expect([first.response.status, second.response.status]).toEqual([200, 200]);
    const third = await fetch(url(id), { headers: auth(keyA) });
    expect(third.status).toBe(429);
    expect(await third.json()).toMatchObject({
      error: { code: "too_many_requests", limit: "event_streams" },
    });
    expect(third.headers.get("retry-after")).toBeTruthy();
    // Another tenant has slots of its own.
    const { id: theirs } = await b.createSession({ agent: AGENT });
    const other = await fetch(`${base}/v1/sessions/${theirs}/events`, { headers: auth(keyB) });
    expect(other.status).toBe(200);
    const metrics = async () =>
      (await (await fetch(`${base}/metrics`)).text()).match(/^fleet_sse_clients\S* (\d+)/m)?.[1];
    expect(await metrics()).toBe("3");
    // Heartbeats while idle.
    const reader = (second.response.body as ReadableStream<Uint8Array>).getReader();
    let text = "";
    const deadline = Date.now() + 3_000;
    while (!text.includes(": heartbeat") && Date.now() < deadline) {
      const { value } = await reader.read();
      text += new TextDecoder().decode(value);
    }
    expect(text).toContain(": heartbeat");
    first.close();
    await other.body?.cancel();
    await waitFor(
      async () =>
        await fetch(url(id), { headers: auth(keyA) }).then(async (r) => {
          const ok = r.status === 200;
          await r.body?.cancel();
          return ok;
        }),
      5_000,
      "a freed slot",
    );
    second.close();
    await waitFor(async () => (await metrics()) === "0", 5_000, "every stream closed");
  }, 30_000);

  it("batch events: SESSION_ENDED per session with customId and status, then BATCH_COMPLETED with counts", async () => {
    const worker = await fleet.spawnWorker();
    try {
      const batch = await a.createBatch([
        { agent: AGENT, input: "one", customId: "c1" },
        { agent: AGENT, input: "two", customId: "c2" },
        { agent: AGENT, customId: "c3" },
      ]);
      const read = await readSse(`${base}/v1/batches/${batch.id}/events`, {
        headers: auth(keyA),
        stop: (e) => e.type === "BATCH_COMPLETED",
        timeoutMs: 20_000,
      });
      const ended = read.events.filter((e) => e.type === "SESSION_ENDED");
      expect(ended.map((e) => e.data.customId).sort()).toEqual(["c1", "c2", "c3"]);
      expect(ended.every((e) => e.data.status === "completed")).toBe(true);
      expect(read.events.at(-1)).toMatchObject({
        type: "BATCH_COMPLETED",
        data: { status: "ended", counts: { total: 3, completed: 3 } },
      });
      // Resuming after the second event gives exactly the rest.
      const rest = await readSse(`${base}/v1/batches/${batch.id}/events`, {
        after: read.events[1]!.id,
        headers: auth(keyA),
        stop: (e) => e.type === "BATCH_COMPLETED",
      });
      expect(rest.events.map((e) => e.id)).toEqual(read.events.slice(2).map((e) => e.id));
      // The client's iterator ends after BATCH_COMPLETED (the server keeps the stream open).
      const viaClient: string[] = [];
      const giveUp = AbortSignal.timeout(8_000);
      for await (const event of a.batchEvents(batch.id, { signal: giveUp })) viaClient.push(event.type);
      expect(giveUp.aborted).toBe(false);
      expect(viaClient).toEqual(["SESSION_ENDED", "SESSION_ENDED", "SESSION_ENDED", "BATCH_COMPLETED"]);
      // A session's MESSAGE events are its stored messages as a read gives them back, field for
      // field: the scripted model reports no usage, so both carry `usage: null` (§7, §13).
      const one = ended.find((e) => e.data.customId === "c1")!.data.sessionId as string;
      const stored = (await a.getSession(one)).messages;
      const messages = await readSse(`${base}/v1/sessions/${one}/events?after=0-0`, {
        headers: auth(keyA),
        stop: (e) => e.type === "RUN_COMPLETED",
      });
      expect(messages.events.filter((e) => e.type === "MESSAGE").map((e) => e.data.message)).toEqual(stored);
      expect(stored.find((m) => m.role === "assistant")).toMatchObject({ usage: null });
    } finally {
      worker.child.kill("SIGTERM");
      await worker.exited;
    }
  }, 40_000);

  const typeOf = (fields: string[]) => fields[fields.indexOf("type") + 1];
  const entriesOf = async (id: string) =>
    (await fleet.redis.xrange(eventStreamKey(fleet.config.prefix, id), "-", "+")) as [string, string[]][];
  const seqKeyOf = (id: string) => `${fleet.config.prefix}:events-seq:${id}`;

  /**
   * The state a SIGKILL right after a run's commit leaves: once the run's end is in the stream
   * (its worker writes it just after the commit), its last message (seq 2) and its end are
   * taken out again, and the stream's seq and ended runs (`done`, `ended`) set back.
   */
  async function loseRunEnd(id: string): Promise<void> {
    await waitFor(
      async () => (await entriesOf(id)).some(([, f]) => typeOf(f) === "RUN_COMPLETED"),
      20_000,
      "the run's end in its stream",
    );
    const lost = (await entriesOf(id)).filter(
      ([, f]) => typeOf(f) === "RUN_COMPLETED" || f.some((v) => v.includes('"seq":2')),
    );
    expect(lost.map(([, f]) => typeOf(f))).toEqual(["MESSAGE", "RUN_COMPLETED"]);
    await fleet.redis.xdel(eventStreamKey(fleet.config.prefix, id), ...lost.map(([entryId]) => entryId));
    await fleet.redis.hset(seqKeyOf(id), "seq", "1");
    await fleet.redis.hdel(seqKeyOf(id), "done", "ended");
  }

  it("a run whose writer died between committing its end and writing RUN_COMPLETED gets it when a reader looks, once, after its last message", async () => {
    const worker = await fleet.spawnWorker();
    const { id } = await a.createSession({ agent: AGENT });
    try {
      await a.send(id, "hi");
      await loseRunEnd(id);
    } finally {
      worker.child.kill("SIGKILL");
      await worker.exited;
    }
    const run = (await a.getSession(id)).runs.at(-1)!;
    // Its end is dated an hour ahead: not yet "long enough ago" for a repair.
    await fleet.database.sql`update runs set ended_at = now() + interval '1 hour' where id = ${run.id}`;

    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 10_000);
    const got: FleetEvent[] = [];
    const following = (async () => {
      for await (const event of a.events(id, { signal: controller.signal })) {
        if (event.type !== "MESSAGE_DELTA") got.push(event);
        if (event.type === "RUN_COMPLETED") controller.abort();
      }
    })();
    // Connected, with what the stream has: nothing more comes while the end is recent.
    await waitFor(async () => got.length === 2, 5_000, "the events the stream kept");
    await new Promise((r) => setTimeout(r, 600));
    expect(got.map((e) => e.type)).toEqual(["RUN_STARTED", "MESSAGE"]);
    // The end is now long enough ago: the next heartbeat's look writes it.
    await fleet.database.sql`update runs set ended_at = now() - interval '10 seconds' where id = ${run.id}`;
    try {
      await following;
    } finally {
      clearTimeout(timer);
      controller.abort();
    }
    expect(got.map((e) => [e.type, (e.data as { message?: { seq: number } }).message?.seq])).toEqual([
      ["RUN_STARTED", undefined],
      ["MESSAGE", 1],
      ["MESSAGE", 2],
      ["RUN_COMPLETED", undefined],
    ]);
    expect(got.at(-1)!.data).toMatchObject({ runId: run.id, outcome: "completed" });

    // The late writer (a frozen worker woken up) and further looks add nothing.
    const writer = new EventWriter(fleet.redis, fleet.config.prefix);
    const late = await writer.writeEntries(id, [
      { type: "RUN_COMPLETED", runId: run.id, outcome: "completed" },
    ]);
    expect(late).toMatchObject({ ok: true, written: 0 });
    expect(await writer.missingRunEnd(fleet.database, id, 0)).toBeNull();
    expect((await entriesOf(id)).filter(([, f]) => typeOf(f) === "RUN_COMPLETED")).toHaveLength(1);
    expect(await fleet.redis.hget(seqKeyOf(id), "done")).toBe(run.id);
  }, 40_000);

  it("the sweeper writes a lost run end before the resume that follows it", async () => {
    const worker = await fleet.spawnWorker();
    const { id } = await a.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [{ text: "Once upon a", stopReason: "max_output" }, { text: " time." }],
        },
        continueOnMaxOutput: true,
      },
    });
    try {
      await a.send(id, "Tell a story.");
      await waitFor(
        async () => (await a.getSession(id)).runs.at(-1)?.endedReason === "max_output",
        20_000,
        "the run ended max_output",
      );
      // As if its worker died after the commit: the last message and the run's end are lost.
      await loseRunEnd(id);

      const sweeper = await startSweeper(
        { ...loadConfig(fleet.env), logLevel: "silent" },
        { serveMetrics: false },
      );
      try {
        await waitFor(
          async () => (await a.getSession(id)).status === "completed",
          20_000,
          "the resume completed",
        );
      } finally {
        await sweeper.stop();
      }
    } finally {
      worker.child.kill("SIGKILL");
      await worker.exited;
    }
    const runs = (await a.getSession(id)).runs;
    const events = (await entriesOf(id))
      .map(([, f]) => JSON.parse(f[f.indexOf("data") + 1]!) as Record<string, unknown> & { type: string })
      .filter((e) => e.type !== "MESSAGE_DELTA")
      .map((e) =>
        e.type === "MESSAGE" ? `MESSAGE ${(e.message as { seq: number }).seq}` : `${e.type} ${e.runId}`,
      );
    expect(events).toEqual([
      `RUN_STARTED ${runs[0]!.id}`,
      "MESSAGE 1",
      `MODEL_STOPPED ${runs[0]!.id}`,
      "MESSAGE 2",
      `RUN_COMPLETED ${runs[0]!.id}`,
      `RUN_STARTED ${runs[1]!.id}`,
      "MESSAGE 3",
      "MESSAGE 4",
      `RUN_COMPLETED ${runs[1]!.id}`,
    ]);
  }, 60_000);

  it("the client's events() reconnects by itself when the API drops it, and fleet watch prints the run", async () => {
    const worker = await fleet.spawnWorker();
    try {
      const { id } = await a.createSession({
        agent: { model: { provider: "scripted", steps: [{ text: "hi there", delayMs: 600 }] } },
      });
      // A proxy that cuts every response after 150 ms: the iterator comes back with its last id.
      let connections = 0;
      const proxy = createServer((request, response) => {
        connections++;
        const upstream = httpRequest(
          `${base}${request.url}`,
          { method: request.method, headers: request.headers },
          (answer) => {
            response.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(response);
            setTimeout(() => {
              answer.destroy();
              response.destroy();
            }, 150);
          },
        );
        upstream.on("error", () => response.destroy());
        request.pipe(upstream);
      });
      await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
      const proxied = new FleetClient({
        baseUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
        apiKey: keyA,
      });
      const controller = new AbortController();
      const got: FleetEvent[] = [];
      const following = (async () => {
        for await (const event of proxied.events(id, {
          signal: controller.signal,
          maxReconnectDelayMs: 100,
        })) {
          got.push(event);
          if (event.type === "RUN_COMPLETED") controller.abort();
        }
      })();
      const watch = spawn(process.execPath, [FLEET_BIN, "watch", id, "--once", "--api", base], {
        env: { ...process.env, ...fleet.env, FLEET_API_KEY: keyA },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let watched = "";
      watch.stdout.on("data", (d) => {
        watched += d;
      });
      watch.stderr.on("data", (d) => {
        watched += d;
      });
      const watchExit = exitedWithOutput(watch);
      // Both following before the run: the proxied iterator has been cut and come back a few
      // times, and fleet watch's stream is open beside it.
      await waitFor(
        async () => connections > 3 && (await sseClients(base)) >= 2,
        15_000,
        "the iterator reconnected and fleet watch connected",
      );
      await a.send(id, "say hi");
      await following;
      proxy.close();
      expect(connections).toBeGreaterThan(3);
      expect(got.map((e) => e.type).filter((t) => t !== "MESSAGE_DELTA")).toEqual([
        "RUN_STARTED",
        "MESSAGE",
        "MESSAGE",
        "RUN_COMPLETED",
      ]);
      expect(await watchExit).toBe(0);
      expect(watched).toMatch(/run started by api/);
      expect(watched).toMatch(/#2 assistant \(end_turn\): hi there/);
      expect(watched).toMatch(/run ended: completed/);
    } finally {
      worker.child.kill("SIGTERM");
      await worker.exited;
    }
  }, 40_000);
});
