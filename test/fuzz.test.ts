/**
 * Fuzz suite (issue "Nothing runs away"): random bytes, random JSON bodies, random histories
 * and random agents thrown at the real HTTP API, a live worker process and a sweeper.
 *
 * Properties:
 * - The API never answers 5xx. Every bad input is a 4xx of the shape
 *   `{error: {code, message}}` (naming the field where there is one) with no stack trace.
 * - Every session that was created and given a run ends terminal within a bound:
 *   `completed`, or `parked` with a reason. A session refused at creation (4xx) or whose
 *   every request to run was refused (4xx) has no run at all.
 *
 * The live-fleet property runs a handful of sessions at once per case and does not shrink
 * (each failing attempt would wait the whole bound); its failure message carries the
 * scenarios and what each stuck session looked like, and fast-check prints the seed to
 * replay it (`fc.assert(..., { seed, path })`).
 * `FUZZ_SCALE=N` multiplies the number of cases for a longer hunt.
 */
import { request } from "node:http";
import { connect } from "node:net";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../src/shared/config.js";
import { STOP_REASONS } from "../src/shared/stop-reasons.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { type Answer, answerOf } from "./support/openapi-sweep.js";

/** `FUZZ_SCALE=5 npx vitest run test/fuzz.test.ts` hunts longer (5× the cases). */
const SCALE = Number(process.env.FUZZ_SCALE ?? 1);
const runs = (n: number) => Math.max(1, Math.round(n * SCALE));
/** How long a session that was given a run may take to end terminal. */
const TERMINAL_BOUND_MS = 25_000;
/** A small, fast fleet: short lease, short backoff, few automatic resumes. */
const FLEET_TUNING = {
  LEASE_TTL_MS: "1000",
  SWEEPER_BACKOFF_MS: "50",
  SWEEPER_MAX_ATTEMPTS: "3",
  SWEEP_INTERVAL_MS: "100",
};
const BUILTIN_TOOLS = ["write_file", "append_file", "sleep", "fail"] as const;
const UNKNOWN = "00000000-0000-4000-8000-000000000000";

// biome-ignore lint/suspicious/noExplicitAny: parsed JSON answers of many shapes, checked field by field
type Json = any;

let fleet: FleetEnv;
let sweeper: RunningSweeper;
let port: number;
let existingId: string;

// ---------------------------------------------------------------------------------------
// HTTP without a client's safety nets: any method, any path bytes, any body, any headers.
// ---------------------------------------------------------------------------------------

function call(
  method: string,
  path: string,
  options: { body?: Buffer | string; contentType?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...options.headers };
    if (options.contentType !== undefined) headers["content-type"] = options.contentType;
    if (options.body !== undefined) headers["content-length"] = String(Buffer.byteLength(options.body));
    const req = request({ host: "127.0.0.1", port, method, path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve(answerOf(res.statusCode ?? 0, res.headers["content-type"], chunks)));
      res.on("error", reject);
    });
    req.on("error", reject);
    if (options.body !== undefined) req.write(options.body);
    req.end();
  });
}

const postJson = (path: string, body: unknown) =>
  call("POST", path, { body: JSON.stringify(body), contentType: "application/json" });
const getJson = (path: string) => call("GET", path);

/** No 5xx; a 4xx (other than to HEAD) is `{error: {code, message}}` without internals. */
function checkAnswer(answer: Answer, what: string, method = "GET"): void {
  const context = `${what} → ${answer.status} ${answer.text.slice(0, 500)}`;
  expect(answer.status, context).toBeLessThan(500);
  expect(answer.status, context).toBeGreaterThanOrEqual(200);
  if (answer.status < 400 || method === "HEAD") return;
  expect(answer.contentType, context).toMatch(/application\/json/);
  expect(answer.json, context).toMatchObject({
    error: { code: expect.any(String), message: expect.any(String) },
  });
  expect(answer.json.error.message.length, context).toBeGreaterThan(0);
  if (answer.json.error.field) expect(answer.json.error.message, context).toContain(answer.json.error.field);
  expect(answer.text, context).not.toMatch(/ {4}at |node_modules|\.ts:\d+|\.js:\d+/);
}

/** A 400 that names a field starting with `prefix` (or with one of them). */
function checkRefused(answer: Answer, what: string, prefix: string | string[]): void {
  checkAnswer(answer, what, "POST");
  const context = `${what} → ${answer.status} ${answer.text.slice(0, 500)}`;
  expect(answer.status, context).toBe(400);
  expect(typeof answer.json.error.field, context).toBe("string");
  const prefixes = typeof prefix === "string" ? [prefix] : prefix;
  expect(
    prefixes.some((p) => answer.json.error.field.startsWith(p)),
    `${context}: expected a field starting with ${prefixes.join(" or ")}`,
  ).toBe(true);
}

