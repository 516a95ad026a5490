/**
 * A batch's results read on with `?after=SESSION_ID` while the batch is open (contracts §9; the
 * results come in session-id order). Session ids were random, so a session appended after a
 * read began sorted before its `after` as often as not and was never read. Now session ids are
 * time-ordered (UUIDv7, ordered-ids.ts), and an append makes its ids once it holds the batch's
 * row, after the batch's greatest id: two API processes appending at once commit in the order
 * of their ids. Held deterministically: API A's append is held by a proxy in front of Postgres
 * before it takes the batch's row (ids made before that lock, even time-ordered, would be
 * older than those of API B's append, which commits first), and a reader goes on with
 * `?after=` between each step. Every session is read exactly once.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningApi, startApi } from "../src/producer/api-server.js";
import { FleetClient } from "../src/producer/client.js";
import { orderedIds } from "../src/shared/ordered-ids.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { holdingProxy } from "./support/holding-proxy.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
const part = (name: string) =>
  Array.from({ length: 5 }, (_, i) => ({ customId: `${name}-${i}`, agent: AGENT }));

describe("orderedIds", () => {
  const sorted = (ids: string[]) => [...ids].sort().join() === ids.join();

  it("makes ids in ascending order, UUIDv7 at the given time", () => {
    const ids = orderedIds(1_000, Date.UTC(2026, 0, 1));
    expect(sorted(ids)).toBe(true);
    expect(new Set(ids).size).toBe(1_000);
    for (const id of ids) expect(id).toMatch(/^019b76da-a800-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it("makes ids after `after` when its time is not earlier: a clock behind, the same ms, a random UUID", () => {
    const now = Date.UTC(2026, 0, 1);
    const later = orderedIds(1, now + 60_000)[0]!;
    const behind = orderedIds(3, now, later);
    expect(sorted([later, ...behind])).toBe(true);
    // A tail at its greatest: the next ms.
    const last = "019b76da-a800-7fff-bfff-ffffffffffff";
    expect(sorted([last, ...orderedIds(2, now, last)])).toBe(true);
    const random = "ffe1a2b3-c4d5-4abc-9def-0123456789ab";
    expect(sorted([random, ...orderedIds(2, now, random)])).toBe(true);
    // An earlier `after` leaves the ids at their own time.
    expect(orderedIds(1, now + 1, orderedIds(1, now)[0]!)[0]).toMatch(/^019b76da-a801-7/);
  });

  it("counts up within a ms from random tails", () => {
    const zeros = (size: number) => Buffer.alloc(size);
    expect(orderedIds(2, 0, null, zeros)).toEqual([
      "00000000-0000-7000-8000-000000000000",
      "00000000-0000-7000-8000-000000000001",
    ]);
    expect(sorted(orderedIds(100, 0, null, randomBytes))).toBe(true);
  });

  it("takes a batch's random bytes in one call, as many as the ids use", () => {
    const sizes: number[] = [];
    const counted = (size: number) => {
      sizes.push(size);
      return randomBytes(size);
    };
    const ids = orderedIds(50, Date.UTC(2026, 0, 1), null, counted);
    expect(sorted(ids)).toBe(true);
    expect(new Set(ids).size).toBe(50);
    // A fresh tail (73 bits: 10 bytes), then 49 steps of 48 bits (6 bytes each).
    expect(sizes).toEqual([10 + 49 * 6]);
    // Counting up from `after`'s tail: every id a step.
    sizes.length = 0;
    orderedIds(3, Date.UTC(2026, 0, 1), ids.at(-1)!, counted);
    expect(sizes).toEqual([3 * 6]);
  });
});

describe("a batch's results read with ?after= while parts are appended", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let api: RunningApi;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-results-after");
    ({ api, client } = await fleet.startApi());
  }, 60_000);
  afterAll(() => fleet?.close());

  /** The session ids of the batch's results after `after` (all of them without). */
  async function resultsAfter(batchId: string, after?: string): Promise<string[]> {
    const query = after ? `?after=${encodeURIComponent(after)}` : "";
    const answer = await fetch(`${api.url}/v1/batches/${batchId}/results${query}`);
    expect(answer.status).toBe(200);
    const text = await answer.text();
    return text
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => (JSON.parse(line) as { sessionId: string }).sessionId);
  }

  it("reads every session once: a part committed later never sorts before a cursor", async () => {
    const batch = await client.createBatch(part("first"), { open: true });
    const read = await resultsAfter(batch.id);
    expect(read).toHaveLength(5);

    // API A's append, held before it takes the batch's row.
    const url = new URL(fleet.config.databaseUrl);
    const proxy = await holdingProxy(
      Number(url.port || 5432),
      "select open, session_events, cancelled_at is not null as cancelled from batches",
    );
    url.port = String(proxy.port);
    const apiA = await startApi(
      { ...fleet.config, databaseUrl: url.toString(), logLevel: "silent" },
      { port: 0 },
    );
    try {
      const appendingA = new FleetClient({ baseUrl: apiA.url }).appendToBatch(batch.id, part("a"));
      await proxy.reached;
      // API B's append commits meanwhile; a reader goes on after what it read.
      const b = await client.appendToBatch(batch.id, part("b"));
      read.push(...(await resultsAfter(batch.id, read.at(-1))));
      proxy.release();
      const a = await appendingA;
      read.push(...(await resultsAfter(batch.id, read.at(-1))));

      const all = [...batch.sessions, ...a.sessions, ...b.sessions].map((s) => s.id);
      expect(read).toHaveLength(15);
      expect([...read].sort()).toEqual([...all].sort());
      // The parts in the order they committed: the first, B's, A's.
      expect(read).toEqual([...batch.sessions, ...b.sessions, ...a.sessions].map((s) => s.id));
    } finally {
      await apiA.stop();
      await proxy.close();
    }
  }, 60_000);
});
