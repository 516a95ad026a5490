/**
 * `fleet session export` and `fleet session import` as an operator runs them, against a real
 * API: a session of 12,000 messages goes out as JSON Lines and back in as a new session with
 * the same messages (roles, content, tool calls, usage, providerState, seq, createdAt) and the
 * same resume point; answers lost on the way (the creation's and a page's) are sent again and
 * nothing is stored twice; a malformed file creates nothing and is named in one line; a
 * session that grows while it is exported gives a file with no gap and no repeat.
 */
import { readFile, stat, writeFile } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { Message, StoredMessage } from "../src/shared/messages.js";
import { startApiProxy } from "./support/api-proxy.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { storedHistory } from "./support/histories.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, maxTurns: 7 };
let fleet: FleetEnv;
let client: FleetClient;
let url: string;

beforeAll(async () => {
  fleet = await createFleetEnv("session-transfer");
  const started = await fleet.startApi();
  client = started.client;
  url = started.api.url;
}, 60_000);
afterAll(async () => fleet?.close());

const cli = (args: string[], api = url) => runFleetCli(args, { ...fleet.env, FLEET_API_URL: api }, 120_000);

/** `n` messages (a multiple of 4) from seq `from + 1`, of every shape an export carries. */
const history = (n: number, from = 0) => storedHistory(n, from, { varied: true });

/**
 * 12,000 messages ending in a step whose second call has no result (resumable:
 * recover_tools), stored through the API (10,000 at creation, the rest as a page).
 */
async function longSession(): Promise<{ id: string; messages: StoredMessage[] }> {
  const messages = history(11_996);
  const at = (k: number) => new Date(Date.UTC(2025, 6, 1) + k * 1_000).toISOString();
  messages.push(
    { role: "internal", content: "keep going", seq: 11_997, createdAt: at(0) },
    { role: "user", content: "two files", seq: 11_998, createdAt: at(1) },
    {
      role: "assistant",
      content: "writing both",
      toolCalls: [
        { id: "a", name: "write_file", arguments: { path: "a.txt" } },
        { id: "b", name: "write_file", arguments: { path: "b.txt" } },
      ],
      stopReason: "tool_use",
      usage: { inputTokens: 5, outputTokens: 2 },
      seq: 11_999,
      createdAt: at(2),
    },
    {
      role: "tool",
      toolCallId: "a",
      name: "write_file",
      content: "wrote a.txt",
      success: true,
      seq: 12_000,
      createdAt: at(3),
    },
  );
  const { id } = await client.createSession({
    agent: AGENT,
    metadata: { team: "eu", n: 1 },
    messages: messages.slice(0, 10_000),
  });
  await client.importMessages(id, messages.slice(10_000), { afterSeq: 10_000 });
  return { id, messages };
}

/** Every stored message of a session, read in pages of 5,000. */
async function stored(id: string): Promise<StoredMessage[]> {
  const out: StoredMessage[] = [];
  for await (const m of client.messages(id, { pageSize: 5_000 })) out.push(m);
  return out;
}