// ---------------------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------------------

/** Text with the awkward parts over-represented: NUL, emoji, lone surrogates, controls. */
const NASTY = ["\u0000", "😀", "\uD800", "\uDC00", "\uDBFF\uDFFF", "é", "\u202E", "\uFFFF", "\n", '"', "\\"];
const nastyText = fc
  .array(
    fc.oneof(
      fc.string({ maxLength: 6 }),
      fc.string({ unit: "binary", maxLength: 3 }),
      fc.constantFrom(...NASTY),
    ),
    { maxLength: 6 },
  )
  .map((parts) => parts.join(""));
/** Text Postgres can store as it is: no NUL, no lone surrogate. */
const cleanText = fc
  .array(fc.oneof(fc.string({ maxLength: 6 }), fc.constantFrom("😀", "é", "\u202E", "\n", '"')), {
    maxLength: 5,
  })
  .map((parts) => parts.join(""))
  .filter((s) => storable(s));
const cleanNonEmpty = cleanText.filter((s) => s.length > 0);

function storable(s: string): boolean {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what is looked for
  return !/\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);
}
/** A string no field accepts: it carries NUL or a lone surrogate. */
const unstorableText = fc
  .tuple(cleanText, fc.constantFrom("\u0000", "\uD800", "\uDC00", "a\u0000b"), cleanText)
  .map(([a, bad, b]) => `${a}${bad}${b}`);

const smallJson = fc.jsonValue({ maxDepth: 3 });
/** JSON with no `__proto__` or `constructor` key (the API refuses those, naming them). */
const plainJson = smallJson.filter((v) => !/"(__proto__|constructor)":/.test(JSON.stringify(v)));
const stopReasonArb = fc.oneof(
  { arbitrary: fc.constantFrom("end_turn", "tool_use"), weight: 5 },
  { arbitrary: fc.constantFrom(...STOP_REASONS), weight: 3 },
  { arbitrary: fc.constantFrom("stop", "weird", "END_TURN"), weight: 1 },
  { arbitrary: nastyText.filter((s) => s.length > 0), weight: 1 },
);

/** Arguments for a built-in tool: usually right, sometimes wrong. */
function argsFor(name: string): fc.Arbitrary<Record<string, unknown>> {
  const path = fc.oneof(
    { arbitrary: fc.constantFrom("a.txt", "dir/b.txt", "notes.md"), weight: 4 },
    { arbitrary: fc.constantFrom("../escape.txt", "/etc/passwd", "", "a\u0000b"), weight: 1 },
    { arbitrary: nastyText, weight: 1 },
  );
  const right: Record<string, fc.Arbitrary<Record<string, unknown>>> = {
    write_file: fc.record({ path, content: nastyText }),
    append_file: fc.record({ path, line: nastyText }),
    sleep: fc.record({ ms: fc.integer({ min: 0, max: 60 }) }),
    fail: fc.record({ message: nastyText }),
  };
  const wrong = fc.dictionary(nastyText, plainJson, { maxKeys: 3 });
  return fc.oneof({ arbitrary: right[name] ?? wrong, weight: 4 }, { arbitrary: wrong, weight: 1 });
}

const scriptedCallArb = fc
  .oneof(
    { arbitrary: fc.constantFrom(...BUILTIN_TOOLS), weight: 6 },
    { arbitrary: fc.constantFrom("unknown_tool", "rm_rf"), weight: 1 },
    { arbitrary: nastyText.filter((s) => s.length > 0), weight: 1 },
  )
  .chain((name) =>
    fc.record(
      {
        id: fc.oneof(
          fc.constantFrom("c1", "c2", "c3"),
          nastyText.filter((s) => s.length > 0),
        ),
        name: fc.constant(name),
        arguments: argsFor(name),
      },
      { requiredKeys: ["name"] },
    ),
  );

const stepArb = fc
  .record(
    {
      text: nastyText,
      toolCalls: fc.array(scriptedCallArb, { maxLength: 3 }),
      stopReason: stopReasonArb,
      delayMs: fc.integer({ min: 0, max: 40 }),
      fault: fc.constantFrom("connection", "stream_cut"),
      faultTimes: fc.integer({ min: 0, max: 2 }),
    },
    { requiredKeys: [] },
  )
  // A fault that fires on every attempt is the slow case (retries, then resumes): keep it rarer.
  .chain((step) =>
    step.fault !== undefined && step.faultTimes !== undefined
      ? fc.oneof(
          { arbitrary: fc.constant(step), weight: 4 },
          { arbitrary: fc.constant({ ...step, faultTimes: undefined }), weight: 1 },
        )
      : fc.constant(step),
  )
  .map((step) => JSON.parse(JSON.stringify(step)) as Record<string, unknown>);

