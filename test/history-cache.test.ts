/**
 * A long history kept by a worker from one job of its session to the next (history-cache.ts):
 * the next claim reads only what was stored after it (history-reads.ts `readClaimedHistory`)
 * and gives back that very array grown by it, exactly the stored history; a kept history that
 * no longer holds (Postgres lost what it ended with) is read again whole. Each message sent to
 * a session is a job of its own: at 50,000 messages every one read the whole history again.
 * Counted here in rows postgres.js parsed and in the worker's
 * fleet_history_messages_read_total, never in time.
 */
import { drizzle } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAgentConfig } from "../src/shared/agent-config.js";
import type { Database } from "../src/shared/db/client.js";
import * as schema from "../src/shared/db/schema.js";
import { FencedError } from "../src/shared/errors.js";
import { tailStateAfter } from "../src/shared/history-tail.js";
import type { Message, StoredMessage } from "../src/shared/messages.js";
import { type Fence, FencedWrites } from "../src/shared/store/fenced-writes.js";
import { INLINE_HISTORY_MAX, readClaimedHistory } from "../src/shared/store/history-reads.js";
import { SessionQueries } from "../src/shared/store/session-queries.js";
import { HistoryCache, MESSAGE_BYTES, messageBytes } from "../src/worker/history-cache.js";
import { cursorOf } from "../src/worker/run-state.js";
import { createFleetEnv, type FleetEnv, readyInfo } from "./support/fleet-env.js";

const AGENT = parseAgentConfig({ model: { provider: "scripted", steps: [{ text: "ok" }] } });

/** A finished conversation of `n` messages (n even): question, answer, … */
function conversation(n: number, tag = ""): Message[] {
  const out: Message[] = [];
  for (let i = 0; out.length < n; i++)
    out.push(
      { role: "user", content: `question ${i}${tag}` },
      { role: "assistant", content: `answer ${i}${tag}`, stopReason: "end_turn" },
    );
  return out;
}

/** Stored messages as a job holds them (seq from 1). */
function storedOf(messages: Message[]): StoredMessage[] {
  return messages.map(
    (m, i) => ({ ...m, seq: i + 1, createdAt: "2026-12-04T00:00:00.000Z" }) as StoredMessage,
  );
}

describe("HistoryCache", () => {
  const long = (tag: string) => storedOf(conversation(INLINE_HISTORY_MAX + 2, tag));
  const bytes = (history: StoredMessage[]) => history.reduce((sum, m) => sum + messageBytes(m), 0);

  it("gives a kept history to one taker only, and keeps no short one", () => {
    const cache = new HistoryCache(10_000_000);
    const history = long("a");
    cache.put("s", history);
    expect(cache.take("s")).toBe(history);
    expect(cache.take("s")).toBeUndefined();
    cache.put("t", storedOf(conversation(INLINE_HISTORY_MAX)));
    expect(cache.take("t")).toBeUndefined();
    expect(cache.size).toEqual({ sessions: 0, bytes: 0 });
  });

  it("counts what was pushed since a history was last put back, and lets the oldest go past the bound", () => {
    const a = long("a");
    const b = long("b");
    const c = long("c");
    expect(bytes(a)).toBeGreaterThan(a.length * MESSAGE_BYTES);
    const cache = new HistoryCache(bytes(a) + bytes(b) + 2 * MESSAGE_BYTES);
    cache.put("a", a);
    cache.put("b", b);
    expect(cache.size).toEqual({ sessions: 2, bytes: bytes(a) + bytes(b) });
    // Taken, grown by a job, put back: now the most recent, and counted with what it gained.
    const taken = cache.take("a")!;
    taken.push({
      role: "user",
      content: "more",
      seq: taken.length + 1,
      createdAt: "2026-12-04T00:00:01.000Z",
    });
    cache.put("a", taken);
    expect(cache.size.bytes).toBe(bytes(a) + bytes(b));
    cache.put("c", c);
    expect(cache.take("b")).toBeUndefined();
    expect(cache.take("a")).toBe(a);
    expect(cache.take("c")).toBe(c);
  });

  it("keeps no history larger than the bound", () => {
    const history = long("a");
    const cache = new HistoryCache(bytes(history) - 1);
    cache.put("s", history);
    expect(cache.take("s")).toBeUndefined();
  });
});

