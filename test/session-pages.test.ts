/**
 * `GET /v1/sessions/:id` a page at a time: `limit` bounds the messages (with `nextAfterSeq`),
 * `runsLimit`/`runsBefore` the runs (latest first, with `nextRunsBefore`). Without them the
 * answer is the whole session as before, with no new field. Status and usage are always the
 * whole session's. `FleetClient.messages()` walks a session page by page.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

/** `pairs` user/assistant exchanges, each step reporting 10 + 1 tokens. */
function history(pairs: number): Message[] {
  return Array.from({ length: pairs }, (_, i): Message[] => [
    { role: "user", content: `question ${i}` },
    {
      role: "assistant",
      content: `answer ${i}`,
      stopReason: "end_turn",
      usage: { inputTokens: 10, outputTokens: 1 },
    },
  ]).flat();
}

describe("a session a page at a time", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  let id: string;
  const runIds: string[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("sessionpages");
    const started = await fleet.startApi();
    client = started.client;
    base = started.api.url;
    // 50 messages, and 5 runs that stay queued (no worker): the session is "queued".
    ({ id } = await client.createSession({ agent: AGENT, messages: history(25) }));
    for (let i = 0; i < 5; i++) runIds.push((await client.send(id, `more ${i}`)).runId);
  }, 60_000);
  afterAll(() => fleet?.close());

  const get = async (query: string) => readAnswer(await fetch(`${base}/v1/sessions/${id}${query}`));

  it("without paging parameters: every message and run, and no paging field", async () => {
    const whole = await get("");
    expect(whole.status).toBe(200);
    expect(whole.json.messages).toHaveLength(50);
    expect(whole.json.runs.map((r: { id: string }) => r.id)).toEqual(runIds);
    expect(whole.json).not.toHaveProperty("nextAfterSeq");
    expect(whole.json).not.toHaveProperty("nextRunsBefore");
    expect(whole.json.status).toBe("queued");
    expect(whole.json.usage).toMatchObject({ inputTokens: 250, outputTokens: 25 });
  });

  it("limit: pages of messages that meet end to end, nextAfterSeq null on the last; usage stays the whole", async () => {
    const seen: number[] = [];
    let afterSeq = 0;
    const nexts: (number | null)[] = [];
    for (let page = 0; page < 10; page++) {
      const answer = await get(`?afterSeq=${afterSeq}&limit=20`);
      expect(answer.status).toBe(200);
      seen.push(...answer.json.messages.map((m: { seq: number }) => m.seq));
      expect(answer.json.usage).toMatchObject({ inputTokens: 250, outputTokens: 25 });
      expect(answer.json.status).toBe("queued");
      nexts.push(answer.json.nextAfterSeq);
      if (answer.json.nextAfterSeq === null) break;
      afterSeq = answer.json.nextAfterSeq;
    }
    expect(nexts).toEqual([20, 40, null]);
    expect(seen).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    // Exactly the last message on a page: null, not a page that would be empty.
    expect((await get("?afterSeq=30&limit=20")).json.nextAfterSeq).toBeNull();
    expect((await get("?afterSeq=50&limit=5")).json).toMatchObject({ messages: [], nextAfterSeq: null });
  });

  it("runsLimit / runsBefore: the latest runs first, older pages by cursor; status from every run", async () => {
    const first = await get("?runsLimit=2");
    expect(first.json.runs.map((r: { id: string }) => r.id)).toEqual(runIds.slice(3));
    expect(first.json.messages).toHaveLength(50);
    expect(typeof first.json.nextRunsBefore).toBe("string");
    const second = await get(`?runsLimit=2&runsBefore=${encodeURIComponent(first.json.nextRunsBefore)}`);
    expect(second.json.runs.map((r: { id: string }) => r.id)).toEqual(runIds.slice(1, 3));
    const third = await get(`?runsLimit=2&runsBefore=${encodeURIComponent(second.json.nextRunsBefore)}`);
    expect(third.json.runs.map((r: { id: string }) => r.id)).toEqual(runIds.slice(0, 1));
    expect(third.json.nextRunsBefore).toBeNull();
    // No runs at all, and still the status their queued runs give.
    const none = await get("?runsLimit=0&limit=1");
    expect(none.json).toMatchObject({ runs: [], nextRunsBefore: null, status: "queued", nextAfterSeq: 1 });
    expect(none.json.messages).toHaveLength(1);
    // The client passes them through.
    const viaClient = await client.getSession(id, { runsLimit: 1, limit: 3, afterSeq: 47 });
    expect(viaClient.runs.map((r) => r.id)).toEqual(runIds.slice(4));
    expect(viaClient.messages.map((m) => m.seq)).toEqual([48, 49, 50]);
    expect(viaClient.nextAfterSeq).toBeNull();
  });

  it("bad paging values: 400 naming the parameter", async () => {
    for (const [query, field] of [
      ["?limit=0", "limit"],
      ["?limit=10001", "limit"],
      ["?limit=x", "limit"],
      ["?runsLimit=-1", "runsLimit"],
      ["?runsLimit=1001", "runsLimit"],
      ["?runsBefore=bm90LWEtY3Vyc29y", "runsBefore"],
      // Read as numbers, these were taken as something else without a word: an empty or blank
      // afterSeq as 0 (every message), an empty runsLimit as 0 (no runs), 0x10 as 16, 1e1 as 10.
      ["?afterSeq=", "afterSeq"],
      ["?afterSeq=%20", "afterSeq"],
      ["?afterSeq=0x10", "afterSeq"],
      ["?afterSeq=4.0", "afterSeq"],
      ["?limit=1e1", "limit"],
      ["?limit=%2B5", "limit"],
      ["?runsLimit=", "runsLimit"],
    ] as const) {
      const answer = await get(query);
      expect(answer.status, query).toBe(400);
      expect(answer.json.error.field, query).toBe(field);
    }
    // The session list's limit alike.
    for (const query of ["?limit=", "?limit=0x10", "?limit=1e1"]) {
      const answer = await readAnswer(await fetch(`${base}/v1/sessions${query}`));
      expect(answer.status, query).toBe(400);
      expect(answer.json.error.field, query).toBe("limit");
    }
    // Digits are read as always, leading zeros included.
    expect((await get("?afterSeq=047&limit=03")).json.messages.map((m: Message) => m.content)).toEqual([
      "answer 23",
      "question 24",
      "answer 24",
    ]);
  });

  it("FleetClient.messages() walks every message once, in order, one page per request", async () => {
    const seqs: number[] = [];
    for await (const message of client.messages(id, { pageSize: 7 })) seqs.push(message.seq);
    expect(seqs).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    const rest: number[] = [];
    for await (const message of client.messages(id, { afterSeq: 45 })) rest.push(message.seq);
    expect(rest).toEqual([46, 47, 48, 49, 50]);
  });

  it("limit: a page also stops at about 4 MiB of messages (at least one), and nextAfterSeq goes on", async () => {
    // Six answers of 1.5 MiB each, stored as a worker would have (an import could not hold them).
    const { id: big } = await client.createSession({ agent: AGENT });
    const text = (n: number) => `${n}`.repeat(1_536 * 1024);
    await fleet.database.sql`
      insert into messages (session_id, seq, role, content, stop_reason)
      select ${big}, g, 'assistant', repeat(g::text, 1536 * 1024), 'end_turn' from generate_series(1, 6) g`;
    await fleet.database.sql`update sessions set last_seq = 6, tail_state = 'completed' where id = ${big}`;
    const pages: number[][] = [];
    let after = 0;
    for (;;) {
      const page = await readAnswer(await fetch(`${base}/v1/sessions/${big}?limit=1000&afterSeq=${after}`));
      expect(page.status).toBe(200);
      const messages = page.json.messages as { seq: number; content: string }[];
      for (const m of messages) expect(m.content).toBe(text(m.seq));
      pages.push(messages.map((m) => m.seq));
      if (page.json.nextAfterSeq === null) break;
      after = page.json.nextAfterSeq;
    }
    // Before: one answer of all six (9 MiB); a page of 1,000 such messages was 1.5 GB.
    expect(pages).toEqual([
      [1, 2],
      [3, 4],
      [5, 6],
    ]);
    // One message larger than the bound is still a page of its own.
    await fleet.database.sql`
      insert into messages (session_id, seq, role, content, stop_reason)
      values (${big}, 7, 'assistant', repeat('x', 5 * 1024 * 1024), 'end_turn')`;
    const lone = await readAnswer(await fetch(`${base}/v1/sessions/${big}?limit=10&afterSeq=6`));
    expect(lone.json.messages.map((m: { seq: number }) => m.seq)).toEqual([7]);
    expect(lone.json.nextAfterSeq).toBeNull();
  });
});
