/**
 * Whole answers of big sessions on one API process: an unpaged `GET /v1/sessions/:id` of a
 * session holding 1 MiB or more takes one of the places of FLEET_API_MAX_BIG_BODIES (big-
 * bodies.ts) until its answer is sent; FLEET_API_BIG_BODIES_WAITING more wait, one more is
 * answered 429 `big_answers` with Retry-After; paged and small reads never wait. Before, each
 * such read built its ~33 MB answer at once: 16 concurrent reads of a 32 MiB session took a
 * real `fleet api` from 127 MB to 1.2 GB, and nothing bounded how many ran.
 *
 * A big answer is held by its client not reading it (its 33 MB cannot all be in the sockets'
 * buffers), so nothing here depends on how long anything takes.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { get, type IncomingMessage } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type ApiProcess, killApi, spawnApi } from "./support/api-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
/** Messages of 10,000 characters: 3,300 of them, 4 requests of 825, are about 31.5 MiB. */
const PAGE = 825;
const messages = (from: number) =>
  Array.from({ length: PAGE }, (_, i) => ({ role: "user", content: `${from + i} ${"x".repeat(10_000)}` }));

/** The API process's peak resident memory (VmHWM), in MB. */
function peakMb(api: ApiProcess): number {
  const status = readFileSync(`/proc/${api.child.pid}/status`, "utf8");
  return Number(/VmHWM:\s+(\d+)/.exec(status)![1]) / 1024;
}

type Answer = { status: number; retryAfter: string | undefined; body: string };

/** A GET whose answer is read only once `read()` is called: its body's hash for a 200. */
function heldGet(
  url: string,
  requestHeaders: Record<string, string> = {},
): { headers: Promise<IncomingMessage>; read: () => Promise<Answer> } {
  const headers = new Promise<IncomingMessage>((resolve, reject) => {
    const request = get(url, { headers: requestHeaders }, (response) => {
      response.pause();
      resolve(response);
    });
    request.on("error", reject);
  });
  const read = async () => {
    const response = await headers;
    const hash = createHash("sha256");
    let text = "";
    for await (const chunk of response) {
      hash.update(chunk as Buffer);
      if (response.statusCode !== 200) text += chunk;
    }
    return {
      status: response.statusCode ?? 0,
      retryAfter: response.headers["retry-after"] as string | undefined,
      body: response.statusCode === 200 ? hash.digest("hex") : text,
    };
  };
  return { headers, read };
}

