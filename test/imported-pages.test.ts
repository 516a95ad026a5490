/**
 * A long session exported and imported again (README "Importing a long history"): one
 * POST /v1/sessions holds at most 10,000 messages, and the rest goes in pages through
 * POST /v1/sessions/:id/history while the session has run nothing. The export (GET
 * /v1/sessions/:id, paged by afterSeq) reads back the same messages with their createdAt,
 * and the imported steps' usage counts against agent.budget.maxTokens.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { MAX_HISTORY_BYTES } from "../src/producer/request-limits.js";
import { ValidationError } from "../src/shared/errors.js";
import type { Message, StoredMessage } from "../src/shared/messages.js";
import { resumePoint, toResumePointJson } from "../src/shared/resume-point.js";
import { historyBytes } from "../src/shared/store/history-bytes.js";
import { appendImportedPage } from "../src/shared/store/imported-pages.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { storedHistory } from "./support/histories.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
let fleet: FleetEnv;
let client: FleetClient;
let base: string;

beforeAll(async () => {
  fleet = await createFleetEnv("importedpages");
  const started = await fleet.startApi();
  client = started.client;
  base = started.api.url;
}, 60_000);
afterAll(async () => fleet?.close());

/** `n` messages (a multiple of 4): user, a step asking a tool (10 + 1 tokens), its result, an answer (20 + 2). */
const history = (n: number, from = 0) => storedHistory(n, from);

/** The whole stored history, read as an exporter reads it: pages of 1,000 after a seq. */
async function exported(id: string): Promise<StoredMessage[]> {
  const out: StoredMessage[] = [];
  for (let after = 0; ; ) {
    const page = await client.getSession(id, { afterSeq: after, limit: 1_000 });
    out.push(...page.messages);
    if (page.nextAfterSeq == null) return out;
    after = page.nextAfterSeq;
  }
}

async function tokensUsed(id: string): Promise<number> {
  const [row] = await fleet.database.sql<
    { t: string }[]
  >`select tokens_used as t from sessions where id = ${id}`;
  return Number(row!.t);
}