async function sessionCount(): Promise<number> {
  const [row] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`;
  return row!.n;
}

async function rowsOf(id: string): Promise<{ n: number; distinct: number }> {
  const [row] = await fleet.database.sql<{ n: number; distinct: number }[]>`
    select count(*)::int as n, count(distinct seq)::int as distinct from messages where session_id = ${id}`;
  return row!;
}

let original: { id: string; messages: StoredMessage[] };
let exportFile: string;

describe("fleet session export → fleet session import", () => {
  it("round-trips 12,000 messages into a fresh session: same messages, createdAt and resume point", async () => {
    original = await longSession();
    exportFile = join(fleet.config.toolDir, "long.jsonl");
    const exported = await cli(["session", "export", original.id, "--out", exportFile]);
    expect(exported.code, exported.stderr).toBe(0);
    expect(exported.stdout).toBe("");
    expect(exported.stderr).toBe(`exported 12000 messages of session ${original.id} to ${exportFile}\n`);
    // A session's messages: readable by the file's owner only, as transcripts are.
    expect((await stat(exportFile)).mode & 0o777).toBe(0o600);

    const lines = (await readFile(exportFile, "utf8")).trimEnd().split("\n");
    expect(lines).toHaveLength(12_002);
    expect(JSON.parse(lines[0]!)).toMatchObject({
      fleetSessionExport: 1,
      id: original.id,
      agent: AGENT,
      metadata: { team: "eu", n: 1 },
    });
    // With what the session spent of its budget (test/session-transfer-budget.test.ts).
    const { spent } = await client.getSession(original.id, { limit: 1, runsLimit: 0 });
    expect(spent?.modelCalls).toBe(original.messages.filter((m) => m.role === "assistant").length);
    expect(JSON.parse(lines.at(-1)!)).toEqual({ fleetSessionExportEnd: { messages: 12_000, spent } });
    expect(lines.slice(1, -1).map((l) => JSON.parse(l))).toEqual(original.messages);

    const before = await sessionCount();
    const imported = await cli(["session", "import", exportFile, "--metadata", '{"copy":true,"n":2}']);
    expect(imported.code, imported.stderr).toBe(0);
    const id = imported.stdout.trim();
    expect(imported.stdout).toMatch(/^[0-9a-f-]{36}\n$/);
    expect(id).not.toBe(original.id);
    expect(imported.stderr).toContain(`created session ${id} with messages 1–10000 of 12000`);
    expect(imported.stderr).toContain(`imported 12000 messages into session ${id}`);
    expect(await sessionCount()).toBe(before + 1);

    expect(await stored(id)).toEqual(original.messages);
    expect(await stored(id)).toEqual(await stored(original.id));
    const copy = await client.getSession(id, { limit: 1, runsLimit: 0 });
    expect(copy.agent).toEqual((await client.getSession(original.id, { limit: 1, runsLimit: 0 })).agent);
    expect(copy.agent).toMatchObject(AGENT);
    expect(copy.metadata).toEqual({ team: "eu", n: 2, copy: true });
    const point = await client.resumePoint(id);
    expect(point).toMatchObject({ resumable: true, kind: "recover_tools" });
    expect(point).toEqual(await client.resumePoint(original.id));
    expect(copy.runs).toEqual([]);
  }, 240_000);

  it("sends lost answers again: one session, every message stored once", async () => {
    // A proxy that lets the creation and the first page reach the API, then drops their
    // answers (the request was done, the client never hears it).
    const lost: string[] = [];
    const proxy = await startApiProxy(url, (req, _res, forward, loseAnswer) => {
      const kind = req.method === "POST" && /^\/v1\/sessions(\/[^/]+\/history)?$/.exec(req.url ?? "");
      const label = kind ? (kind[1] ? "page" : "create") : undefined;
      if (!label || lost.includes(label)) return forward();
      lost.push(label);
      loseAnswer();
    });
    try {
      const before = await sessionCount();
      const imported = await cli(["session", "import", exportFile], proxy.url);
      expect(imported.code, imported.stderr).toBe(0);
      expect(lost).toEqual(["create", "page"]);
      const id = imported.stdout.trim();
      expect(imported.stderr).toMatch(/creating the session: .*; trying again/);
      expect(imported.stderr).toMatch(/storing seq 10001–12000: .*; trying again/);
      expect(imported.stderr).toContain(
        "seq 10001–12000: the session holds seq 10001–12000 already (an answer was lost); going on after seq 12000",
      );
      expect(await sessionCount()).toBe(before + 1);
      expect(await rowsOf(id)).toEqual({ n: 12_000, distinct: 12_000 });
      expect(await stored(id)).toEqual(original.messages);
    } finally {
      proxy.server.closeAllConnections();
      await new Promise((resolve) => proxy.server.close(resolve));
    }
  }, 240_000);

  it("run again with the same --idempotency-key: the same session, nothing stored twice", async () => {
    const key = `import-again-${Date.now()}`;
    const first = await cli(["session", "import", exportFile, "--idempotency-key", key]);
    expect(first.code, first.stderr).toBe(0);
    const again = await cli(["session", "import", exportFile, "--idempotency-key", key]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toBe(first.stdout);
    const id = first.stdout.trim();
    expect(again.stderr).toContain("the session holds seq 10001–12000 already");
    expect(await rowsOf(id)).toEqual({ n: 12_000, distinct: 12_000 });
  }, 240_000);

  it("a page the API never got is sent again and stored", async () => {
    let dropped = 0;
    const proxy = await startApiProxy(url, (req, _res, forward) => {
      if (req.method === "POST" && req.url?.endsWith("/history") && dropped === 0) {
        dropped++;
        req.socket.destroy();
        return;
      }
      forward();
    });
    try {
      const imported = await cli(["session", "import", exportFile], proxy.url);
      expect(imported.code, imported.stderr).toBe(0);
      expect(dropped).toBe(1);
      expect(imported.stderr).not.toContain("already");
      const id = imported.stdout.trim();
      expect(await rowsOf(id)).toEqual({ n: 12_000, distinct: 12_000 });
    } finally {
      proxy.server.closeAllConnections();
      await new Promise((resolve) => proxy.server.close(resolve));
    }
  }, 240_000);
});

// Each case checks a file of its own and creates nothing: they run side by side (a `fleet`
// process each, about 1 s of CPU to start, most of each case), checked with their own `expect`.
describe.concurrent("a malformed file", () => {
  /** The export with line `index` (0-based: 0 is the header) replaced, or removed with null. */
  async function variant(name: string, edit: (lines: string[]) => void): Promise<string> {
    const lines = (await readFile(exportFile, "utf8")).trimEnd().split("\n");
    edit(lines);
    const file = join(fleet.config.toolDir, name);
    await writeFile(file, `${lines.join("\n")}\n`);
    return file;
  }
  const message = (lines: string[], i: number) => JSON.parse(lines[i]!) as Message & Record<string, unknown>;

  it.for<[string, (lines: string[]) => unknown, string]>([
    ["not JSON", (l: string[]) => (l[3] = "{oops"), "line 4: not valid JSON"],
    [
      "a message past the first page without stopReason",
      (l: string[]) => {
        const m = message(l, 11_000);
        delete m.stopReason;
        l[11_000] = JSON.stringify(m);
      },
      "line 11001: seq 11000: stopReason: is required",
    ],
    [
      "a gap in the seqs",
      (l: string[]) => l.splice(500, 1),
      "line 501: seq 501 where seq 500 was expected: messages must run 1, 2, 3, … with no gap or repeat",
    ],
    [
      "a call answered twice",
      (l: string[]) => {
        const m = message(l, 3);
        l.splice(4, 0, JSON.stringify(m));
        for (let i = 4; i < l.length - 1; i++) {
          const n = message(l, i);
          n.seq = i;
          l[i] = JSON.stringify(n);
        }
        l[l.length - 1] = JSON.stringify({ fleetSessionExportEnd: { messages: 12_001 } });
      },
      'line 5: seq 4: tool call "c0" already has a result (seq 3) after the same assistant message; a call is answered at most once',
    ],
    [
      // Before: "fleet: Maximum call stack size exceeded", exit 1 (the line's value was
      // stringified, recursively, before the API, which refuses such nesting, could say so).
      "a message nested 100,000 deep",
      (l: string[]) =>
        (l[3] =
          '{"seq":3,"role":"assistant","content":"","stopReason":"tool_use","createdAt":"2026-01-01T00:00:00.000Z",' +
          `"toolCalls":[{"id":"deep","name":"write_file","arguments":{"a":${"[".repeat(100_000)}${"]".repeat(100_000)}}}]}`),
      "line 4: seq 3: toolCalls[0].arguments: nests deeper than 100 levels",
    ],
    [
      "a file cut short",
      (l: string[]) => l.splice(9_000),
      "line 9001: the file ends without its end line (fleetSessionExportEnd) after 8999 messages: the export was cut short",
    ],
    [
      "no header",
      (l: string[]) => l.shift(),
      "line 1: the first line is not the header of a `fleet session export` file ({fleetSessionExport: 1, agent, …})",
    ],
  ])(
    "%s: one line, exit 2, nothing created",
    { timeout: 120_000 },
    async ([name, edit, expected], { expect }) => {
      const file = await variant(`${name.replace(/\W+/g, "-")}.jsonl`, edit);
      const before = await sessionCount();
      const result = await cli(["session", "import", file]);
      expect(result.stderr, `exit code ${result.code}`).toBe(`fleet session import: ${expected}\n`);
      expect(result.code).toBe(2);
      expect(result.stdout).toBe("");
      expect(await sessionCount()).toBe(before);
    },
  );

  it("an agent the API refuses: its message, exit 2, nothing created", async ({ expect }) => {
    const file = await variant("bad-agent.jsonl", (l) => {
      l[0] = JSON.stringify({ ...JSON.parse(l[0]!), agent: { model: { provider: "nope" } } });
    });
    const before = await sessionCount();
    const result = await cli(["session", "import", file]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^fleet session import: .*\(agent\.model\.provider\)\n$/);
    expect(await sessionCount()).toBe(before);
  }, 120_000);
});

describe("fleet session export of a session that changes meanwhile", () => {
  it("writes every message once, in seq order, also those stored while it reads", async () => {
    const first = history(4_000);
    const { id } = await client.createSession({ agent: AGENT, messages: first });
    const more = history(2_000, 4_000);
    let pages = 0;
    let appended = false;
    // Before the second page is read, 2,000 more messages are stored.
    const proxy = await startApiProxy(url, (req, _res, forward) => {
      if (req.method === "GET" && req.url?.startsWith(`/v1/sessions/${id}`) && ++pages === 2) {
        void client.importMessages(id, more, { afterSeq: 4_000 }).then(() => {
          appended = true;
          forward();
        });
        return;
      }
      forward();
    });
    try {
      const result = await cli(["session", "export", id], proxy.url);
      expect(result.code, result.stderr).toBe(0);
      expect(appended).toBe(true);
      const lines = result.stdout.trimEnd().split("\n");
      const messages = lines.slice(1, -1).map((l) => JSON.parse(l) as StoredMessage);
      expect(messages.map((m) => m.seq)).toEqual(Array.from({ length: 6_000 }, (_, i) => i + 1));
      expect(messages).toEqual([...first, ...more]);
      const { spent } = await client.getSession(id, { limit: 1, runsLimit: 0 });
      expect(JSON.parse(lines.at(-1)!)).toEqual({ fleetSessionExportEnd: { messages: 6_000, spent } });
    } finally {
      proxy.server.closeAllConnections();
      await new Promise((resolve) => proxy.server.close(resolve));
    }
  }, 120_000);

  it("a page with a gap stops it, exit 1, and --out leaves no file", async () => {
    const { id } = await client.createSession({ agent: AGENT, messages: history(2_400) });
    // An API answering a page without one of its messages (seq 2,100).
    const proxy = await startApiProxy(url, (req, res, forward) => {
      if (!(req.method === "GET" && req.url?.includes("afterSeq=2000"))) return forward();
      const { hostname, port } = new URL(url);
      httpRequest({ hostname, port, path: req.url, method: "GET", headers: req.headers }, (answer) => {
        let body = "";
        answer.on("data", (d) => {
          body += d;
        });
        answer.on("end", () => {
          const page = JSON.parse(body);
          page.messages = page.messages.filter((m: StoredMessage) => m.seq !== 2_100);
          res.writeHead(200, { "content-type": "application/json" });
          res.end(JSON.stringify(page));
        });
      }).end();
    });
    try {
      const out = join(fleet.config.toolDir, "gap.jsonl");
      const result = await cli(["session", "export", id, "--out", out], proxy.url);
      expect(result.stderr).toBe(
        `fleet session export: session ${id}: the API sent seq 2101 after seq 2099: seq 2100 is missing; no file was written\n`,
      );
      expect(result.code).toBe(1);
      await expect(readFile(out)).rejects.toMatchObject({ code: "ENOENT" });
    } finally {
      proxy.server.closeAllConnections();
      await new Promise((resolve) => proxy.server.close(resolve));
    }
  }, 120_000);

  it("an unknown session: one line, exit 2", async () => {
    const result = await cli(["session", "export", "00000000-0000-4000-8000-000000000000"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^fleet session export: .*not found\n$/);
  }, 60_000);
});
