/**
 * Big request bodies (1 MiB or more) on one API process: at most FLEET_API_MAX_BIG_BODIES are
 * worked on at once and FLEET_API_BIG_BODIES_WAITING wait; one more is answered 429
 * `big_bodies` with Retry-After, nothing of it done, while small requests are answered as
 * always. Before, every big body was taken at once (bench/big-bodies.ts: 4 concurrent 16 MiB
 * imports held every other request for seconds, and each added ~150 MB to the API).
 *
 * The bodies are held in Postgres (the test locks `sessions` against inserts), so nothing here
 * depends on how long anything takes.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

/** A session of `n` user messages of 600 characters: 2,000 make a body of about 1.3 MB. */
function bigBody(n = 2_000): string {
  const text = "x".repeat(600);
  return JSON.stringify({
    agent: AGENT,
    messages: Array.from({ length: n }, (_, i) => ({ role: "user", content: `${i} ${text}` })),
  });
}

describe("big request bodies", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let url: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("big-bodies", {
      env: { FLEET_API_MAX_BIG_BODIES: "1", FLEET_API_BIG_BODIES_WAITING: "1" },
    });
    const started = await fleet.startApi();
    client = started.client;
    url = started.api.url;
  });
  afterAll(async () => {
    await fleet?.close();
  });

  const post = (body: string) =>
    fetch(`${url}/v1/sessions`, { method: "POST", headers: { "content-type": "application/json" }, body });

  it("works on one at a time, lets one wait, answers a third 429 big_bodies; small requests go on", async () => {
    const small = await client.createSession({ agent: AGENT, messages: [{ role: "user", content: "hi" }] });
    const body = bigBody();
    expect(Buffer.byteLength(body)).toBeGreaterThan(1024 * 1024);
    let answered: { status: number; json: { error?: { limit?: string } }; retryAfter: string | null }[] = [];
    await fleet.database.sql.begin(async (tx) => {
      // Inserts into sessions wait for this transaction: a big body worked on stays so.
      await tx`lock table sessions in exclusive mode`;
      const sent = [post(body), post(body), post(body)].map((p) =>
        p.then(async (response) => {
          const result = {
            status: response.status,
            json: (await response.json()) as { error?: { limit?: string } },
            retryAfter: response.headers.get("retry-after"),
          };
          answered.push(result);
          return result;
        }),
      );
      // One of the three is refused while the other two are held (one working, one waiting).
      await waitFor(() => answered.length > 0, 30_000, "the first answer");
      expect(answered).toHaveLength(1);
      expect(answered[0]!.status).toBe(429);
      expect(answered[0]!.json.error).toMatchObject({ code: "too_many_requests", limit: "big_bodies" });
      expect(answered[0]!.retryAfter).toBe("2");
      // A small request is answered meanwhile (reads do not wait for the lock).
      expect((await client.getSession(small.id)).messages).toHaveLength(1);
      // Only the working body reaches Postgres; the waiting one is not parsed yet.
      await waitFor(
        async () => (await waitingInserts(fleet)) === 1,
        30_000,
        "the working body's insert to wait for the lock",
      );
      expect(answered).toHaveLength(1);
      answered = [];
      void sent;
      return undefined;
    });
    // The lock is gone: the working body and then the waiting one are stored.
    await waitFor(() => answered.length === 2, 30_000, "the two held bodies' answers");
    expect(answered.map((a) => a.status)).toEqual([201, 201]);
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from sessions where last_seq = 2000`;
    expect(row?.n).toBe(2);
  });

  it("the client sends a body refused with big_bodies again after its Retry-After", async () => {
    const messages = Array.from({ length: 2_000 }, (_, i) => ({
      role: "user" as const,
      content: `${i} ${"y".repeat(600)}`,
    }));
    let created: Promise<{ id: string }> | undefined;
    const refusedBefore = await refused(url);
    await fleet.database.sql.begin(async (tx) => {
      await tx`lock table sessions in exclusive mode`;
      const held = [post(bigBody()), post(bigBody())];
      await waitFor(async () => (await waitingInserts(fleet)) === 1, 30_000, "a body held in Postgres");
      // Two held (one working, one waiting): the client's body is refused, and it waits and retries.
      created = client.createSession({ agent: AGENT, messages });
      await waitFor(async () => (await refused(url)) > refusedBefore, 30_000, "the client's body refused");
      void held;
      return undefined;
    });
    const { id } = await created!;
    expect((await client.getSession(id)).messages).toHaveLength(2_000);
  });
});

/** `fleet_requests_limited_total{limit="big_bodies"}` of the API. */
async function refused(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/^fleet_requests_limited_total\{[^}]*limit="big_bodies"[^}]*\} (\S+)/m.exec(text)?.[1] ?? 0);
}

/** Statements of this fleet's API waiting for a lock in Postgres. */
async function waitingInserts(fleet: FleetEnv): Promise<number> {
  const [row] = await fleet.database.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where datname = current_database() and wait_event_type = 'Lock' and query ilike '%with%insert into sessions%'`;
  return row?.n ?? 0;
}
