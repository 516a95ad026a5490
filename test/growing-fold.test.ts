import { describe, expect, it } from "vitest";
import { GrowingFold } from "../src/shared/growing-fold.js";
import type { Message } from "../src/shared/messages.js";
import { reportedUsage } from "../src/shared/prices.js";

/** A fold that sums, and records which items each extension read. */
function summing() {
  const read: number[][] = [];
  const fold = new GrowingFold<number, number>(
    () => 0,
    (sum, items, from) => {
      read.push(items.slice(from));
      return items.slice(from).reduce((a, b) => a + b, sum);
    },
  );
  return { fold, read };
}

describe("GrowingFold", () => {
  it("reads only what was pushed since the last question", () => {
    const { fold, read } = summing();
    const items = [1, 2, 3];
    expect(fold.of(items)).toBe(6);
    items.push(4, 5);
    expect(fold.of(items)).toBe(15);
    expect(fold.of(items)).toBe(15);
    expect(read).toEqual([
      [1, 2, 3],
      [4, 5],
    ]);
  });

  it("folds again from the start an array that was cut or whose end was replaced", () => {
    const { fold, read } = summing();
    const items = [1, 2, 3];
    fold.of(items);
    items.length = 2;
    expect(fold.of(items)).toBe(3);
    items[1] = 10;
    items.push(5);
    expect(fold.of(items)).toBe(16);
    expect(read).toEqual([
      [1, 2, 3],
      [1, 2],
      [1, 10, 5],
    ]);
  });

  it("keeps one fold per array", () => {
    const { fold } = summing();
    const a = [1];
    const b = [2, 2];
    expect([fold.of(a), fold.of(b), fold.of(a)]).toEqual([1, 4, 1]);
  });
});

describe("reportedUsage (prices.ts)", () => {
  it("sums the reported cost and tokens of the assistant steps, the same grown as counted afresh", () => {
    const step = (costUsd: number | undefined, tokens: number): Message => ({
      role: "assistant",
      content: "",
      stopReason: "end_turn",
      usage: { inputTokens: tokens, outputTokens: 1, ...(costUsd === undefined ? {} : { costUsd }) },
    });
    const history: Message[] = [{ role: "user", content: "q" }, step(0.1, 10), step(undefined, 5)];
    expect(reportedUsage.of(history)).toEqual({ costUsd: 0.1, tokens: 17 });
    history.push({ role: "user", content: "again" }, step(0.2, 20), {
      role: "assistant",
      content: "",
      stopReason: "end_turn",
      usage: null,
    } as unknown as Message);
    const fresh = reportedUsage.of(history.slice());
    expect(reportedUsage.of(history)).toEqual(fresh);
    expect(fresh).toEqual({ costUsd: 0.1 + 0.2, tokens: 38 });
  });
});