const scriptedModelArb = fc.record({
  provider: fc.constant("scripted"),
  steps: fc.array(stepArb, { minLength: 1, maxLength: 4 }),
});

const validAgentArb = fc.record(
  {
    model: scriptedModelArb,
    tools: fc.subarray([...BUILTIN_TOOLS]),
    system: cleanText,
    maxTurns: fc.integer({ min: 1, max: 6 }),
    pauseLimit: fc.integer({ min: 0, max: 3 }),
    continueOnMaxOutput: fc.boolean(),
    continueOnPause: fc.boolean(),
    fallbackModels: fc.array(scriptedModelArb, { maxLength: 1 }),
  },
  { requiredKeys: ["model"] },
);

/** An agent that is invalid in one known place: the 400 must name a field under it. */
const invalidAgentArb: fc.Arbitrary<{ agent: unknown; field: string }> = fc.oneof(
  fc.constant({ agent: undefined, field: "agent" }),
  smallJson
    .filter((v) => v === null || typeof v !== "object" || Array.isArray(v))
    .map((agent) => ({ agent, field: "agent" })),
  validAgentArb.chain((agent) =>
    fc.oneof(
      fc.constant({ agent: { ...agent, model: { provider: "nope" } }, field: "agent.model" }),
      fc.constant({
        agent: { ...agent, model: { provider: "scripted", steps: [] } },
        field: "agent.model.steps",
      }),
      fc.constant({
        agent: { ...agent, model: { provider: "openai", model: "gpt-4o-mini", apiKey: "sk-x" } },
        field: "agent.model.apiKey",
      }),
      fc
        .constantFrom(0, -1, 1.5, 1e9, null, "3")
        .map((maxTurns) => ({ agent: { ...agent, maxTurns }, field: "agent.maxTurns" })),
      unstorableText.map((system) => ({ agent: { ...agent, system }, field: "agent.system" })),
      unstorableText.map((name) => ({ agent: { ...agent, tools: [name] }, field: "agent.tools[0]" })),
      fc.constant({ agent: { ...agent, tools: ["no_worker_has_this"] }, field: "agent.tools[0]" }),
      fc.constant({ agent: { ...agent, tools: [""] }, field: "agent.tools[0]" }),
      fc.constant({ agent: { ...agent, bogus: true }, field: "agent.bogus" }),
      fc.constant({
        agent: { ...agent, model: { provider: "scripted", steps: [{ fault: "meteor" }] } },
        field: "agent.model.steps[0].fault",
      }),
      fc.constant({
        agent: { ...agent, model: { provider: "scripted", steps: [{ delayMs: -5 }] } },
        field: "agent.model.steps[0].delayMs",
      }),
      unstorableText.map((model) => ({
        agent: { ...agent, model: { provider: "openai", model } },
        field: "agent.model.model",
      })),
    ),
  ),
);

// Histories (contracts §1): valid ones (well-formed or not: a malformed pairing is valid
// JSON and is stored) and ones invalid in one known message.

const ID_POOL = ["a", "b", "c"] as const;
const historyCallArb = fc.record({
  id: fc.constantFrom(...ID_POOL),
  name: fc.constantFrom(...BUILTIN_TOOLS),
  arguments: fc.dictionary(cleanText, fc.oneof(cleanText, fc.integer(), fc.boolean(), fc.constant(null)), {
    maxKeys: 2,
  }),
});
const validMessageArb: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.record({ role: fc.constantFrom("user", "internal"), content: cleanText }),
  fc.record(
    {
      role: fc.constant("assistant"),
      content: cleanText,
      toolCalls: fc.uniqueArray(historyCallArb, { maxLength: 2, selector: (c) => c.id }),
      stopReason: stopReasonArb.filter(storable),
    },
    { requiredKeys: ["role", "content", "stopReason"] },
  ),
  fc.record({
    role: fc.constant("tool"),
    toolCallId: fc.constantFrom(...ID_POOL),
    name: fc.constantFrom(...BUILTIN_TOOLS),
    content: cleanText,
    success: fc.boolean(),
  }),
);
/** A well-formed history: user, then steps whose calls are answered, perhaps not the last. */
const wellFormedHistoryArb = fc
  .array(
    fc.record({
      user: cleanNonEmpty,
      calls: fc.uniqueArray(historyCallArb, { maxLength: 2, selector: (c) => c.id }),
      text: cleanText,
      answered: fc.boolean(),
    }),
    { minLength: 1, maxLength: 3 },
  )
  .map((turns) =>
    turns.flatMap((turn, i) => {
      const last = i === turns.length - 1;
      const out: Record<string, unknown>[] = [{ role: "user", content: turn.user }];
      out.push({
        role: "assistant",
        content: turn.text,
        toolCalls: turn.calls,
        stopReason: turn.calls.length > 0 ? "tool_use" : "end_turn",
      });
      if (!last || turn.answered) {
        for (const call of turn.calls) {
          out.push({ role: "tool", toolCallId: call.id, name: call.name, content: "ok", success: true });
        }
      }
      return out;
    }),
  );
