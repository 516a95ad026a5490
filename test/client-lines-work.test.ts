/**
 * The client's Server-Sent Events reader (`parseSse`, over text-lines.ts) searches each
 * character for a line end a bounded number of times, however the body is cut: one large event
 * fed a byte at a time is read in work proportional to its size. Counted, not timed: every
 * regular-expression search is counted with the characters it is handed (from its `lastIndex`
 * to the end of its input). The reader before c7537aa searched the whole unfinished buffer
 * again at each chunk (`buffered.search(...)`), O(n²) for one event in n chunks: 1.25·10⁹
 * characters handed for this 50 KB event, at most four times its size now. A size-only test (a 20 MB event
 * in 320 chunks, client-lines.test.ts) leaves that to the clock.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { parseSse } from "../src/producer/client.js";

afterEach(() => {
  vi.restoreAllMocks();
});

describe("the client's SSE reader", () => {
  it("reads one 50 KB event fed a byte at a time handing each character to a search a bounded number of times", async () => {
    const text = "x".repeat(50_000);
    const body = Buffer.from(
      `id: 1-0\nevent: MESSAGE_DELTA\ndata: ${JSON.stringify({ type: "MESSAGE_DELTA", text })}\n\n`,
    );
    async function* bytes() {
      for (let i = 0; i < body.length; i++) yield body.subarray(i, i + 1);
    }
    let handed = 0;
    const exec = RegExp.prototype.exec;
    vi.spyOn(RegExp.prototype, "exec").mockImplementation(function (this: RegExp, input: string) {
      handed += input.length - (this.global || this.sticky ? this.lastIndex : 0);
      return exec.call(this, input);
    });
    const events = [];
    for await (const event of parseSse(bytes())) events.push(event);
    vi.restoreAllMocks();
    expect(events).toHaveLength(1);
    expect(JSON.parse(events[0]?.data ?? "null")).toMatchObject({ text });
    // Linear: a few passes over the body at most.
    expect(handed).toBeLessThanOrEqual(4 * body.length);
  });
});
