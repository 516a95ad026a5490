/**
 * `fleet session export` / `fleet session import` against a real API and Postgres, as an
 * attacker and a demanding user use them: an API URL fetch refuses, a file on stdin, crafted
 * files. Each bad input is one line and exit 2 with nothing created; what is accepted behaves
 * per resume-semantics.md.
 */
import { execFileSync } from "node:child_process";
import { mkdir, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sourceOf } from "../src/commands/import-source.js";
import { utf8Lines } from "../src/commands/utf8-lines.js";
import type { FleetClient } from "../src/producer/client.js";
import { INTERRUPTED_TOOL_TEXT } from "../src/shared/resume-plan.js";
import { startApiProxy } from "./support/api-proxy.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, maxTurns: 3 };
let fleet: FleetEnv;
let client: FleetClient;
let url: string;

beforeAll(async () => {
  fleet = await createFleetEnv("transfer-hardening");
  const started = await fleet.startApi();
  client = started.client;
  url = started.api.url;
}, 60_000);
afterAll(async () => fleet?.close());

/**
 * Runs `fleet`; `tmp` is its TMPDIR, which a test then finds empty. Run from the sources (a
 * checkout with no build, or one older than its sources: bin/fleet.js), the CLI goes through
 * tsx, whose compile cache is a `tsx-<uid>` folder in TMPDIR: it is kept in memory instead
 * (TSX_DISABLE_CACHE), so that the folder holds only what the command itself left.
 */
const cli = (args: string[], options: { api?: string; stdin?: string | Buffer; tmp?: string } = {}) =>
  runFleetCli(
    args,
    {
      ...fleet.env,
      FLEET_API_URL: options.api ?? url,
      ...(options.tmp ? { TMPDIR: options.tmp, TSX_DISABLE_CACHE: "1" } : {}),
    },
    120_000,
    undefined,
    undefined,
    options.stdin,
  );

/** An export file's text: its header, `messages` (seq added), its end line. */
function exportText(messages: Record<string, unknown>[], header: Record<string, unknown> = {}): string {
  const lines = [
    JSON.stringify({
      fleetSessionExport: 1,
      id: "00000000-0000-4000-8000-000000000001",
      agent: AGENT,
      metadata: { from: "test" },
      exportedAt: "2026-01-01T00:00:00.000Z",
      ...header,
    }),
    ...messages.map((m, i) => JSON.stringify({ ...m, seq: i + 1 })),
    JSON.stringify({ fleetSessionExportEnd: { messages: messages.length } }),
  ];
  return `${lines.join("\n")}\n`;
}

async function fileOf(name: string, text: string | Buffer): Promise<string> {
  const file = join(fleet.config.toolDir, name);
  await writeFile(file, text);
  return file;
}

describe("an API URL that fetch refuses itself", () => {
  it("ends the first request at once: one line, exit 2, no retries", async () => {
    const file = await fileOf("bad-port.jsonl", exportText([{ role: "user", content: "hi" }]));
    // Port 1 is one fetch never connects to ("bad port"): every try would be refused alike.
    const started = Date.now();
    const imported = await cli(["session", "import", file], { api: "http://127.0.0.1:1" });
    const exported = await cli(["session", "export", "abc"], { api: "http://127.0.0.1:1" });
    console.log(`import and export against port 1 took ${Date.now() - started} ms together`);
    expect(imported.stderr).toBe(
      "fleet session import: POST http://127.0.0.1:1/v1/sessions failed: bad port (fetch sends nothing to this URL: check --api or FLEET_API_URL)\n",
    );
    expect(imported.code).toBe(2);
    expect(exported.stderr).toBe(
      "fleet session export: GET http://127.0.0.1:1/v1/sessions/abc?limit=2000&runsLimit=0 failed: bad port (fetch sends nothing to this URL: check --api or FLEET_API_URL)\n",
    );
    expect(exported.code).toBe(2);
  }, 60_000);

  it("a port where nothing listens: the first request says so at once", async () => {
    const file = await fileOf("refused.jsonl", exportText([{ role: "user", content: "hi" }]));
    const imported = await cli(["session", "import", file], { api: "http://127.0.0.1:7599" });
    expect(imported.stderr).toBe(
      "fleet session import: cannot reach the API at http://127.0.0.1:7599; start it with `fleet api` or set FLEET_API_URL\n",
    );
    expect(imported.code).toBe(2);
  }, 60_000);
});

