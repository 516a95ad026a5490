/**
 * The page logic of `POST /v1/batches/:id/resume` (src/producer/batch-resume.ts) with small
 * fakes: order, refusals, where the next page starts, and a tenant limit part-way.
 */
import { describe, expect, it } from "vitest";
import { type BatchResumeDeps, resumeParkedPage } from "../src/producer/batch-resume.js";
import { AgentResumeError, NotFoundError, TooManyRequestsError } from "../src/shared/errors.js";
import type { ListCursor } from "../src/shared/store/session-queries.js";

/** Parked sessions s0…s(n-1), newest first; `outcome` says what resuming each one does. */
function fakeBatch(n: number, outcome: (id: string) => "ok" | "refused" | "limited" | "deleted") {
  const rows = Array.from({ length: n }, (_, i) => ({
    id: `s${i}`,
    cursor: { micros: String(1000 - i), id: `s${i}` },
  }));
  const asked: string[] = [];
  const deps: BatchResumeDeps = {
    async parked(after: ListCursor | undefined, limit: number) {
      const from = after === undefined ? 0 : rows.findIndex((r) => r.id === after.id) + 1;
      return rows.slice(from, from + limit);
    },
    async resume(sessionId: string) {
      asked.push(sessionId);
      switch (outcome(sessionId)) {
        case "ok":
          return { runId: `run-${sessionId}`, kind: "call_model" as const };
        case "refused":
          throw new AgentResumeError("context_full");
        case "limited":
          throw new TooManyRequestsError("active_sessions", 3, "too many active sessions");
        case "deleted":
          throw new NotFoundError("session");
      }
    },
    encode: (cursor) => `c:${cursor.id}`,
  };
  const decode = (c: string | null): ListCursor | undefined => {
    if (c === null) return undefined;
    const row = rows.find((r) => `c:${r.id}` === c);
    if (!row) throw new Error(`unknown cursor ${c}`);
    return row.cursor;
  };
  return { deps, asked, decode };
}

describe("resumeParkedPage", () => {
  it("resumes a page in order, names the refused ones, and the next page starts after it", async () => {
    const { deps, asked, decode } = fakeBatch(5, (id) => (id === "s1" ? "refused" : "ok"));
    const first = await resumeParkedPage(deps, undefined, 3);
    expect(first).toEqual({
      resumed: [
        { sessionId: "s0", runId: "run-s0", kind: "call_model" },
        { sessionId: "s2", runId: "run-s2", kind: "call_model" },
      ],
      refused: [{ sessionId: "s1", reason: "context_full" }],
      nextCursor: "c:s2",
    });
    const second = await resumeParkedPage(deps, decode(first.nextCursor), 3);
    expect(second.resumed.map((r) => r.sessionId)).toEqual(["s3", "s4"]);
    expect(second.nextCursor).toBeNull(); // a short page ends the pass
    expect(asked).toEqual(["s0", "s1", "s2", "s3", "s4"]);
  });

  it("a page that ends exactly at the last session gives one more, empty page", async () => {
    const { deps, decode } = fakeBatch(2, () => "ok");
    const first = await resumeParkedPage(deps, undefined, 2);
    expect(first.nextCursor).toBe("c:s1");
    expect(await resumeParkedPage(deps, decode(first.nextCursor), 2)).toEqual({
      resumed: [],
      refused: [],
      nextCursor: null,
    });
  });

  it("a tenant limit part-way answers what was done, with retryAfterSeconds and the first session not done", async () => {
    let limited = true;
    const { deps, asked, decode } = fakeBatch(4, (id) => (id === "s2" && limited ? "limited" : "ok"));
    const first = await resumeParkedPage(deps, undefined, 4);
    expect(first).toEqual({
      resumed: [
        { sessionId: "s0", runId: "run-s0", kind: "call_model" },
        { sessionId: "s1", runId: "run-s1", kind: "call_model" },
      ],
      refused: [],
      nextCursor: "c:s1",
      retryAfterSeconds: 3,
    });
    limited = false;
    const second = await resumeParkedPage(deps, decode(first.nextCursor), 4);
    expect(second.resumed.map((r) => r.sessionId)).toEqual(["s2", "s3"]);
    expect(asked).toEqual(["s0", "s1", "s2", "s2", "s3"]);
  });

  it("a session deleted after the page was read is passed over, not a 404 for the whole page", async () => {
    const { deps, asked, decode } = fakeBatch(4, (id) => (id === "s1" ? "deleted" : "ok"));
    const first = await resumeParkedPage(deps, undefined, 3);
    expect(first).toEqual({
      resumed: [
        { sessionId: "s0", runId: "run-s0", kind: "call_model" },
        { sessionId: "s2", runId: "run-s2", kind: "call_model" },
      ],
      refused: [],
      nextCursor: "c:s2",
    });
    const second = await resumeParkedPage(deps, decode(first.nextCursor), 3);
    expect(second.resumed.map((r) => r.sessionId)).toEqual(["s3"]);
    expect(asked).toEqual(["s0", "s1", "s2", "s3"]);
  });

  it("a tenant limit on a page's first session is the caller's 429; other errors propagate", async () => {
    const limited = fakeBatch(2, () => "limited");
    await expect(resumeParkedPage(limited.deps, undefined, 2)).rejects.toBeInstanceOf(TooManyRequestsError);
    const broken = fakeBatch(2, () => "ok");
    broken.deps.resume = async () => {
      throw new Error("redis is down");
    };
    await expect(resumeParkedPage(broken.deps, undefined, 2)).rejects.toThrow("redis is down");
  });
});
