/**
 * Extensions (contracts §8) with small fakes: every hook's failure is counted, and a hook
 * that never settles fails after FLEET_HOOK_TIMEOUT_MS instead of holding its run forever.
 */
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { createMetrics } from "../src/shared/metrics.js";
import {
  defineExtension,
  Extensions,
  type RunContext,
  transcriptExtension,
} from "../src/worker/extensions.js";

const ctx: RunContext = {
  sessionId: "s",
  runId: "r",
  kind: "run",
  resumeKind: null,
  trigger: "api",
  agent: {},
  metadata: {},
  signal: new AbortController().signal,
  inputMessage: "hi",
  history: [],
};

function setUp(timeoutMs: number) {
  const metrics = createMetrics("test");
  const warnings: Record<string, unknown>[] = [];
  const never = () => new Promise<void>(() => {});
  const calls: string[] = [];
  const extensions = new Extensions(
    [
      defineExtension({
        name: "stuck",
        beforeRun: never,
        onMessage: never,
        onCommitted: never,
        afterRun: never,
        onError: never,
      }),
      defineExtension({
        name: "after",
        onCommitted: () => {
          calls.push("onCommitted");
        },
        afterRun: () => {
          calls.push("afterRun");
        },
      }),
    ],
    metrics,
    { warn: (fields: Record<string, unknown>) => warnings.push(fields) },
    timeoutMs,
  );
  const failures = async (hook: string) =>
    (await metrics.hookFailures.get()).values.find((v) => v.labels.hook === hook)?.value ?? 0;
  return { extensions, failures, warnings, calls };
}

describe("extension hooks", () => {
  it("a hook that never settles fails after the time limit: counted, logged, and the next extension's hook runs", async () => {
    const { extensions, failures, warnings, calls } = setUp(50);
    const refused = await extensions.beforeRun(ctx);
    expect(refused).toMatch(/beforeRun hook of extension "stuck" failed: .*did not finish within 50 ms/);
    await extensions.onMessage(ctx, "hi");
    await extensions.onCommitted(ctx, {
      runId: "r",
      seq: 1,
      message: { role: "user", content: "hi", seq: 1, createdAt: "2026-12-03T00:00:00.000Z" },
    });
    await extensions.afterRun(ctx, { outcome: "completed" });
    expect(calls).toEqual(["onCommitted", "afterRun"]);
    for (const hook of ["beforeRun", "onMessage", "onCommitted", "afterRun"])
      expect(await failures(hook), hook).toBe(1);
    expect(warnings.map((w) => w.hook)).toEqual(["beforeRun", "onMessage", "onCommitted", "afterRun"]);
  });

  it("a hook that finishes in time is not failed, and its own error is counted as it was", async () => {
    const metrics = createMetrics("test");
    const extensions = new Extensions(
      [
        defineExtension({
          name: "slow but done",
          afterRun: () => new Promise<void>((resolve) => setTimeout(resolve, 20)),
        }),
        defineExtension({
          name: "throws",
          onCommitted() {
            throw new Error("boom");
          },
        }),
      ],
      metrics,
      { warn: () => {} },
      1_000,
    );
    await extensions.afterRun(ctx, { outcome: "completed" });
    await extensions.onCommitted(ctx, {
      runId: "r",
      seq: 1,
      message: { role: "user", content: "hi", seq: 1, createdAt: "2026-12-03T00:00:00.000Z" },
    });
    const values = (await metrics.hookFailures.get()).values;
    expect(values.find((v) => v.labels.hook === "afterRun")?.value).toBe(0);
    expect(values.find((v) => v.labels.hook === "onCommitted")?.value).toBe(1);
  });

  it("a resume's transcript record that cannot be written is counted and the run goes on; a user's beforeRun still stops it", async () => {
    const root = await mkdtemp(join(tmpdir(), "hooks-transcript-"));
    try {
      const metrics = createMetrics("test");
      const warnings: Record<string, unknown>[] = [];
      const log = { warn: (fields: Record<string, unknown>) => warnings.push(fields) };
      // The session's file cannot be appended to (EISDIR here; a full disk, a lost mount alike).
      await mkdir(join(root, "s.jsonl"));
      const transcript = transcriptExtension(root);
      const resume: RunContext = {
        ...ctx,
        kind: "resume",
        resumeKind: "call_model",
        inputMessage: null,
        history: [{ role: "user", content: "q", seq: 1, createdAt: "2026-12-05T00:00:00.000Z" }],
      };
      // The transcript is a record, not a gate: the resume starts (before, it ended `failed`
      // with "beforeRun hook of extension "transcript" failed: EISDIR …", again at every
      // automatic resume, until the session was parked).
      expect(await new Extensions([transcript], metrics, log).beforeRun(resume)).toBeNull();
      expect(
        (await metrics.hookFailures.get()).values.find((v) => v.labels.hook === "beforeRun")?.value,
      ).toBe(1);
      expect(warnings).toMatchObject([{ extension: "transcript", hook: "beforeRun", sessionId: "s" }]);
      // Another extension's beforeRun after it still runs, and one that throws still stops the run.
      const user = defineExtension({
        name: "gate",
        beforeRun() {
          throw new Error("no");
        },
      });
      expect(await new Extensions([transcript, user], metrics, log).beforeRun(resume)).toBe(
        'beforeRun hook of extension "gate" failed: no',
      );
      // Once the file can be written, the resume's turn is recorded again.
      await rm(join(root, "s.jsonl"), { recursive: true });
      expect(await new Extensions([transcript], metrics, log).beforeRun(resume)).toBeNull();
      const lines = (await readFile(join(root, "s.jsonl"), "utf8")).trim().split("\n");
      expect(lines.map((line) => JSON.parse(line))).toMatchObject([{ runId: "r", seq: 1 }]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