async function sessionCount(): Promise<number> {
  const [row] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`;
  return row!.n;
}

describe("fleet session import from stdin", () => {
  const messages = [
    { role: "user", content: "two files" },
    {
      role: "assistant",
      content: "done",
      stopReason: "end_turn",
      createdAt: "2026-01-02T03:04:05.678Z",
    },
  ];

  it.each([
    ["`-`", ["-"]],
    ["no FILE, input piped in", []],
  ])(
    "%s: reads the file from stdin, copied to a private file removed at the end",
    async (_name, file) => {
      const tmp = join(fleet.config.toolDir, `tmp-${file.length}`);
      await mkdir(tmp);
      const before = await sessionCount();
      const result = await cli(["session", "import", ...file], { stdin: exportText(messages), tmp });
      expect(result.code, result.stderr).toBe(0);
      const id = result.stdout.trim();
      expect(result.stderr).toBe(
        `created session ${id} with messages 1–2 of 2\nimported 2 messages into session ${id}\n`,
      );
      expect(await sessionCount()).toBe(before + 1);
      const session = await client.getSession(id, { runsLimit: 0 });
      expect(session.messages.map(({ role, content }) => ({ role, content }))).toEqual([
        { role: "user", content: "two files" },
        { role: "assistant", content: "done" },
      ]);
      expect(session.messages[1]!.createdAt).toBe("2026-01-02T03:04:05.678Z");
      expect(await readdir(tmp)).toEqual([]);
    },
    60_000,
  );

  it("a FIFO, as `<(fleet session export ID)` gives: read once, imported whole", async () => {
    const fifo = join(fleet.config.toolDir, "export.fifo");
    execFileSync("mkfifo", [fifo]);
    const writer = writeFile(fifo, exportText(messages));
    const result = await cli(["session", "import", fifo]);
    await writer;
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toContain("imported 2 messages into session");
  }, 60_000);

  it("a malformed file on stdin: its line, exit 2, nothing created, nothing left behind", async () => {
    const tmp = join(fleet.config.toolDir, "tmp-bad");
    await mkdir(tmp);
    const text = exportText(messages).replace('"stopReason":"end_turn"', '"stopReason":7');
    const before = await sessionCount();
    const result = await cli(["session", "import", "-"], { stdin: text, tmp });
    expect(result.stderr).toBe(
      "fleet session import: line 3: seq 2: stopReason: expected string, received number\n",
    );
    expect(result.code).toBe(2);
    expect(await sessionCount()).toBe(before);
    expect(await readdir(tmp)).toEqual([]);
  }, 60_000);

  it("no FILE on a terminal is a usage error, not a wait for typed input", () => {
    expect(() => sourceOf(undefined, true)).toThrow(/give the FILE `fleet session export` wrote, or `-`/);
    expect(sourceOf(undefined, false)).toBe("stdin");
    expect(sourceOf("-", true)).toBe("stdin");
    expect(sourceOf("a.jsonl", false)).toEqual({ path: "a.jsonl" });
  });
});

describe("a stored assistant step without a stop reason", () => {
  it('reads back as stopReason "", exports, and imports again as it came out', async () => {
    const { id } = await client.createSession({
      agent: AGENT,
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: "partial", stopReason: "end_turn" },
      ],
    });
    // A row written without one (an older release, a hand-made row): the column allows it.
    await fleet.database.sql`update messages set stop_reason = null where session_id = ${id} and seq = 2`;
    const original = await client.getSession(id, { runsLimit: 0 });
    expect(original.messages[1]).toMatchObject({ role: "assistant", stopReason: "" });

    const out = join(fleet.config.toolDir, "no-stop.jsonl");
    const exported = await cli(["session", "export", id, "--out", out]);
    expect(exported.code, exported.stderr).toBe(0);
    const imported = await cli(["session", "import", out]);
    expect(imported.stderr).toContain("imported 2 messages into session");
    expect(imported.code).toBe(0);
    const copyId = imported.stdout.trim();
    const copy = await client.getSession(copyId, { runsLimit: 0 });
    expect(copy.messages).toEqual(original.messages);
    const point = await client.resumePoint(copyId);
    console.log("resume point of the copy:", JSON.stringify(point));
    expect(point).toEqual(await client.resumePoint(id));
    expect(point).toMatchObject({ resumable: false, reason: "unknown_stop" });
  }, 60_000);
});

describe("an imported tool call without a result", () => {
  // The origin may have run it: a worker must answer it as interrupted, never run it (spec §3).
  const TOOLS_AGENT = {
    model: { provider: "scripted" as const, steps: [{ text: "unused" }, { text: "checked the state" }] },
    tools: ["write_file"],
    maxTurns: 3,
  };
  const messages = [
    { role: "user", content: "write both" },
    {
      role: "assistant",
      content: "",
      stopReason: "tool_use",
      toolCalls: [
        { id: "a", name: "write_file", arguments: { path: "a-imported.txt", content: "a" } },
        { id: "b", name: "write_file", arguments: { path: "b-imported.txt", content: "b" } },
      ],
    },
    { role: "tool", toolCallId: "a", name: "write_file", content: "wrote a", success: true },
  ];

  it.each(["resume", "a new message"])(
    "is answered as interrupted, not run, on %s",
    async (how) => {
      const file = await fileOf(
        `unanswered-${how.length}.jsonl`,
        exportText(messages, { agent: TOOLS_AGENT }),
      );
      const imported = await cli(["session", "import", file]);
      expect(imported.code, imported.stderr).toBe(0);
      const id = imported.stdout.trim();
      expect(await client.resumePoint(id)).toMatchObject({ resumable: true, kind: "recover_tools" });
      const worker = await fleet.spawnWorker();
      try {
        const { runId } = how === "resume" ? await client.resume(id) : await client.send(id, "go on");
        const run = await client.waitForRun(runId);
        expect(run.endedReason, JSON.stringify(run)).toBe("completed");
      } finally {
        worker.child.kill("SIGTERM");
        await worker.exited;
      }
      const stored = (await client.getSession(id, { runsLimit: 0 })).messages;
      expect(stored[3]).toMatchObject({
        role: "tool",
        toolCallId: "b",
        success: false,
        content: INTERRUPTED_TOOL_TEXT,
      });
      expect(stored.at(-1)).toMatchObject({ role: "assistant", content: "checked the state" });
      // Neither imported call ran here: no file written, no other result.
      const written = (await readdir(fleet.config.toolDir)).filter((f) => f.endsWith("-imported.txt"));
      expect(written).toEqual([]);
      expect(stored.filter((m) => m.role === "tool").map((m) => m.toolCallId)).toEqual(["a", "b"]);
    },
    120_000,
  );
});

describe("bytes that are not an export's", () => {
  it("bytes that are no UTF-8: their line, exit 2, nothing created (they were stored as U+FFFD)", async () => {
    const [head, user, end] = exportText([{ role: "user", content: "a-b" }]).split("\n");
    const [before2, after2] = user!.split("-");
    const bytes = Buffer.concat([
      Buffer.from(`${head}\n${before2}`),
      Buffer.from([0xff, 0xfe]),
      Buffer.from(`${after2}\n${end}\n`),
    ]);
    const file = await fileOf("latin.jsonl", bytes);
    const before = await sessionCount();
    const result = await cli(["session", "import", file]);
    expect(result.stderr).toBe(
      "fleet session import: line 2: not valid UTF-8 (an export is written as UTF-8)\n",
    );
    expect(result.code).toBe(2);
    expect(await sessionCount()).toBe(before);
  }, 60_000);

  it("an endless line is refused once it passes the bound, not held whole", async () => {
    async function* endless(): AsyncGenerator<Buffer> {
      yield Buffer.from('{"fleetSessionExport":1}\r\n{"role":"user","content":"');
      for (;;) yield Buffer.alloc(64 * 1024, 0x61);
    }
    const read: number[] = [];
    const lines = async () => {
      for await (const { line } of utf8Lines(endless(), 1024 * 1024)) read.push(line);
    };
    await expect(lines()).rejects.toMatchObject({
      line: 2,
      message: "the line is longer than 1 MiB, more than one request may hold",
    });
    expect(read).toEqual([1]);
  });
});

// Each case checks a file of its own and creates nothing: they run side by side.
describe.concurrent("what the API refuses in a request body, found by the file's check", () => {
  /** An export file of `before` plain user messages, then `line` as message `before + 1`. */
  async function fileWith(
    name: string,
    before: number,
    line: (seq: number) => string,
    /** Message 1's line instead of a user message. */
    first?: string,
  ): Promise<string> {
    const users = Array.from({ length: before }, (_, i) => ({ role: "user", content: `m${i + 1}` }));
    const [head, ...rest] = exportText(users).trimEnd().split("\n");
    if (first !== undefined) rest[0] = first;
    const end = JSON.stringify({ fleetSessionExportEnd: { messages: before + 1 } });
    return fileOf(name, `${[head, ...rest.slice(0, -1), line(before + 1), end].join("\n")}\n`);
  }
  const call = (seq: number, args: string) =>
    `{"role":"assistant","content":"","stopReason":"tool_use","seq":${seq},"toolCalls":[{"id":"a","name":"write_file","arguments":${args}}]}`;

  // A first page of 10,000 messages, the case in the second: before, the session was created
  // with the first page and the second was refused (a session holding 10,000 of the file's messages).
  it.for<[string, number, (seq: number) => string, string]>([
    [
      // 98 levels in the message are 100 in the page's body ({"messages": [message]}).
      "nesting the API refuses in a page's body",
      10_000,
      (seq) => call(seq, `{"a":${"[".repeat(95)}${"]".repeat(95)}}`),
      "line 10002: seq 10001: toolCalls[0].arguments: nests deeper than 100 levels",
    ],
    [
      "an object of more keys than the API takes",
      10_000,
      (seq) => call(seq, `{${Array.from({ length: 10_001 }, (_, i) => `"k${i}":1`).join(",")}}`),
      "line 10002: seq 10001: toolCalls[0].arguments: has more than 10,000 keys",
    ],
    [
      // Before, accepted: parsed, the key set the object's prototype and was stored as `{}`.
      "a __proto__ key",
      10_000,
      (seq) => call(seq, '{"__proto__":{"x":1}}'),
      "line 10002: seq 10001: toolCalls[0].arguments.__proto__: this key is not accepted",
    ],
    [
      // Before, in the first page too: sent as null (JSON.stringify of Infinity) and stored so.
      "a number past a double",
      0,
      (seq) => call(seq, '{"x":1e400}'),
      "line 2: seq 1: toolCalls[0].arguments.x: is a number too large for a JSON double",
    ],
  ])(
    "%s: its line, exit 2, nothing created",
    { timeout: 120_000 },
    async ([name, before, line, expected], { expect }) => {
      const file = await fileWith(`${name.replace(/\W+/g, "-")}.jsonl`, before, line);
      const sessions = await sessionCount();
      const result = await cli(["session", "import", file]);
      expect(result.stderr, `exit code ${result.code}`).toBe(`fleet session import: ${expected}\n`);
      expect(result.code).toBe(2);
      expect(await sessionCount()).toBe(sessions);
    },
  );

  const step = (seq: number, usage: string) =>
    `{"role":"assistant","content":"","stopReason":"end_turn","seq":${seq},"usage":${usage}}`;
  // The usage the API bounds: a session's imported tokens in all, each request's cost. Before,
  // the session was created with the first page and the second refused.
  it.for<[string, string | undefined, string, string]>([
    [
      "tokens past what a session's import may report, in the second page",
      step(1, '{"inputTokens":9007199254740991,"outputTokens":0}'),
      '{"inputTokens":1,"outputTokens":0}',
      "line 10002: seq 10001: brings the steps' usage to about 9.01e+15 tokens; an imported session's steps may report at most 9007199254740991 in all",
    ],
    [
      "a cost past what one request may report, in the second page",
      undefined,
      '{"inputTokens":1,"outputTokens":0,"costUsd":1e16}',
      "line 10002: seq 10001: brings the usage.costUsd of the steps sent with it to about 1.00e+16 USD; one request may report at most 9007199254740991 USD",
    ],
  ])(
    "%s: its line, exit 2, nothing created",
    { timeout: 120_000 },
    async ([name, first, usage, expected], { expect }) => {
      const file = await fileWith(
        `${name.replace(/\W+/g, "-")}.jsonl`,
        10_000,
        (seq) => step(seq, usage),
        first,
      );
      const sessions = await sessionCount();
      const result = await cli(["session", "import", file]);
      expect(result.stderr, `exit code ${result.code}`).toBe(`fleet session import: ${expected}\n`);
      expect(result.code).toBe(2);
      expect(await sessionCount()).toBe(sessions);
    },
  );
});

describe("a history larger than an imported session may hold", () => {
  it("is refused at its line before anything is created, not after storing most of it", async () => {
    // 40 messages of 1 MiB: past the API's 32 MiB for an imported history at message 33
    // (a session that ran may hold more: its tool results are up to 1,000,000 characters each).
    const messages = Array.from({ length: 40 }, () => ({ role: "user", content: "y".repeat(1024 * 1024) }));
    const file = await fileOf("too-big.jsonl", exportText(messages));
    const before = await sessionCount();
    const result = await cli(["session", "import", file]);
    expect(result.stderr).toBe(
      "fleet session import: line 34: seq 33: brings the history to about 33 MiB; an imported session holds at most 32 MiB (its texts, tool calls and provider state)\n",
    );
    expect(result.code).toBe(2);
    expect(await sessionCount()).toBe(before);
  }, 120_000);
});

describe("a session whose agent takes most of a request", () => {
  it.for<[string, number]>([
    // 10 MiB of agent and 8 MiB of first page were one creation of 18 MiB: "the body is larger than 16 MiB".
    ["its first page is cut to what the creation's body has room for", 10],
    // No message fits beside it: the session is created with none, every message sent as a page.
    ["no message fits beside it: it is created with none, the messages follow as pages", 14.5],
  ])("%s: exported and imported again, whole", { timeout: 180_000 }, async ([_name, agentMiB]) => {
    const agent = { ...AGENT, system: "s".repeat(Math.round(agentMiB * 1024 * 1024)) };
    const { id } = await client.createSession({ agent });
    const messages = Array.from({ length: 9 }, (_, i) => ({
      role: "user" as const,
      content: `${i} ${"u".repeat(1024 * 1024)}`,
    }));
    await client.importMessages(id, messages, { afterSeq: 0 });
    const file = join(fleet.config.toolDir, `big-agent-${agentMiB}.jsonl`);
    const exported = await cli(["session", "export", id, "--out", file]);
    expect(exported.code, exported.stderr).toBe(0);
    const imported = await cli(["session", "import", file]);
    expect(imported.stderr).toContain("imported 9 messages into session");
    expect(imported.stderr).toContain(
      agentMiB > 14
        ? "with none of the 9 messages yet (no message fits beside its agent"
        : "with messages 1–",
    );
    expect(imported.code).toBe(0);
    const copy = await client.getSession(imported.stdout.trim(), { runsLimit: 0 });
    expect(copy.agent).toEqual((await client.getSession(id, { runsLimit: 0 })).agent);
    expect(copy.messages.map((m) => [m.seq, m.content])).toEqual(messages.map((m, i) => [i + 1, m.content]));
  });
});

describe("a creation whose every answer is lost", () => {
  it("names the Idempotency-Key, and running again with it gets the session made, not a second one", async () => {
    const file = await fileOf("lost-create.jsonl", exportText([{ role: "user", content: "hi" }]));
    // A proxy that lets each creation reach the API and drops its answer.
    const proxy = await startApiProxy(url, (req, _res, forward, loseAnswer) => {
      if (!(req.method === "POST" && req.url === "/v1/sessions")) return forward();
      loseAnswer();
    });
    try {
      const before = await sessionCount();
      const failed = await cli(["session", "import", file], { api: proxy.url });
      expect(failed.code).toBe(1);
      expect(await sessionCount()).toBe(before + 1);
      expect(failed.stderr).toMatch(/--idempotency-key fleet-session-import-\S+ /);
      const key = /--idempotency-key (\S+)/.exec(failed.stderr)?.[1];
      const again = await cli(["session", "import", file, "--idempotency-key", key!]);
      expect(again.code, again.stderr).toBe(0);
      expect(await sessionCount()).toBe(before + 1);
    } finally {
      proxy.server.closeAllConnections();
      await new Promise((resolve) => proxy.server.close(resolve));
    }
  }, 120_000);
});

describe("a session deleted after its import", () => {
  it("run again with its --idempotency-key after the session was deleted: says so, and not to run it with that key again", async () => {
    const file = await fileOf("deleted-since.jsonl", exportText([{ role: "user", content: "hi" }]));
    const key = `import-deleted-${Date.now()}`;
    const first = await cli(["session", "import", file, "--idempotency-key", key]);
    expect(first.code, first.stderr).toBe(0);
    const id = first.stdout.trim();
    await client.deleteSession(id);
    const again = await cli(["session", "import", file, "--idempotency-key", key]);
    expect({ code: again.code, stdout: again.stdout }).toEqual({ code: 2, stdout: "" });
    // The key gives the deleted session back for 24 h: running with it again would fail again.
    expect(again.stderr).toContain(`session ${id} was deleted since this key created it`);
    expect(again.stderr).not.toContain(`--idempotency-key ${key}`);
  }, 120_000);
});