describe("an imported history continued in pages", () => {
  it("round-trips a session of 12,000 messages: same messages, seqs and createdAt, same resume point", async () => {
    const original = history(12_000);
    await expect(client.createSession({ agent: AGENT, messages: original })).rejects.toMatchObject({
      status: 400,
      field: "messages",
    });
    const { id } = await client.createSession({ agent: AGENT, messages: original.slice(0, 10_000) });
    expect(await client.importMessages(id, original.slice(10_000), { afterSeq: 10_000 })).toEqual({
      lastSeq: 12_000,
    });
    expect(await exported(id)).toEqual(original);
    expect(await client.resumePoint(id)).toEqual(toResumePointJson(resumePoint(original)));
    // Every imported step's usage counts against agent.budget.maxTokens: 3,000 × (11 + 22).
    expect(await tokensUsed(id)).toBe(3_000 * 33);
  }, 60_000);

  it("stores a page only right after afterSeq: a page sent twice is refused the second time", async () => {
    const all = history(8);
    const { id } = await client.createSession({ agent: AGENT, messages: all.slice(0, 4) });
    await client.importMessages(id, all.slice(4), { afterSeq: 4 });
    await expect(client.importMessages(id, all.slice(4), { afterSeq: 4 })).rejects.toMatchObject({
      status: 409,
      reason: "seq_mismatch",
      message: expect.stringContaining("up to seq 8"),
    });
    expect((await exported(id)).map((m) => m.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it("continues a stored step: its calls answered in the page, each once", async () => {
    const all = history(4);
    const { id } = await client.createSession({ agent: AGENT, messages: all.slice(0, 2) });
    const twice: Message[] = [all[2]!, all[2]!];
    await expect(client.importMessages(id, twice, { afterSeq: 2 })).rejects.toMatchObject({
      status: 400,
      field: "messages[1].toolCallId",
    });
    await client.importMessages(id, all.slice(2), { afterSeq: 2 });
    const [row] = await fleet.database.sql<{ call_seq: number }[]>`
      select call_seq from messages where session_id = ${id} and seq = 3`;
    expect(row!.call_seq).toBe(2);
    expect(await client.resumePoint(id)).toEqual({ resumable: false, reason: "completed" });
    // A result of a call the stored step already answered: refused, naming both.
    const again = {
      role: "tool" as const,
      toolCallId: "c0",
      name: "write_file",
      content: "x",
      success: true,
    };
    const other = await client.createSession({ agent: AGENT, messages: all.slice(0, 3) });
    await expect(client.importMessages(other.id, [again], { afterSeq: 3 })).rejects.toMatchObject({
      status: 400,
      field: "messages[0].toolCallId",
      message: expect.stringContaining("the stored message with seq 3"),
    });
  });

  it("ends when the session gets a run: a page after a message is 409 runs_exist", async () => {
    const all = history(8);
    const { id } = await client.createSession({ agent: AGENT, messages: all.slice(0, 4) });
    await client.send(id, "go on");
    await expect(client.importMessages(id, all.slice(4), { afterSeq: 4 })).rejects.toMatchObject({
      status: 409,
      reason: "runs_exist",
    });
  });

  it("validates a page like an import, and knows no other tenant's session", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    await expect(
      client.importMessages(id, [{ role: "assistant", content: "x" } as Message], { afterSeq: 0 }),
    ).rejects.toMatchObject({ status: 400, field: "messages[0].stopReason" });
    await expect(client.importMessages(id, [], { afterSeq: 0 })).rejects.toMatchObject({
      status: 400,
      field: "messages",
    });
    await expect(
      client.importMessages("00000000-0000-4000-8000-000000000000", history(4), { afterSeq: 0 }),
    ).rejects.toMatchObject({ status: 404 });
  });

  it("says what is wrong with a page's fields: messages not an array, afterSeq left out", async () => {
    const { id } = await client.createSession({ agent: AGENT });
    const page = async (body: unknown) => {
      const response = await fetch(`${base}/v1/sessions/${id}/history`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      return { status: response.status, error: ((await response.json()) as { error: unknown }).error };
    };
    // As POST /v1/sessions says it; it read "must hold at least one message", for a page of one.
    for (const messages of [{ role: "user", content: "hi" }, "hi", null, 3])
      expect(await page({ afterSeq: 0, messages })).toEqual({
        status: 400,
        error: {
          code: "invalid_request",
          field: "messages",
          message: "messages: must be a JSON array of messages",
        },
      });
    expect(await page({ messages: history(4) })).toEqual({
      status: 400,
      error: { code: "invalid_request", field: "afterSeq", message: "afterSeq: is required" },
    });
    expect(await page({ afterSeq: -1, messages: history(4) })).toMatchObject({
      error: { field: "afterSeq", message: "afterSeq: must be a whole number ≥ 0" },
    });
  });
});

describe("an imported history's size", () => {
  it("is bounded over all its pages: the page that would pass MAX_HISTORY_BYTES is a 400, stored not at all", async () => {
    const big = (n: number): Message[] => [{ role: "user", content: `${n}`.padEnd(12 * 1024 * 1024, "x") }];
    const { id } = await client.createSession({ agent: AGENT, messages: big(1) });
    expect(await client.importMessages(id, big(2), { afterSeq: 1 })).toEqual({ lastSeq: 2 });
    // 36 MiB in all, each request well under the 16 MB body limit.
    const refused = await client.importMessages(id, big(3), { afterSeq: 2 }).catch((error: unknown) => error);
    expect(refused).toMatchObject({ status: 400, field: "messages" });
    expect(String((refused as Error).message)).toMatch(/about 36 MiB; it may hold at most 32 MiB/);
    const [row] = await fleet.database.sql<{ n: number; last_seq: number }[]>`
      select (select count(*)::int from messages where session_id = ${id}) as n, last_seq from sessions where id = ${id}`;
    expect(row).toEqual({ n: 2, last_seq: 2 });
    expect(MAX_HISTORY_BYTES).toBe(32 * 1024 * 1024);
  });

  it("counts texts, tool calls and provider state as stored, pages before included", async () => {
    const all = history(8);
    const { id } = await client.createSession({ agent: AGENT, messages: all.slice(0, 4) });
    const stored = historyBytes(all.slice(0, 4));
    const page = all.slice(4);
    const limit = stored + historyBytes(page);
    // The stored part is counted as historyBytes counts it (session-creation.ts stores that count
    // on the row with the messages, and heldBytes reads it back), and the page is added with
    // historyBytes too: the sum is `limit` exactly, so one byte less is refused. Only messages
    // past a row's count (written by a release before it) are summed by Postgres, from jsonb's
    // text, a space after each ':' and ',' longer than JSON.stringify's (6 bytes for each tool
    // call here); the +64 is slack for that, which this session, counted whole, does not need.
    await expect(appendImportedPage(fleet.database, "default", id, 4, page, limit - 1)).rejects.toThrow(
      ValidationError,
    );
    await expect(appendImportedPage(fleet.database, "default", id, 4, page, limit + 64)).resolves.toEqual({
      lastSeq: 8,
    });
  });
});

describe("an import's usage", () => {
  it("counts against agent.budget.maxTokens (tokens_used, which a worker's claim reads), page by page", async () => {
    const all = history(8);
    const { id } = await client.createSession({ agent: AGENT, messages: all.slice(0, 4) });
    expect(await tokensUsed(id)).toBe(33);
    await client.importMessages(id, all.slice(4), { afterSeq: 4 });
    expect(await tokensUsed(id)).toBe(66);
  });

  /** `steps` answered steps, each reporting `tokens` input and `tokens` output tokens (and `costUsd`). */
  const reporting = (steps: number, tokens: number, costUsd?: number): Message[] =>
    Array.from({ length: steps }, () => [
      { role: "user" as const, content: "u" },
      {
        role: "assistant" as const,
        content: "a",
        stopReason: "end_turn",
        usage: { inputTokens: tokens, outputTokens: tokens, ...(costUsd === undefined ? {} : { costUsd }) },
      },
    ]).flat();

  it("is bounded in all: 513 steps each reporting 2^53 - 1 tokens (past Postgres's bigint) are a 400, not a 500", async () => {
    // Before: "value out of range for type bigint" on the session's tokens_used, a 500.
    const refused = { status: 400, field: "messages" };
    const many = reporting(513, Number.MAX_SAFE_INTEGER);
    await expect(client.createSession({ agent: AGENT, messages: many })).rejects.toMatchObject(refused);
    await expect(
      client.createBatch([{ agent: AGENT }, { agent: AGENT, messages: many }]),
    ).rejects.toMatchObject({ status: 400, field: "sessions[1].messages" });
    // Two costs a number cannot add up to.
    await expect(
      client.createSession({ agent: AGENT, messages: reporting(2, 1, 1e308) }),
    ).rejects.toMatchObject(refused);
    // Page by page too: each page fits, the session's sum would not.
    const { id } = await client.createSession({ agent: AGENT, messages: reporting(1, 2 ** 51) });
    await expect(client.importMessages(id, reporting(1, 2 ** 51), { afterSeq: 2 })).rejects.toMatchObject(
      refused,
    );
    expect(await tokensUsed(id)).toBe(2 ** 52);
    // What fits is stored as it is.
    const fits = reporting(1, (Number.MAX_SAFE_INTEGER - 1) / 2);
    const { id: exact } = await client.createSession({ agent: AGENT, messages: fits });
    expect(await tokensUsed(exact)).toBe(Number.MAX_SAFE_INTEGER - 1);
  });
});

describe("an import's cost", () => {
  const costing = (costUsd: number): Message[] => [
    { role: "user", content: "u" },
    {
      role: "assistant",
      content: "a",
      stopReason: "end_turn",
      usage: { inputTokens: 1, outputTokens: 1, costUsd },
    },
  ];

  it("is bounded: one step's costUsd of 1e308 is a 400, not a session whose usage reads costUsd: null", async () => {
    // Before: taken (201), and every usage of the session — GET /v1/sessions/:id, its batch's
    // results and ?include=usage — answered `costUsd: null` (the sum rounded to 1e-9 USD overflowed).
    for (const huge of [1e308, 2e299, Number.MAX_SAFE_INTEGER * 2])
      await expect(client.createSession({ agent: AGENT, messages: costing(huge) })).rejects.toMatchObject({
        status: 400,
        field: "messages",
      });
    await expect(client.createBatch([{ agent: AGENT, messages: costing(1e308) }])).rejects.toMatchObject({
      status: 400,
      field: "sessions[0].messages",
    });
    // Page by page too.
    const { id: paged } = await client.createSession({ agent: AGENT, messages: costing(1) });
    await expect(
      client.importMessages(paged, costing(Number.MAX_SAFE_INTEGER * 2), { afterSeq: 2 }),
    ).rejects.toMatchObject({ status: 400, field: "messages" });
    // What fits reads back as it was.
    const { id } = await client.createSession({ agent: AGENT, messages: costing(1234.5) });
    expect((await client.getSession(id)).usage.costUsd).toBe(1234.5);
  });
});

describe("an import's createdAt", () => {
  it("is kept when it is an ISO 8601 time with a zone, and the time of the import otherwise", async () => {
    const before = Date.now();
    const { id } = await client.createSession({
      agent: AGENT,
      messages: [
        { role: "user", content: "a", createdAt: "2024-02-29T23:59:59.123456+02:00" },
        { role: "user", content: "b", createdAt: "yesterday" },
        { role: "user", content: "c" },
      ] as Message[],
    });
    const [a, b, c] = await exported(id);
    expect(a!.createdAt).toBe("2024-02-29T21:59:59.123Z");
    for (const m of [b!, c!]) expect(Date.parse(m.createdAt)).toBeGreaterThanOrEqual(before - 1_000);
  });

  it("is the time of the import when it falls outside the years 1 to 9999 in UTC, which Postgres cannot read", async () => {
    // Before: each of these was a 500 ("date/time field value out of range", "time zone displacement out of range").
    const before = Date.now();
    const { id } = await client.createSession({
      agent: AGENT,
      messages: [
        { role: "user", content: "a", createdAt: "0000-06-01T00:00:00Z" },
        { role: "user", content: "b", createdAt: "0001-01-01T00:30:00+01:00" },
        { role: "user", content: "c", createdAt: "9999-12-31T23:00:00-02:00" },
        { role: "user", content: "d", createdAt: "0001-01-01T00:00:00Z" },
        { role: "user", content: "e", createdAt: "9999-12-31T23:59:59.999Z" },
      ] as unknown as Message[],
    });
    const [a, b, c, d, e] = await exported(id);
    for (const m of [a!, b!, c!]) expect(Date.parse(m.createdAt)).toBeGreaterThanOrEqual(before - 1_000);
    expect([d!.createdAt, e!.createdAt]).toEqual(["0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z"]);
  });
});