const validHistoryArb = fc.oneof(wellFormedHistoryArb, fc.array(validMessageArb, { maxLength: 6 }));

/**
 * Where a history answers one call twice after the same assistant message: valid messages,
 * but a call is answered at most once, so such a history is refused naming the second one.
 */
function duplicateResultField(history: unknown): string | undefined {
  if (!Array.isArray(history)) return undefined;
  let answered: Set<unknown> | undefined;
  for (const [i, m] of history.entries()) {
    if (m?.role === "assistant") answered = new Set();
    if (m?.role !== "tool" || !answered) continue;
    if (answered.has(m.toolCallId)) return `messages[${i}].toolCallId`;
    answered.add(m.toolCallId);
  }
  return undefined;
}

/** A valid history that also answers each call at most once: nothing in it is refused. */
const answeredOnceHistoryArb = validHistoryArb.filter((h) => duplicateResultField(h) === undefined);

/** Breaks message `index` of a valid history so that the 400 names `messages[index]`. */
const invalidHistoryArb: fc.Arbitrary<{ messages: unknown; field: string }> = fc.oneof(
  smallJson.filter((v) => !Array.isArray(v)).map((messages) => ({ messages, field: "messages" })),
  fc
    .tuple(
      answeredOnceHistoryArb.filter((h) => h.length > 0),
      fc.nat(),
      fc.nat(),
      unstorableText,
      smallJson,
    )
    .map(([history, at, how, bad, junk]) => {
      const index = at % history.length;
      const message = { ...history[index]! };
      const field = `messages[${index}]`;
      const breakers: (() => void)[] = [
        () => {
          message.role = "robot";
        },
        () => {
          message.content = bad;
        },
        () => {
          message.content = typeof junk === "string" ? 42 : junk;
        },
        () => {
          message.extra = junk;
        },
        () => {
          message.seq = -1;
        },
        () => {
          if (message.role === "assistant") delete message.stopReason;
          else message.role = 7;
        },
        () => {
          if (message.role === "assistant") message.toolCalls = [{ id: "x", name: bad, arguments: {} }];
          else if (message.role === "tool") message.toolCallId = bad;
          else message.content = bad;
        },
        () => {
          if (message.role === "assistant") {
            message.toolCalls = [{ id: "x", name: "fail", arguments: { [bad]: 1 } }];
          } else message.content = null;
        },
        () => {
          if (message.role === "assistant") {
            message.toolCalls = [
              { id: "x", name: "fail", arguments: {} },
              { id: "x", name: "fail", arguments: {} },
            ];
          } else message.content = [];
        },
      ];
      breakers[how % breakers.length]!();
      const messages = [...history];
      messages[index] = message;
      return { messages, field };
    }),
);

// ---------------------------------------------------------------------------------------
// The suite
// ---------------------------------------------------------------------------------------