describe("whole answers of big sessions", () => {
  let fleet: FleetEnv;
  let api: ApiProcess | undefined;
  let big: string;
  let small: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("big-answers");
    api = await spawnApi(fleet);
    const post = async (path: string, body: unknown) => {
      const response = await fetch(`${api!.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      expect(response.status).toBeLessThan(300);
      return (await response.json()) as { id: string };
    };
    big = (await post("/v1/sessions", { agent: AGENT, messages: messages(0) })).id;
    for (let page = 1; page < 4; page++)
      await post(`/v1/sessions/${big}/history`, { afterSeq: page * PAGE, messages: messages(page * PAGE) });
    small = (await post("/v1/sessions", { agent: AGENT, messages: [{ role: "user", content: "hi" }] })).id;
    killApi(api);
  }, 300_000);
  afterAll(async () => {
    killApi(api);
    await fleet?.close();
  });

  it("answers one at a time, lets the next wait, refuses one more 429 big_answers; small reads go on", async () => {
    // Its answers are held unread on purpose: never closed as stalled here (FLEET_SSE_STALL_MS).
    api = await spawnApi(fleet, {
      FLEET_API_MAX_BIG_BODIES: "1",
      FLEET_API_BIG_BODIES_WAITING: "6",
      FLEET_SSE_STALL_MS: "600000",
    });
    const url = `${api.url}/v1/sessions/${big}`;
    const [row] = await fleet.database.sql<{ bytes: number }[]>`
      select history_bytes::int as bytes from sessions where id = ${big}`;
    expect(row!.bytes).toBeGreaterThan(31 * 2 ** 20);
    expect(row!.bytes).toBeLessThanOrEqual(32 * 2 ** 20);

    // The first is answered and held unread: it keeps the one place.
    const first = heldGet(url);
    expect((await first.headers).statusCode).toBe(200);
    // Six wait for it, and one more is refused at once.
    const answered: Answer[] = [];
    const rest = Array.from({ length: 7 }, () =>
      heldGet(url)
        .read()
        .then((answer) => {
          answered.push(answer);
          return answer;
        }),
    );
    await waitFor(() => answered.length > 0, 60_000, "the refused read");
    expect(answered).toHaveLength(1);
    expect(answered[0]!.status).toBe(429);
    expect(answered[0]!.retryAfter).toBe("2");
    expect(JSON.parse(answered[0]!.body).error).toMatchObject({
      code: "too_many_requests",
      limit: "big_answers",
    });
    expect(JSON.parse(answered[0]!.body).error.message).toMatch(/FLEET_API_MAX_BIG_BODIES.*\?limit=/);

    // Small reads, and pages of the big session, are answered while the big ones wait.
    const smallRead = await fetch(`${api.url}/v1/sessions/${small}`);
    expect(smallRead.status).toBe(200);
    expect(((await smallRead.json()) as { messages: unknown[] }).messages).toHaveLength(1);
    const paged = await fetch(`${url}?limit=5`);
    expect(paged.status).toBe(200);
    expect(((await paged.json()) as { messages: unknown[] }).messages).toHaveLength(5);
    // So is a poll of its tail (unpaged, afterSeq): its answer holds the messages after that
    // seq only. Asked from its first message on, it is as big as the whole and refused like it.
    const tail = await fetch(`${url}?afterSeq=${4 * PAGE - 2}`);
    expect(tail.status).toBe(200);
    expect(((await tail.json()) as { messages: { seq: number }[] }).messages.map((m) => m.seq)).toEqual([
      4 * PAGE - 1,
      4 * PAGE,
    ]);
    expect((await fetch(`${url}?afterSeq=1`)).status).toBe(429);
    // Its row as before migration 0024 (a count of 0 up to seq 0): the whole is as big, refused alike.
    await fleet.database.sql`update sessions set history_bytes = 0, history_bytes_seq = 0 where id = ${big}`;
    expect((await fetch(url)).status).toBe(429);
    await fleet.database.sql`
      update sessions set history_bytes = ${row!.bytes}, history_bytes_seq = ${4 * PAGE} where id = ${big}`;
    expect(answered).toHaveLength(1);

    // The held one read: the six waiting are answered in turn, each the same whole session.
    const whole = await first.read();
    expect(whole.status).toBe(200);
    const all = await Promise.all(rest);
    expect(all.filter((a) => a.status === 200).map((a) => a.body)).toEqual(Array(6).fill(whole.body));
    expect(all.filter((a) => a.status === 429)).toHaveLength(1);

    // Seven whole answers of ~33 MB, one at a time: 583 MB here; with every one taken at once
    // (FLEET_API_MAX_BIG_BODIES=100, as before this place) the same reads took it to 1,028 MB.
    const peak = peakMb(api);
    console.log(`peak RSS of fleet api after 7 whole answers of 32 MiB, one place: ${peak.toFixed(0)} MB`);
    expect(peak).toBeLessThan(800);
  }, 300_000);

  it("an answer its client takes nothing of is closed after FLEET_SSE_STALL_MS, so that it cannot hold its place from every other tenant", async () => {
    // The big session is tenant default's (created without a key); another tenant sends a
    // big body, which needs the one place.
    killApi(api);
    const keys = new ApiKeys(fleet.database);
    const owner = (await keys.create("default")).key;
    const other = (await keys.create("other")).key;
    api = await spawnApi(fleet, {
      FLEET_API_MAX_BIG_BODIES: "1",
      FLEET_API_BIG_BODIES_WAITING: "4",
      FLEET_SSE_STALL_MS: "1500",
    });
    const held = heldGet(`${api.url}/v1/sessions/${big}`, { authorization: `Bearer ${owner}` });
    const response = await held.headers;
    expect(response.statusCode).toBe(200);
    // 1.1 MB of input: a big body, which waits for the place the unread answer holds.
    let created: { status: number; text: string } | undefined;
    fetch(`${api.url}/v1/batches`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${other}` },
      body: JSON.stringify({
        sessions: [0, 1].map((i) => ({ agent: AGENT, input: `${i} ${"y".repeat(550_000)}` })),
      }),
    })
      .then(async (answer) => {
        created = { status: answer.status, text: await answer.text() };
      })
      .catch((error: unknown) => {
        created = { status: -1, text: String(error) };
      });
    // Before, the answer held its place for as long as its client stayed and read nothing, and
    // the other tenant's batch waited with it, for ever.
    await waitFor(() => created !== undefined, 60_000, "the other tenant's big batch answered");
    expect(created!.status, created!.text).toBe(201);
    // The unread answer's connection was closed by the API, its answer cut: read now, it ends
    // before the whole session (short of its Content-Length: an aborted response).
    let bytes = 0;
    const ended = new Promise<string>((resolve) => {
      response.on("data", (chunk: Buffer) => {
        bytes += chunk.length;
      });
      response.once("end", () => resolve("end"));
      response.once("aborted", () => resolve("aborted"));
      response.once("error", () => resolve("error"));
    });
    response.resume();
    expect(await ended).not.toBe("end");
    expect(bytes).toBeLessThan(31 * 2 ** 20);
  }, 300_000);

  it("turning a big session's event stream on (which writes its history into the stream) waits for a place of the big work, as its whole answer does", async () => {
    // Before, PATCH {"sessionEvents": true} read and wrote the whole history at once, outside
    // the places: 12 at once of this 32 MiB session took `fleet api` to 1 GB, three rounds of
    // them to 2.4 GB, where 16 whole answers of it peak at 742 MB.
    killApi(api);
    const key = (await new ApiKeys(fleet.database).create("default")).key;
    api = await spawnApi(fleet, {
      FLEET_API_MAX_BIG_BODIES: "1",
      FLEET_API_BIG_BODIES_WAITING: "0",
      FLEET_SSE_STALL_MS: "600000",
    });
    const patch = async (on: boolean) => {
      const answer = await fetch(`${api!.url}/v1/sessions/${big}`, {
        method: "PATCH",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ sessionEvents: on }),
      });
      return { status: answer.status, json: (await answer.json()) as { error?: { limit?: string } } };
    };
    // Off is cheap (the stream dropped): never waits.
    expect((await patch(false)).status).toBe(200);
    // The one place held by an unread whole answer, and no room to wait: refused at once.
    const held = heldGet(`${api.url}/v1/sessions/${big}`, { authorization: `Bearer ${key}` });
    expect((await held.headers).statusCode).toBe(200);
    const refused = await patch(true);
    expect(refused.status).toBe(429);
    expect(refused.json.error).toMatchObject({ code: "too_many_requests", limit: "big_answers" });
    // Nothing of it was done: the setting is as it was.
    const [row] = await fleet.database.sql<{ on: boolean }[]>`
      select session_events as on from sessions where id = ${big}`;
    expect(row?.on).toBe(false);
    // The place freed, it is done.
    expect((await held.read()).status).toBe(200);
    const done = await patch(true);
    expect(done.status, JSON.stringify(done.json)).toBe(200);
    expect(done.json).toEqual({ id: big, sessionEvents: true });
  }, 300_000);
});
