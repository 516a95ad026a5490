/**
 * Big imports are validated and serialised a slice at a time (src/shared/event-loop-slices.ts),
 * the event loop turning between slices, so the API answers other requests meanwhile: 10,000
 * messages in one go held it for hundreds of milliseconds (bench/big-bodies.ts). Checked by
 * order, not time: a callback scheduled with setImmediate before the call runs before the
 * import's messages are through (in one go it ran only after). What comes out, and the first
 * error, are what they were.
 */
import { describe, expect, it } from "vitest";
import { FleetService } from "../src/producer/fleet-service.js";
import { ValidationError } from "../src/shared/errors.js";
import { nextTurn, SLICE_ITEMS, stringifyInSlices } from "../src/shared/event-loop-slices.js";
import { parseImportedHistory, parseImportedHistoryInSlices } from "../src/shared/messages.js";
import type { NewSession } from "../src/shared/store/session-queries.js";

const AGENT = { model: { provider: "scripted", steps: [{ text: "ok" }] } };

/** `n` messages (a multiple of 4): a question, a step asking a tool, its result, an answer. */
function history(n: number): unknown[] {
  const out: unknown[] = [];
  for (let i = 0; i < n; i += 4)
    out.push(
      { role: "user", content: `question ${i}`, createdAt: "2026-12-05T10:00:00.000Z" },
      {
        role: "assistant",
        content: "",
        toolCalls: [{ id: `c${i}`, name: "write_file", arguments: { path: `${i}.txt` } }],
        stopReason: "tool_use",
        usage: { inputTokens: 10, outputTokens: 1 },
      },
      { role: "tool", toolCallId: `c${i}`, name: "write_file", content: "ok", success: true },
      { role: "assistant", content: `answer ${i}`, stopReason: "end_turn" },
    );
  return out;
}

/**
 * A FleetService whose store and tool names are fakes: `events` gets "validated" when the
 * request's messages are through (its agents' tools are looked up next) and "stored" when the
 * store is called.
 */
function service(events: string[]): FleetService {
  /** What the store answers, once "stored" is noted. */
  const stored = <T>(answer: T): T => {
    events.push("stored");
    return answer;
  };
  return new FleetService({
    queries: {
      createSession: async () => stored({ id: "s" }),
      createSessions: async (items: NewSession[]) =>
        stored(items.map((_, i) => ({ id: `s${i}`, runId: null }))),
      appendImported: async () => stored({ lastSeq: 1 }),
    },
    queues: {},
    metrics: {},
    toolNames: {
      known: async () => {
        events.push("validated");
        return new Set<string>();
      },
    },
    models: { endpoints: new Map(), allowedBaseUrls: [] },
  } as never);
}

/** What `events` holds once `call` is done, with "turn" pushed by a setImmediate scheduled just before it. */
async function order(call: (events: string[]) => Promise<unknown>): Promise<string[]> {
  const events: string[] = [];
  setImmediate(() => events.push("turn"));
  await call(events);
  return events;
}

describe("big imports in slices", () => {
  it("POST /v1/sessions with 10,000 messages: the event loop turns before they are through", async () => {
    const events = await order((events) =>
      service(events).createSession("t", { agent: AGENT, messages: history(10_000) }),
    );
    expect(events).toEqual(["turn", "validated", "stored"]);
  });

  it("a batch of 1,000 sessions of 8 messages: the event loop turns between its sessions", async () => {
    const sessions = Array.from({ length: 1_000 }, () => ({ agent: AGENT, messages: history(8) }));
    const events = await order((events) => service(events).createBatch("t", { sessions }));
    expect(events).toEqual(["turn", "validated", "stored"]);
  });

  it("a batch of 100 sessions, each its own agent of 2,000 steps: the event loop turns between its agents", async () => {
    // 200,000 steps parsed in one go held the event loop (16 MiB of them: seconds); the agents
    // differ (their system prompts), so none is taken from another parsed before.
    const steps = Array.from({ length: 2_000 }, () => ({}));
    const sessions = Array.from({ length: 100 }, (_, i) => ({
      agent: { model: { provider: "scripted", steps }, system: `agent ${i}` },
    }));
    const events = await order((events) => service(events).createBatch("t", { sessions }));
    expect(events).toEqual(["turn", "validated", "stored"]);
  });

  it("a history page of 10,000 messages: the event loop turns before it is stored", async () => {
    const events = await order((events) =>
      service(events).importMessages("t", "s", { afterSeq: 0, messages: history(10_000) }),
    );
    expect(events).toEqual(["turn", "stored"]);
  });

  it("parses what one go parses, and refuses with the same first error", async () => {
    const messages = history(2_000);
    expect(await parseImportedHistoryInSlices(messages, "messages")).toEqual(
      parseImportedHistory(messages, "messages"),
    );
    // Two faults, in different slices: the first is named.
    const bad = history(2_000);
    bad[1_234] = { role: "user" };
    bad[1_777] = { role: "nobody", content: "x" };
    const expected = (() => {
      try {
        parseImportedHistory(bad, "messages");
      } catch (error) {
        return error as ValidationError;
      }
      throw new Error("parseImportedHistory took a bad history");
    })();
    const error = await parseImportedHistoryInSlices(bad, "messages").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect([(error as ValidationError).field, (error as ValidationError).message]).toEqual([
      expected.field,
      expected.message,
    ]);
    expect(expected.field).toMatch(/^messages\[1234\]/);
  });

  it("stringifyInSlices writes what JSON.stringify writes, turning the event loop between slices", async () => {
    const rows = Array.from({ length: SLICE_ITEMS * 3 + 7 }, (_, i) => ({
      seq: i + 1,
      content: `é "quoted" \n ${i}`,
      tool_calls: i % 3 === 0 ? [{ id: `c${i}`, arguments: { a: [1, null] } }] : null,
      missing: undefined,
    }));
    const events: string[] = [];
    setImmediate(() => events.push("turn"));
    const text = await stringifyInSlices(rows);
    events.push("done");
    expect(text).toBe(JSON.stringify(rows));
    expect(events).toEqual(["turn", "done"]);
    expect(await stringifyInSlices([])).toBe("[]");
    expect(await stringifyInSlices(rows.slice(0, SLICE_ITEMS))).toBe(
      JSON.stringify(rows.slice(0, SLICE_ITEMS)),
    );
    await nextTurn();
  });
});
