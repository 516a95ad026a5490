/**
 * What a failed job writes on its run (job-failure.ts): the text (message only, scrubbed,
 * clipped), and when it writes nothing — its lease not proven, an outage, a write that does not
 * answer. The statement's own fence is test/job-failure-recorded.test.ts's.
 */
import { readFile } from "node:fs/promises";
import { type AddressInfo, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { jobFailureText, MAX_ERROR_CHARS } from "../src/shared/failure-text.js";
import { FAILURE_WRITE_MS, recordJobFailure } from "../src/worker/job-failure.js";

const fence = { sessionId: "s", epoch: 3 };
const held = { isValid: () => true };

function recorder(answer: () => Promise<boolean> = async () => true) {
  const calls: [typeof fence, string, string][] = [];
  return {
    calls,
    writes: {
      recordRunFailure: (f: typeof fence, runId: string, error: string) => {
        calls.push([f, runId, error]);
        return answer();
      },
    },
  };
}

describe("jobFailureText", () => {
  it("is the message alone, scrubbed of the environment's keys and key-shaped text, clipped", () => {
    const env = { TEAM_API_KEY: "a-long-team-secret" };
    const error = new TypeError("Cannot read x with a-long-team-secret and sk-abcdefghijklmnop");
    expect(jobFailureText(error, env)).toBe("Cannot read x with [redacted] and sk-[redacted]");
    const long = jobFailureText(new Error(`a-long-team-secret ${"y".repeat(5 * MAX_ERROR_CHARS)}`), env);
    expect(long.startsWith("[redacted] yyy")).toBe(true);
    expect(long).toMatch(/… \(\d+ characters in all\)$/);
    expect(long.length).toBeLessThan(MAX_ERROR_CHARS + 40);
  });

  it("says what it can of a value with no message", () => {
    expect(jobFailureText("boom", {})).toBe("boom");
    expect(jobFailureText(new RangeError(""), {})).toBe("RangeError");
    expect(jobFailureText(Object.create(null), {})).toBe("{}");
    expect(jobFailureText(undefined, {})).toBe("undefined");
  });
});

describe("recordJobFailure", () => {
  it("writes the text on the run, fenced by the job's epoch", async () => {
    const { calls, writes } = recorder();
    await recordJobFailure(writes, held, fence, "r1", new Error("bad"));
    expect(calls).toEqual([[fence, "r1", "bad"]]);
  });

  it("writes no path or address of the worker's: a tenant reads the run's error", async () => {
    const { calls, writes } = recorder();
    // A real file system error and a real refused connection, as operator code (a tool's
    // wrapper, an extension) lets them escape: their messages name the worker's own places.
    const missing = join(tmpdir(), `fleet-job-failure-${process.pid}`, "operator-config.json");
    const fsError = await readFile(missing).catch((error: unknown) => error);
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const { port } = taken.address() as AddressInfo;
    const second = createServer();
    const netError = await new Promise<unknown>((resolve) =>
      second.on("error", resolve).listen(port, "127.0.0.1"),
    );
    await new Promise<void>((resolve) => taken.close(() => resolve()));
    await recordJobFailure(writes, held, fence, "r1", fsError);
    await recordJobFailure(writes, held, fence, "r2", netError);
    const [fsText, netText] = calls.map(([, , text]) => text);
    // Before: "ENOENT: no such file or directory, open '/tmp/fleet-job-failure-…/operator-config.json'"
    expect(fsText).not.toContain(tmpdir());
    expect(fsText).not.toContain("operator-config.json");
    expect(fsText).toMatch(/^ENOENT: no such file or directory, open /);
    // Before: "listen EADDRINUSE: address already in use 127.0.0.1:PORT"
    expect(netText).not.toContain("127.0.0.1");
    expect(netText).toMatch(/^listen EADDRINUSE: address already in use /);
    // The operator's log line ("job failed") keeps them.
    expect(jobFailureText(fsError, {})).toContain(missing);
  });

  it("writes nothing without a proven lease, for an outage, or without the write", async () => {
    const { calls, writes } = recorder();
    await recordJobFailure(writes, { isValid: () => false }, fence, "r1", new Error("bad"));
    const outage = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
    await recordJobFailure(writes, held, fence, "r1", outage);
    const closed = Object.assign(new Error("write CONNECTION_CLOSED"), { code: "CONNECTION_CLOSED" });
    await recordJobFailure(writes, held, fence, "r1", closed);
    await recordJobFailure({}, held, fence, "r1", new Error("bad"));
    expect(calls).toEqual([]);
  });

  it(
    "never throws: a write refused, or one that never answers (given up after FAILURE_WRITE_MS)",
    async () => {
      const refused = recorder(() => Promise.reject(new Error("fenced")));
      await expect(
        recordJobFailure(refused.writes, held, fence, "r1", new Error("bad")),
      ).resolves.toBeUndefined();
      const silent = recorder(() => new Promise<boolean>(() => {}));
      await expect(
        recordJobFailure(silent.writes, held, fence, "r1", new Error("bad")),
      ).resolves.toBeUndefined();
      expect(silent.calls).toHaveLength(1);
    },
    FAILURE_WRITE_MS * 5,
  );
});