describe("a claim given the history a worker kept", () => {
  let fleet: FleetEnv;
  let counted: Database;
  let writes: FencedWrites;
  let queries: SessionQueries;
  /** Message rows postgres.js has parsed through `counted` (rows with a seq and a role). */
  let rowsRead = 0;

  beforeAll(async () => {
    fleet = await createFleetEnv("historycache");
    const sql = postgres(fleet.config.databaseUrl, {
      max: 2,
      onnotice: () => {},
      fetch_types: false,
      transform: {
        row: {
          from: (row: Record<string, unknown>) => {
            if ("seq" in row && "role" in row) rowsRead++;
            return row;
          },
        },
      },
    });
    counted = { url: fleet.config.databaseUrl, sql, db: drizzle(sql, { schema }), close: () => sql.end() };
    writes = new FencedWrites(counted);
    queries = new SessionQueries(fleet.database);
  }, 60_000);
  afterAll(async () => {
    await counted?.close();
    await fleet?.close();
  });

  /** Claims `id` for `worker`, counting the message rows read. */
  async function claim(id: string, worker: string, known?: StoredMessage[]) {
    const before = rowsRead;
    const claimed = (await writes.claimSession(id, worker, known ? { known } : {}))!;
    return { claimed, rows: rowsRead - before };
  }

  async function append(
    fence: Fence,
    history: StoredMessage[],
    messages: Message[],
  ): Promise<StoredMessage[]> {
    return writes.append(fence, cursorOf(history), null, messages, tailStateAfter(history, messages));
  }

  it("reads only the message it ends with and those after it, and gives back the same array grown", async () => {
    const n = INLINE_HISTORY_MAX + 100;
    const { id } = await queries.createSession({ agent: AGENT, messages: conversation(n) });
    const first = await claim(id, "w1");
    expect(first.rows).toBe(n);
    expect(first.claimed.historyRead).toBe(n);
    const history = first.claimed.history;
    const fence = { sessionId: id, epoch: first.claimed.epoch };
    // What the job pushed (committed), then one more stored message whose answer it never
    // saw (a connection lost after the commit): the next claim reads that one too.
    history.push(...(await append(fence, history, conversation(2, " again"))));
    await append(fence, history, [{ role: "user", content: "one more" }]);
    const second = await claim(id, "w2", history);
    expect(second.rows).toBe(2);
    expect(second.claimed.historyRead).toBe(2);
    expect(second.claimed.history).toBe(history);
    expect(history).toHaveLength(n + 3);
    expect(history).toEqual(await queries.loadHistory(id));
    // Fenced like a whole read: the epoch the history was kept under is no longer the claim's.
    await expect(readClaimedHistory(fleet.database, id, first.claimed.epoch, history)).rejects.toBeInstanceOf(
      FencedError,
    );
  });

  it("reads the whole history when the kept one does not end with the stored message at its seq", async () => {
    const n = INLINE_HISTORY_MAX + 10;
    const { id } = await queries.createSession({ agent: AGENT, messages: conversation(n) });
    const kept = (await claim(id, "w1")).claimed.history;
    const fence = { sessionId: id, epoch: (await claim(id, "w2", kept.slice())).claimed.epoch };
    const lost = kept.concat(await append(fence, kept, conversation(2, " lost")));
    // As if Postgres were restored to before those two and the first were stored again (same
    // seq, role and text, a later createdAt): the kept history holds messages Postgres lost.
    await fleet.database.sql`delete from messages where session_id = ${id} and seq > ${n}`;
    await fleet.database.sql`update sessions set last_seq = ${n}, tail_state = 'completed' where id = ${id}`;
    await new Promise((resolve) => setTimeout(resolve, 5));
    const [again] = await append(fence, kept, conversation(2, " lost").slice(0, 1));
    expect(again).toMatchObject({ seq: n + 1, role: "user", content: lost[n]!.content });
    expect(again!.createdAt).not.toBe(lost[n]!.createdAt);
    for (const known of [lost, lost.slice(0, n + 1)]) {
      const fresh = await claim(id, "w3", known);
      expect(fresh.claimed.history).not.toBe(known);
      expect(fresh.rows).toBe(n + 1 + (known.length === n + 1 ? 1 : 0));
      expect(fresh.claimed.history).toEqual(await queries.loadHistory(id));
    }
  });
});

async function metric(port: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name));
  return Number(line?.split(" ").at(-1));
}

describe("a worker's runs on a long session", () => {
  let fleet: FleetEnv;

  beforeAll(async () => {
    fleet = await createFleetEnv("historycacheworker");
  }, 60_000);
  afterAll(async () => fleet?.close());

  it("read the history once, then only where the last run left it", async () => {
    const { client } = await fleet.startApi();
    const worker = await fleet.spawnWorker();
    const { metricsPort } = readyInfo(worker);
    const n = INLINE_HISTORY_MAX + 100;
    const { id } = await client.createSession({ agent: AGENT, messages: conversation(n) });
    const reads: number[] = [];
    for (let i = 0; i < 3; i++) {
      const { runId } = await client.send(id, `message ${i}`);
      expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
      reads.push(await metric(metricsPort, "fleet_history_messages_read_total"));
    }
    // The first claim reads the n imported messages; each later one only the answer the
    // run before ended with (each run appends its user message after its claim).
    expect(reads).toEqual([n, n + 1, n + 2]);
    const history = await client.getSession(id);
    expect(history.messages.map((m) => m.seq)).toEqual(Array.from({ length: n + 6 }, (_, i) => i + 1));
    expect(history.messages.slice(n).map((m) => m.content)).toEqual([
      "message 0",
      "ok",
      "message 1",
      "ok",
      "message 2",
      "ok",
    ]);
  }, 90_000);
});
