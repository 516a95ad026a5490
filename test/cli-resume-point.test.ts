/**
 * `fleet resume-point --file` through a real child process (contracts.md §2–§3).
 * All children are started at once in beforeAll; each test asserts on one result.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const FLEET = join(ROOT, "bin", "fleet.js");

type Run = { code: number | null; stdout: string; stderr: string };

function fleet(args: string[], stdin?: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env };
    delete env.FLEET_DEBUG;
    const child = spawn(process.execPath, [FLEET, ...args], {
      cwd: ROOT,
      env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(stdin ?? "");
  });
}

const crashHistory = [
  { role: "user", content: "Write a.txt and b.txt" },
  {
    role: "assistant",
    content: "",
    toolCalls: [
      { id: "a", name: "write_file", arguments: { name: "a.txt" } },
      { id: "b", name: "write_file", arguments: { name: "b.txt" } },
    ],
    stopReason: "tool_use",
  },
  { role: "tool", toolCallId: "a", name: "write_file", content: "wrote a.txt", success: true },
];
const completedHistory = [
  { role: "user", content: "hi", seq: 1, createdAt: "2024-01-01T00:00:00.000Z" },
  {
    role: "assistant",
    content: "hello",
    stopReason: "end_turn",
    seq: 2,
    createdAt: "2024-01-01T00:00:01.000Z",
  },
];
const malformedHistory = [
  { role: "user", content: "hi" },
  { role: "tool", toolCallId: "x", name: "write_file", content: "?", success: true },
];
const invalidHistory = [
  { role: "user", content: "hi" },
  { role: "assistant", content: "no stop reason" },
];

let dir: string;
const runs: Record<string, Run> = {};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "fleet-cli-test-"));
  const file = async (name: string, content: string) => {
    const path = join(dir, name);
    await writeFile(path, content);
    return path;
  };
  const resumable = await file("resumable.json", JSON.stringify(crashHistory));
  const retry = await file(
    "retry.json",
    JSON.stringify([
      { role: "user", content: "hi" },
      { role: "assistant", content: "half", stopReason: "interrupted" },
    ]),
  );
  const completed = await file("completed.json", JSON.stringify(completedHistory));
  const malformed = await file("malformed.json", JSON.stringify(malformedHistory));
  const unknown = await file(
    "unknown.json",
    JSON.stringify([
      { role: "user", content: "hi" },
      { role: "assistant", content: "", stopReason: "mystery" },
    ]),
  );
  const empty = await file("empty.json", "[]");
  const invalid = await file("invalid.json", JSON.stringify(invalidHistory, null, 2));
  const notJson = await file("not-json.json", '[{"role": "user", ');
  const notArray = await file("not-array.json", '{"role": "user", "content": "hi"}');
  const missing = join(dir, "does-not-exist.json");
  // What Windows editors and PowerShell write: a UTF-8 byte order mark first, or UTF-16.
  const bom = await file("bom.json", `\uFEFF${JSON.stringify(crashHistory)}`);
  const utf16 = join(dir, "utf16.json");
  await writeFile(utf16, Buffer.from(`\uFEFF${JSON.stringify(crashHistory)}`, "utf16le"));
  // "café" in Latin-1: the byte E9 is no UTF-8.
  const latin1 = join(dir, "latin1.json");
  await writeFile(
    latin1,
    Buffer.from(
      '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "stopReason": "tool_use", ' +
        '"toolCalls": [{"id": "a", "name": "write_file", "arguments": {"path": "caf\xe9.txt"}}]}]',
      "latin1",
    ),
  );
  // 1e400 is no double: JSON.parse makes it Infinity, which the resume point printed as null
  // (the API refuses it in an import: "is a number too large for a JSON double").
  const infinite = await file(
    "infinite.json",
    '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "stopReason": "tool_use", ' +
      '"toolCalls": [{"id": "a", "name": "sleep", "arguments": {"ms": 1e400}}]}]',
  );

  // A tool call's arguments nested 100,000 deep: the history's parse recursed and overflowed
  // the stack ("fleet: Maximum call stack size exceeded", exit 1).
  const deep = await file(
    "deep.json",
    '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "stopReason": "tool_use", ' +
      `"toolCalls": [{"id": "a", "name": "sleep", "arguments": {"ms": ${"[".repeat(100_000)}${"]".repeat(100_000)}}}]}]`,
  );

  const jobs: Record<string, Promise<Run>> = {
    resumable: fleet(["resume-point", "--file", resumable]),
    retry: fleet(["resume-point", "-f", retry]),
    completed: fleet(["resume-point", "--file", completed]),
    malformed: fleet(["resume-point", "--file", malformed]),
    unknown: fleet(["resume-point", "--file", unknown]),
    empty: fleet(["resume-point", "--file", empty]),
    invalid: fleet(["resume-point", "--file", invalid]),
    notJson: fleet(["resume-point", "--file", notJson]),
    notArray: fleet(["resume-point", "--file", notArray]),
    missing: fleet(["resume-point", "--file", missing]),
    infinite: fleet(["resume-point", "--file", infinite]),
    deep: fleet(["resume-point", "--file", deep]),
    bom: fleet(["resume-point", "--file", bom]),
    stdinBom: fleet(["resume-point", "--file", "-"], `\uFEFF${JSON.stringify(completedHistory)}`),
    utf16: fleet(["resume-point", "--file", utf16]),
    latin1: fleet(["resume-point", "--file", latin1]),
    noArgs: fleet([]),
    unknownCommand: fleet(["frobnicate"]),
    resumePointNoArgs: fleet(["resume-point"]),
    unknownOption: fleet(["resume-point", "--bogus"]),
    fileWithoutValue: fleet(["resume-point", "--file"]),
    fileAndSession: fleet(["resume-point", "--file", resumable, "some-session"]),
    stdinResumable: fleet(["resume-point", "--file", "-"], JSON.stringify(crashHistory)),
    stdinCompleted: fleet(["resume-point", "--file", "-"], JSON.stringify(completedHistory)),
    stdinInvalid: fleet(["resume-point", "--file", "-"], JSON.stringify(invalidHistory)),
    stdinNotJson: fleet(["resume-point", "--file", "-"], "nope"),
  };
  const entries = await Promise.all(Object.entries(jobs).map(async ([k, p]) => [k, await p] as const));
  for (const [k, run] of entries) runs[k] = run;
}, 180_000);

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const run = (name: string): Run => {
  const r = runs[name];
  if (!r) throw new Error(`no run named ${name}`);
  return r;
};
const lines = (text: string) => text.split("\n").filter((l) => l.length > 0);
const expectNoStack = (r: Run) => {
  expect(r.stderr).not.toMatch(/^\s+at /m);
  expect(r.stderr).not.toContain("    at ");
};

describe("fleet resume-point --file", () => {
  it("resumable history → exit 0 and the §2 JSON on stdout", () => {
    const r = run("resumable");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      resumable: true,
      kind: "recover_tools",
      description: expect.stringMatching(/\S/),
      unansweredToolCalls: [{ id: "b", name: "write_file", arguments: { name: "b.txt" } }],
    });
  });

  it("retry_response history → exit 0 with an empty unansweredToolCalls", () => {
    const r = run("retry");
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      resumable: true,
      kind: "retry_response",
      description: expect.stringMatching(/\S/),
      unansweredToolCalls: [],
    });
  });

  it("completed history (with stored seq/createdAt) → exit 3, {resumable:false, reason:completed}", () => {
    const r = run("completed");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(3);
    expect(JSON.parse(r.stdout)).toEqual({ resumable: false, reason: "completed" });
  });

  it("malformed history → exit 3, reason malformed", () => {
    const r = run("malformed");
    expect(r.code).toBe(3);
    expect(JSON.parse(r.stdout)).toEqual({
      resumable: false,
      reason: "malformed",
      detail: expect.stringContaining("messages[1]"),
    });
  });

  it("unknown stop reason → exit 3, reason unknown_stop", () => {
    const r = run("unknown");
    expect(r.code).toBe(3);
    expect(JSON.parse(r.stdout)).toMatchObject({ resumable: false, reason: "unknown_stop" });
  });

  it("empty history → exit 3, reason empty", () => {
    const r = run("empty");
    expect(r.code).toBe(3);
    expect(JSON.parse(r.stdout)).toEqual({ resumable: false, reason: "empty" });
  });

  it("assistant without stopReason → exit 2, one stderr line naming messages[1].stopReason", () => {
    const r = run("invalid");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(lines(r.stderr)).toHaveLength(1);
    expect(r.stderr).toContain("messages[1].stopReason");
    expectNoStack(r);
  });

  it("invalid JSON → exit 2 with a clear message", () => {
    const r = run("notJson");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(lines(r.stderr)[0]).toMatch(/not-json\.json is not valid JSON/);
    expectNoStack(r);
  });

  it("a JSON value that is not an array → exit 2 naming messages", () => {
    const r = run("notArray");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/messages: must be a JSON array/);
  });

  it("a number past a double → exit 2 naming its field, not a resume point with null in its place", () => {
    const r = run("infinite");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr.trim()).toBe(
      "fleet resume-point: messages[1].toolCalls[0].arguments.ms: is a number too large for a JSON double",
    );
  });

  it("a value nested 100,000 deep → exit 2 naming its field, as the API refuses it", () => {
    const r = run("deep");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(lines(r.stderr)).toHaveLength(1);
    expect(r.stderr.trim()).toBe(
      "fleet resume-point: messages[1].toolCalls[0]: nests deeper than 100 levels",
    );
    expectNoStack(r);
  });

  it("a UTF-8 byte order mark before the JSON is skipped (RFC 8259 allows it), from a file or stdin", () => {
    const r = run("bom");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ kind: "recover_tools", unansweredToolCalls: [{ id: "b" }] });
    const stdin = run("stdinBom");
    expect(stdin.code).toBe(3);
    expect(JSON.parse(stdin.stdout)).toEqual({ resumable: false, reason: "completed" });
  });

  it("UTF-16, or bytes that are no UTF-8 → exit 2 saying so, not read with U+FFFD in their place", () => {
    const utf16 = run("utf16");
    expect(utf16.code).toBe(2);
    expect(utf16.stdout).toBe("");
    expect(lines(utf16.stderr)).toEqual([expect.stringMatching(/utf16\.json is UTF-16; JSON must be UTF-8/)]);
    const latin1 = run("latin1");
    expect(latin1.code).toBe(2);
    expect(latin1.stdout).toBe("");
    expect(lines(latin1.stderr)).toEqual([
      expect.stringMatching(/latin1\.json is not valid UTF-8; JSON must be UTF-8/),
    ]);
    expectNoStack(latin1);
  });

  it("missing file → exit 2", () => {
    const r = run("missing");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(lines(r.stderr)).toHaveLength(1);
    expect(r.stderr).toMatch(/cannot read .*does-not-exist\.json: no such file/);
    expectNoStack(r);
  });

  it("--file - reads the history from stdin", () => {
    const ok = run("stdinResumable");
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({
      resumable: true,
      kind: "recover_tools",
      unansweredToolCalls: [{ id: "b" }],
    });
    const done = run("stdinCompleted");
    expect(done.code).toBe(3);
    expect(JSON.parse(done.stdout)).toEqual({ resumable: false, reason: "completed" });
    const bad = run("stdinInvalid");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("messages[1].stopReason");
    // Not JSON: the message names stdin, not "-".
    const text = run("stdinNotJson");
    expect(text.code).toBe(2);
    expect(lines(text.stderr)[0]).toMatch(/stdin is not valid JSON/);
  });
});

describe("fleet usage errors", () => {
  it("no arguments → exit 2 with usage", () => {
    const r = run("noArgs");
    expect(r.code).toBe(2);
    expect(r.stdout + r.stderr).toMatch(/usage:/);
    expect(r.stdout + r.stderr).toContain("fleet resume-point --file HISTORY.json");
  });

  it("unknown command → exit 2 with one line naming it and pointing at --help", () => {
    const r = run("unknownCommand");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(lines(r.stderr)).toEqual(["fleet: unknown command 'frobnicate'; see `fleet --help`"]);
    expectNoStack(r);
  });

  it("resume-point with neither --file nor a session id → exit 2 with usage", () => {
    const r = run("resumePointNoArgs");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/usage: fleet resume-point --file/);
  });

  it("unknown option → exit 2, one line naming the option", () => {
    const r = run("unknownOption");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(lines(r.stderr)).toEqual([
      "fleet resume-point: unknown option '--bogus'; see `fleet resume-point --help`",
    ]);
    expectNoStack(r);
  });

  it("--file with no value → exit 2, one line", () => {
    const r = run("fileWithoutValue");
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(lines(r.stderr)).toHaveLength(1);
    expect(r.stderr).toMatch(/^fleet resume-point: option '-f, --file <HISTORY\.json>' argument missing/);
  });

  it("--file and a session id together → exit 2, one line", () => {
    const r = run("fileAndSession");
    expect(r.code).toBe(2);
    expect(lines(r.stderr)).toEqual([
      "fleet resume-point: give either --file HISTORY.json or a SESSION_ID, not both",
    ]);
  });
});
