/**
 * Extensions (contracts §8) with small fakes: every hook's failure is counted, and a hook
 * that never settles fails after FLEET_HOOK_TIMEOUT_MS instead of holding its run forever; each
 * extension's `onError` gets an error of its own (they shared one: what the first changed, the
 * next saw); a hook that throws a value pino cannot read (a getter that throws, a revoked
 * proxy) is logged by its text (pino's own throw escaped the hook runner into the run).
 */
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { createMetrics } from "../src/shared/metrics.js";
import { defineExtension, type RunContext, RunError } from "../src/worker/extensions.js";
import { Extensions } from "../src/worker/hook-runner.js";
import { transcriptExtension } from "../src/worker/transcript-extension.js";

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

  it("a hook's error is logged with the keys it quotes scrubbed: message, stack and the request it carries", async () => {
    const lines: string[] = [];
    const log = pino({ level: "warn" }, { write: (line: string) => void lines.push(line) });
    const key = "sk-live-abcdefghijklmnopqrstuvwxyz0123";
    const extensions = new Extensions(
      [
        defineExtension({
          name: "reporter",
          afterRun() {
            // As an HTTP client's error: the message quotes the header, the error carries the request.
            throw Object.assign(
              new Error(`POST https://audit.example/runs: 401 (Authorization: Bearer ${key})`),
              {
                code: "ERR_BAD_REQUEST",
                config: { headers: { Authorization: `Bearer ${key}` } },
              },
            );
          },
        }),
      ],
      createMetrics("test"),
      log,
      1_000,
    );
    await extensions.afterRun(ctx, { outcome: "completed" });
    expect(lines).toHaveLength(1);
    // Before: the key, three times (message, stack, the request's header).
    expect(lines[0]).not.toContain(key);
    const logged = JSON.parse(lines[0]!) as { err: { message: string; stack: string; code: string } };
    expect(logged.err.message).toMatch(
      /^POST https:\/\/audit\.example\/runs: 401 \(Authorization: .*\[redacted\]\)$/,
    );
    // The stack's frames are kept.
    expect(logged.err.stack).toMatch(
      /^Error: POST https:\/\/audit\.example\/runs: 401 \(Authorization: .*\[redacted\]\)\n\s+at /,
    );
    expect(logged.err.code).toBe("ERR_BAD_REQUEST");
  });

  it("a hook's huge error is logged clipped, message and stack, saying how long it was", async () => {
    const lines: string[] = [];
    const log = pino({ level: "warn" }, { write: (line: string) => void lines.push(line) });
    const page = `<html>${"x".repeat(8_000_000)}</html>`;
    const extensions = new Extensions(
      [
        defineExtension({
          name: "quoting",
          afterRun() {
            throw new Error(page);
          },
        }),
      ],
      createMetrics("test"),
      log,
      1_000,
    );
    await extensions.afterRun(ctx, { outcome: "completed" });
    expect(lines).toHaveLength(1);
    const logged = JSON.parse(lines[0]!) as { err: { message: string; stack: string }; hook: string };
    expect(logged.hook).toBe("afterRun");
    // Before: a line of 16,000,000 characters and more (the page in the message and in the stack).
    expect(lines[0]!.length).toBeLessThan(10_000);
    expect(logged.err.message).toMatch(/^<html>x+… \(8000013 characters in all\)$/);
    // The stack's frames are kept.
    expect(logged.err.stack).toMatch(/^Error: <html>x+… \(8000013 characters in all\)\n\s+at /);
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

  it("onError: each extension gets its own copy of the error; what one changes, the next does not see", async () => {
    const seen: { message: string; outcome: string; reason?: string; tag?: unknown; isRunError: boolean }[] =
      [];
    const record = (error: RunError) =>
      seen.push({
        message: error.message,
        outcome: error.outcome,
        reason: error.reason,
        tag: (error as RunError & { tag?: unknown }).tag,
        isRunError: error instanceof RunError,
      });
    const extensions = new Extensions(
      [
        defineExtension({
          name: "reporter",
          onError(_ctx, error) {
            record(error);
            // As an error reporter does (marks it reported), and one that "redacts" it.
            Object.assign(error, { tag: "reported" });
            error.message = "redacted";
          },
        }),
        defineExtension({ name: "next", onError: (_ctx, error) => void record(error) }),
      ],
      createMetrics("test"),
      { warn: () => {} },
      1_000,
    );
    const error = new RunError("no content", "nothing_to_resume", "no_content");
    await extensions.onError(ctx, error);
    const original = {
      message: "no content",
      outcome: "nothing_to_resume",
      reason: "no_content",
      isRunError: true,
    };
    // Before: the second saw message "redacted" and tag "reported".
    expect(seen).toEqual([original, original]);
    expect(error.message).toBe("no content");
    expect((error as RunError & { tag?: unknown }).tag).toBeUndefined();
  });

  it("a hook that throws a value the logger cannot read is counted and logged; nothing throws out of the hooks", async () => {
    const lines: string[] = [];
    const log = pino({ level: "warn" }, { write: (line: string) => void lines.push(line) });
    const metrics = createMetrics("test");
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const unreadable = [
      {
        get message(): string {
          throw new Error("a getter that throws");
        },
      },
      Object.defineProperty(new Error("its stack cannot be read"), "stack", {
        get() {
          throw new Error("a stack getter that throws");
        },
      }),
      proxy,
    ];
    let thrown = 0;
    const extensions = new Extensions(
      [
        defineExtension({
          name: "odd",
          onCommitted() {
            throw unreadable[thrown++];
          },
          afterRun() {
            throw unreadable[0];
          },
        }),
      ],
      metrics,
      log,
      1_000,
    );
    const committed = {
      runId: "r",
      seq: 1,
      message: { role: "user" as const, content: "hi", seq: 1, createdAt: "2026-12-03T00:00:00.000Z" },
    };
    // Before: pino threw reading the value, out of the hook runner: the run's append failed.
    for (let i = 0; i < unreadable.length; i++) await extensions.onCommitted(ctx, committed);
    await extensions.afterRun(ctx, { outcome: "completed" });
    const failures = (await metrics.hookFailures.get()).values;
    expect(failures.find((v) => v.labels.hook === "onCommitted")?.value).toBe(3);
    expect(failures.find((v) => v.labels.hook === "afterRun")?.value).toBe(1);
    expect(
      lines.map((line) => JSON.parse(line) as { msg: string; hook: string; err: { message: string } }),
    ).toMatchObject([
      {
        msg: "extension hook failed",
        hook: "onCommitted",
        err: { message: "[object Object]" },
      },
      { msg: "extension hook failed", hook: "onCommitted", err: { message: "its stack cannot be read" } },
      {
        msg: "extension hook failed",
        hook: "onCommitted",
        err: { message: "(a value that cannot be shown as text)" },
      },
      { msg: "extension hook failed", hook: "afterRun" },
    ]);
  });

  it("onSessionDeleted: each extension gets its own deletedAt; what one changes, the next does not see", async () => {
    const seen: string[] = [];
    const extensions = new Extensions(
      [
        defineExtension({
          name: "first",
          onSessionDeleted(_id, { deletedAt }) {
            seen.push(deletedAt.toISOString());
            deletedAt.setTime(0); // e.g. a helper that rounds a date in place
          },
        }),
        defineExtension({
          name: "next",
          onSessionDeleted: (_id, { deletedAt }) => void seen.push(deletedAt.toISOString()),
        }),
      ],
      createMetrics("test"),
      { warn: () => {} },
      1_000,
    );
    const deletedAt = new Date("2026-12-06T10:00:00.000Z");
    await extensions.sessionDeleted("s", { tenant: "t", deletedAt, attempt: 1 });
    // Before: the second saw 1970-01-01T00:00:00.000Z.
    expect(seen).toEqual(["2026-12-06T10:00:00.000Z", "2026-12-06T10:00:00.000Z"]);
    expect(deletedAt.toISOString()).toBe("2026-12-06T10:00:00.000Z");
  });

  it("beforeRun: a refusal stays the run's end when a later extension's beforeRun is cut by a cancel", async () => {
    const controller = new AbortController();
    const calls: string[] = [];
    const extensions = new Extensions(
      [
        defineExtension({
          name: "gate",
          beforeRun() {
            throw new Error("no");
          },
        }),
        defineExtension({
          name: "slow",
          beforeRun() {
            calls.push("slow.beforeRun");
            controller.abort();
            return new Promise<void>(() => {});
          },
          afterRun: () => void calls.push("slow.afterRun"),
        }),
        defineExtension({ name: "never", beforeRun: () => void calls.push("never.beforeRun") }),
      ],
      createMetrics("test"),
      { warn: () => {} },
      60_000,
    );
    const run = { ...ctx, signal: controller.signal };
    expect(await extensions.beforeRun(run)).toBe('beforeRun hook of extension "gate" failed: no');
    await extensions.afterRun(run, { outcome: "failed" });
    // `slow` began (its beforeRun was called): its afterRun is owed; `never` was not called.
    expect(calls).toEqual(["slow.beforeRun", "slow.afterRun"]);
  });
});