describe("fuzz: no 5xx, nothing runs away", () => {
  beforeAll(async () => {
    fleet = await createFleetEnv("fuzz");
    const { api } = await fleet.startApi();
    port = api.port;
    sweeper = await startSweeper(
      { ...loadConfig({ ...fleet.env, ...FLEET_TUNING }), logLevel: "silent" },
      { serveMetrics: false },
    );
    await fleet.spawnWorker({ ...FLEET_TUNING, WORKER_CONCURRENCY: "8" });
    const created = await postJson("/v1/sessions", {
      agent: { model: { provider: "scripted", steps: [{}] } },
    });
    existingId = created.json.id;
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    await fleet?.close();
  });

  const ROUTES = [
    "/v1/sessions",
    "/v1/batches",
    "/v1/sessions/:id",
    "/v1/sessions/:id/messages",
    "/v1/sessions/:id/resume",
    "/v1/sessions/:id/resume-point",
    "/v1/runs/:id",
    "/v1/sessions/:id/cancel",
    "/v1/batches/:id",
    "/v1/batches/:id/results",
    "/v1/batches/:id/cancel",
    "/v1/batches/:id/sessions",
    "/v1/openapi.json",
    "/metrics",
    "/healthz",
    "/",
    "/v1",
    "/v1/nothing",
    "/v1/sessions/:id/nothing",
    "/v2/sessions",
  ] as const;
  /** Path segments: known, unknown, weird and percent-encoded bytes that are not UTF-8. */
  const idArb = fc.oneof(
    fc.constant("EXISTING"),
    fc.constant(UNKNOWN),
    fc.constantFrom("%00", "%FF", "%ED%A0%80", "%C0%AF", "a%00b", "%", "%zz", "..", "%2F", "x".repeat(5_000)),
    nastyText.map((s) => encodeURIComponent(s.replace(/[\uD800-\uDFFF]/g, "x"))),
  );
  const CONTENT_TYPES = [
    undefined,
    "application/json",
    "application/json; charset=utf-8",
    "application/json; charset=latin1",
    "application/json; charset=utf-16",
    "APPLICATION/JSON",
    "application/vnd.api+json",
    "text/plain",
    "text/html",
    "application/octet-stream",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "a/b;;;=",
    "",
    "application/json\u00ff",
  ];
  const bodyArb = fc.oneof(
    fc.constant(undefined),
    fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)),
    fc.string({ maxLength: 40 }),
    smallJson.map((v) => JSON.stringify(v)),
    fc.constantFrom(
      "",
      "{",
      "null",
      "[]",
      '"x"',
      "1e400",
      "-1e400",
      "123456789012345678901234567890",
      '{"agent": {',
      '{"__proto__": {"x": 1}}',
      '{"constructor": {"prototype": {"x": 1}}}',
      '{"content": "a\\u0000b"}',
      '{"content": "a\\ud800b"}',
      '{"content": 1e400}',
      '{"model": {"provider": "scripted", "steps": [{"delayMs": 1e400}]}}',
    ),
    // Invalid UTF-8 inside a JSON string.
    fc
      .constantFrom([0xff], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80])
      .map((bytes) => Buffer.concat([Buffer.from('{"content": "a'), Buffer.from(bytes), Buffer.from('b"}')])),
  );
  const METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"] as const;

  it("answers raw bytes on every route and method without a 5xx", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...METHODS),
        fc.constantFrom(...ROUTES),
        idArb,
        fc.constantFrom(...CONTENT_TYPES),
        bodyArb,
        fc.constantFrom("", "?limit=0", "?status=%00", "?limit=1e400&status=parked", "?a=%FF&a=1"),
        async (method, route, id, contentType, body, query) => {
          const path = route.replace(":id", id === "EXISTING" ? existingId : id) + query;
          const answer = await call(method, path, { body, contentType });
          checkAnswer(answer, `${method} ${path} [${contentType}] ${String(body).slice(0, 80)}`, method);
        },
      ),
      { numRuns: runs(1000) },
    );
  });

  it("answers bytes that are not HTTP with a 4xx in the error shape", async () => {
    const send = (bytes: Buffer) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect(port, "127.0.0.1");
        const chunks: Buffer[] = [];
        socket.on("data", (c) => chunks.push(c));
        socket.on("error", () => resolve(Buffer.concat(chunks).toString("utf8")));
        socket.on("close", () => resolve(Buffer.concat(chunks).toString("utf8")));
        socket.on("connect", () => socket.end(bytes));
        setTimeout(() => reject(new Error("no answer within 5 s")), 5_000).unref();
      });
    const bytesArb = fc.oneof(
      fc
        .uint8Array({ minLength: 1, maxLength: 64 })
        .map((b) => Buffer.concat([Buffer.from(b), Buffer.from("\r\n\r\n")])),
      fc
        .constantFrom(
          "GARBAGE\r\n\r\n",
          "GET /v1/sessions HTTP/9.9\r\n\r\n",
          "GET /v1 /x HTTP/1.1\r\nHost: x\r\n\r\n",
          "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
          "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
          "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
          `GET /v1/sessions HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`,
          "GET /v1/sessions HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        )
        .map((text) => Buffer.from(text, "latin1")),
    );
    await fc.assert(
      fc.asyncProperty(bytesArb, async (bytes) => {
        const answer = await send(bytes);
        const what = `${JSON.stringify(bytes.toString("latin1").slice(0, 80))} → ${answer.slice(0, 300)}`;
        // Nothing at all is fine too (the peer hung up); an answer is a 4xx in the error shape.
        if (answer === "") return;
        const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(answer)?.[1]);
        expect(status, what).toBeGreaterThanOrEqual(400);
        expect(status, what).toBeLessThan(500);
        // The first answer (more may follow: headers that parsed got an answer of their own).
        const headEnd = answer.indexOf("\r\n\r\n") + 4;
        const length = Number(/\r\ncontent-length: *(\d+)/i.exec(answer.slice(0, headEnd))?.[1]);
        const body = Buffer.from(answer.slice(headEnd)).subarray(0, length).toString("utf8");
        expect(JSON.parse(body), what).toMatchObject({
          error: { code: expect.any(String), message: expect.any(String) },
        });
      }),
      { numRuns: runs(60) },
    );
  });

  it("answers nasty bodies on every POST route without a 5xx", async () => {
    const depth = 100_000;
    const deep = `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
    const deepArray = `${"[".repeat(depth)}${"]".repeat(depth)}`;
    const nestedMeta = `{"agent": {"model": {"provider": "scripted", "steps": [{}]}}, "metadata": {"x": ${deepArray}}}`;
    const nestedArgs = JSON.stringify({
      agent: { model: { provider: "scripted", steps: [{}] } },
      messages: [
        {
          role: "assistant",
          content: "",
          toolCalls: [{ id: "a", name: "fail", arguments: { x: "@" } }],
          stopReason: "tool_use",
        },
      ],
    }).replace('"@"', deepArray);
    const nestedStepArgs = JSON.stringify({
      agent: {
        model: { provider: "scripted", steps: [{ toolCalls: [{ name: "fail", arguments: { x: "@" } }] }] },
      },
    }).replace('"@"', deepArray);
    const huge = `{"content": "${"x".repeat(17 * 1024 * 1024)}"}`;
    const bodies = [deep, deepArray, nestedMeta, nestedArgs, nestedStepArgs, huge];
    for (const route of [
      "/v1/sessions",
      "/v1/batches",
      `/v1/sessions/${existingId}/messages`,
      `/v1/sessions/${existingId}/resume`,
    ]) {
      for (const body of bodies) {
        const answer = await call("POST", route, { body, contentType: "application/json" });
        checkAnswer(answer, `POST ${route} ${body.slice(0, 60)}…(${body.length} chars)`, "POST");
        expect(answer.status).toBeGreaterThanOrEqual(400);
      }
    }
  });

  it("answers any Idempotency-Key on every POST route without a 5xx", async () => {
    const keyArb = fc.oneof(
      fc.string({ minLength: 0, maxLength: 300 }).map((k) => k.replace(/[^\x20-\x7e]/g, "")),
      fc.constantFrom(
        "",
        " ",
        "a".repeat(256),
        "a".repeat(10_000),
        "k\u00e9y",
        "\u00ff\u00fe",
        "key,other",
        "k",
      ),
    );
    await fc.assert(
      fc.asyncProperty(
        keyArb,
        fc.constantFrom(
          "/v1/sessions",
          "/v1/batches",
          `/v1/sessions/${existingId}/messages`,
          `/v1/sessions/${existingId}/resume`,
          `/v1/batches/${UNKNOWN}/sessions`,
          `/v1/batches/${UNKNOWN}/cancel`,
        ),
        fc.oneof(
          fc.constant("{}"),
          fc.constant('{"content": "hi"}'),
          smallJson.map((v) => JSON.stringify(v)),
        ),
        async (key, route, body) => {
          const answer = await call("POST", route, {
            body,
            contentType: "application/json",
            headers: { "idempotency-key": key },
          });
          checkAnswer(
            answer,
            `POST ${route} Idempotency-Key ${JSON.stringify(key.slice(0, 40))} ${body.slice(0, 80)}`,
            "POST",
          );
        },
      ),
      { numRuns: runs(300) },
    );
  });

  it("answers random JSON bodies on every POST route without a 5xx", async () => {
    const sessionBody = fc.record(
      {
        agent: fc.oneof(validAgentArb, smallJson),
        metadata: fc.oneof(fc.dictionary(nastyText, smallJson, { maxKeys: 3 }), smallJson),
        messages: fc.oneof(validHistoryArb, smallJson, fc.array(validMessageArb)),
        extra: smallJson,
      },
      { requiredKeys: [] },
    );
    const resumeBody = fc.oneof(
      fc.record({ model: fc.oneof(scriptedModelArb, smallJson) }, { requiredKeys: [] }),
      smallJson,
    );
    const sendBody = fc.oneof(
      fc.record({ content: fc.oneof(nastyText, smallJson) }, { requiredKeys: [] }),
      smallJson,
    );
    const batchBody = fc.oneof(
      fc.record({
        sessions: fc.array(
          fc.record(
            {
              // Sessions with `input` start running: a quick agent keeps the worker free for
              // the live-fleet property (random agents are its subject).
              agent: fc.oneof(fc.constant({ model: { provider: "scripted", steps: [{}] } }), smallJson),
              input: nastyText,
              metadata: fc.dictionary(nastyText, cleanText, { maxKeys: 2 }),
            },
            { requiredKeys: ["agent"] },
          ),
          { maxLength: 3 },
        ),
      }),
      smallJson,
    );
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          sessionBody.map((body) => ["/v1/sessions", body] as const),
          batchBody.map((body) => ["/v1/batches", body] as const),
          sendBody.map((body) => [`/v1/sessions/${existingId}/messages`, body] as const),
          resumeBody.map((body) => [`/v1/sessions/${existingId}/resume`, body] as const),
          sendBody.map((body) => [`/v1/sessions/${UNKNOWN}/messages`, body] as const),
        ),
        async ([route, body]) => {
          const answer = await postJson(route, body);
          checkAnswer(answer, `POST ${route} ${JSON.stringify(body).slice(0, 300)}`, "POST");
        },
      ),
      { numRuns: runs(600) },
    );
  });

  it("refuses invalid agents and histories with a 400 naming the field, storing nothing", async () => {
    const count = async () => {
      const [row] = await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`;
      return row!.n;
    };
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc
            .tuple(invalidAgentArb, fc.option(answeredOnceHistoryArb, { nil: undefined }))
            .map(([a, messages]) => ({
              body: { agent: a.agent, ...(messages ? { messages } : {}) },
              field: a.field,
            })),
          fc.tuple(validAgentArb, invalidHistoryArb).map(([agent, h]) => ({
            body: { agent, messages: h.messages },
            field: h.field,
          })),
          fc.tuple(validAgentArb, unstorableText).map(([agent, key]) => ({
            body: { agent, metadata: { ok: 1, [key]: "x" } },
            field: "metadata",
          })),
          fc.tuple(validAgentArb, unstorableText).map(([agent, value]) => ({
            body: { agent, metadata: { deep: [{ value }] } },
            field: "metadata.deep[0].value",
          })),
        ),
        async ({ body, field }) => {
          const before = await count();
          const answer = await postJson("/v1/sessions", body);
          checkRefused(answer, `POST /v1/sessions ${JSON.stringify(body).slice(0, 400)}`, field);
          expect(await count()).toBe(before);
        },
      ),
      { numRuns: runs(300) },
    );
    await fc.assert(
      fc.asyncProperty(unstorableText, async (content) => {
        const answer = await postJson(`/v1/sessions/${existingId}/messages`, { content });
        checkRefused(answer, `POST messages ${JSON.stringify(content)}`, "content");
      }),
      { numRuns: runs(30) },
    );
  });

  // -------------------------------------------------------------------------------------
  // Live fleet: every session given a run ends terminal.
  // -------------------------------------------------------------------------------------

  type Scenario = {
    agent: { agent: unknown; field?: string };
    history?: { messages: unknown; field?: string };
    action: "message" | "resume";
    content: string;
    metadata?: Record<string, unknown>;
  };
  const scenarioArb: fc.Arbitrary<Scenario> = fc.record(
    {
      agent: fc.oneof(
        { arbitrary: validAgentArb.map((agent) => ({ agent })), weight: 8 },
        { arbitrary: invalidAgentArb, weight: 1 },
      ),
      history: fc.oneof(
        { arbitrary: validHistoryArb.map((messages) => ({ messages })), weight: 4 },
        { arbitrary: invalidHistoryArb, weight: 1 },
      ),
      action: fc.constantFrom("message", "resume"),
      content: fc.oneof(
        { arbitrary: cleanNonEmpty, weight: 6 },
        { arbitrary: fc.constant(""), weight: 1 },
        { arbitrary: unstorableText, weight: 1 },
      ),
      metadata: fc.dictionary(cleanText, cleanText, { maxKeys: 2 }),
    },
    { requiredKeys: ["agent", "action", "content"] },
  );

  /** A session that must run: a valid agent, no history, a storable message. */
  const runnableArb: fc.Arbitrary<Scenario> = fc.record({
    agent: validAgentArb.map((agent) => ({ agent })),
    action: fc.constant("message" as const),
    content: cleanNonEmpty,
  });

  type Outcome = { scenario: Scenario; id?: string; runs: number; problem?: string };

  function isTerminal(session: Json): boolean {
    const runsDone = session.runs.every((r: Json) => r.status === "ended");
    if (session.status === "completed") return runsDone;
    return session.status === "parked" && typeof session.parkedReason === "string" && runsDone;
  }

  function describeSession(session: Json): string {
    const runs = session.runs.map(
      (r: Json) => `${r.kind}/${r.resumeKind ?? "-"}/${r.trigger}:${r.status}:${r.endedReason ?? "-"}`,
    );
    const last = session.messages.slice(-4).map((m: Json) => ({
      seq: m.seq,
      role: m.role,
      content: String(m.content).slice(0, 60),
      stopReason: m.stopReason,
      toolCalls: m.toolCalls?.map((c: Json) => c.name),
      success: m.success,
    }));
    return JSON.stringify({
      status: session.status,
      tailState: session.tailState,
      parkedReason: session.parkedReason,
      messages: session.messages.length,
      runs: runs.length > 12 ? [...runs.slice(0, 4), `… ${runs.length - 8} more …`, ...runs.slice(-4)] : runs,
      last,
    });
  }

  async function play(scenario: Scenario): Promise<Outcome> {
    const body: Record<string, unknown> = { agent: scenario.agent.agent };
    if (scenario.history) body.messages = scenario.history.messages;
    if (scenario.metadata) body.metadata = scenario.metadata;
    const created = await postJson("/v1/sessions", body);
    checkAnswer(created, `create ${JSON.stringify(body)}`, "POST");
    // Either invalid part may be the one named when both are.
    const expectedFields = [
      scenario.agent.field,
      scenario.history?.field ?? duplicateResultField(scenario.history?.messages),
    ].filter((f) => f !== undefined);
    if (expectedFields.length > 0) {
      checkRefused(created, `create ${JSON.stringify(body)}`, expectedFields);
      return { scenario, runs: 0 };
    }
    expect(created.status, created.text).toBe(201);
    const id: string = created.json.id;
    const started =
      scenario.action === "message"
        ? await postJson(`/v1/sessions/${id}/messages`, { content: scenario.content })
        : await postJson(`/v1/sessions/${id}/resume`, {});
    checkAnswer(started, `${scenario.action} ${id}`, "POST");
    if (scenario.action === "message" && !storable(scenario.content)) {
      checkRefused(started, `message ${JSON.stringify(scenario.content)}`, "content");
    }
    if (started.status >= 400) {
      // Refused (400 bad content, 409 nothing to resume / malformed): nothing may run.
      const session = await getJson(`/v1/sessions/${id}`);
      checkAnswer(session, `get ${id}`);
      if (session.json.runs.length > 0) {
        return { scenario, id, runs: 0, problem: `refused with ${started.status} but has runs` };
      }
      return { scenario, id, runs: 0 };
    }
    expect(started.status, started.text).toBe(202);
    const deadline = Date.now() + TERMINAL_BOUND_MS;
    let last: Json;
    for (;;) {
      const answer = await getJson(`/v1/sessions/${id}`);
      checkAnswer(answer, `get ${id}`);
      last = answer.json;
      if (isTerminal(last)) return { scenario, id, runs: last.runs.length };
      if (Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    return {
      scenario,
      id,
      runs: last.runs.length,
      problem: `not terminal after ${TERMINAL_BOUND_MS} ms: ${describeSession(last)}`,
    };
  }

  /**
   * Sets of sessions played at once: each set waits for its slowest session (a max_turns or
   * attempts_exhausted one takes 1–4 s), so fewer, larger sets play about as many sessions
   * in less time — 4 sets of 4–10 (~28 sessions) rather than 6 of 4–8 (~36): 15 s, not 25 s.
   */
  const LIVE_SETS = runs(4);
  it(
    "ends every session given a run terminal within the bound (completed, or parked with a reason)",
    async () => {
      const outcomes: Outcome[] = [];
      await fc.assert(
        // Each set starts with a session that must run, so the suite never checks refusals
        // alone (how many of the random ones run depends on the seed).
        fc.asyncProperty(
          runnableArb,
          fc.array(scenarioArb, { minLength: 3, maxLength: 9 }),
          async (first, rest) => {
            const scenarios = [first, ...rest];
            const results = await Promise.all(scenarios.map(play));
            outcomes.push(...results);
            expect(
              results[0]!.runs,
              `a valid session given a message ran: ${JSON.stringify(first)}`,
            ).toBeGreaterThan(0);
            const stuck = results.filter((r) => r.problem);
            if (stuck.length > 0) {
              const report = stuck.map(
                (r) => `session ${r.id}: ${r.problem}\n  scenario: ${JSON.stringify(r.scenario)}`,
              );
              throw new Error(`${stuck.length} session(s) did not end terminal:\n${report.join("\n")}`);
            }
          },
        ),
        { numRuns: LIVE_SETS, endOnFailure: true },
      );
      // The suite actually ran sessions, not only refusals: at least the one of each set.
      expect(outcomes.filter((o) => o.runs > 0).length).toBeGreaterThanOrEqual(LIVE_SETS);
    },
    120_000 + LIVE_SETS * 30_000,
  );
});
