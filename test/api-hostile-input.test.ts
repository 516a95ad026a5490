/**
 * Invariant 5 against the real API, route by route: every `/v1` operation the OpenAPI
 * document lists is sent malformed input built from its own documented schemas (wrong JSON
 * types at every field, values just past each documented limit, NUL and lone surrogates in
 * every string, ids and headers, unknown fields, duplicate keys, deep nesting, numbers that
 * JSON.parse turns into Infinity, wrong content types, empty bodies, repeated query strings).
 *
 * Every answer is a 4xx (or a success the documented schema allows) matching the error
 * schema documented for its status, with no stack trace and no internal name; a refused
 * request leaves every table of the fleet's database and every queue as they were.
 *
 * The cases are a fixed list per field plus random combinations drawn by fast-check from a
 * fixed seed (`HOSTILE_SEED=n` for another; the seed is printed on failure).
 * `HOSTILE_LOG=1` prints each hostile request that was accepted (a 2xx), to review by eye.
 */
import { request } from "node:http";
import { connect } from "node:net";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import {
  type Answer,
  answerOf,
  idKindOf,
  type Json,
  OpenApiDoc,
  type Operation,
  queuedJobs,
  setAt,
  sweepFixture,
} from "./support/openapi-sweep.js";

const SEED = Number(process.env.HOSTILE_SEED ?? 20261207);
const RANDOM_RUNS = 150;
const AGENT = { model: { provider: "scripted", steps: [{ text: "ok" }] } };
const UNKNOWN = "00000000-0000-4000-8000-000000000000";
/** Words that name the inside of the fleet, never to be shown to a caller. */
const INTERNAL =
  /\bat [\w.<>]+ \(|node_modules|\.[jt]s:\d+|postgres|drizzle|bullmq|ioredis|ZodError|TypeError|ReferenceError|SyntaxError: Unexpected|Cannot read|undefined is not|relation "|violates|duplicate key|invalid byte sequence|unsupported Unicode|\bsql\b/i;
/** Raw JSON tokens a client could send that `JSON.stringify` never writes. */
const RAW: Record<string, string> = { big: "1e309", negbig: "-1e309", nan: "NaN", inf: "Infinity" };
const rawMarker = (name: string) => `\u0001raw:${name}\u0001`;

type Case = {
  what: string;
  method: string;
  path: string;
  /** The OpenAPI path and method whose documented responses the answer must match. */
  docPath: string;
  body?: string | Buffer;
  contentType?: string;
  headers?: Record<string, string>;
  /** Sent over a raw socket: header bytes no HTTP client library would write. */
  rawHeaders?: string[];
  /** The field broken, for a case that breaks one documented field of a JSON body. */
  field?: string;
  /** Whether a success would break the documented schema (then only a 4xx will do). */
  mustRefuse: boolean;
};

let fleet: FleetEnv;
let port: number;
let key: string;
let doc: Json;
let spec: OpenApiDoc;
let ids: Record<string, string>;

function send(c: Case): Promise<Answer> {
  if (c.rawHeaders) return sendRaw(c);
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, ...c.headers };
    if (c.contentType !== undefined) headers["content-type"] = c.contentType;
    if (c.body !== undefined) headers["content-length"] = String(Buffer.byteLength(c.body));
    const req = request({ host: "127.0.0.1", port, method: c.method, path: c.path, headers }, (res) => {
      if (/event-stream/.test(String(res.headers["content-type"]))) {
        // A stream that was accepted: not a refusal; its headers are all there is to check.
        res.destroy();
        resolve({
          status: res.statusCode ?? 0,
          text: "",
          json: undefined,
          contentType: res.headers["content-type"],
        });
        return;
      }
      const chunks: Buffer[] = [];
      res.on("data", (d: Buffer) => chunks.push(d));
      res.on("end", () => resolve(answerOf(res.statusCode ?? 0, res.headers["content-type"], chunks)));
      res.on("error", reject);
    });
    req.on("error", reject);
    if (c.body !== undefined) req.write(c.body);
    req.end();
  });
}

/** An HTTP/1.1 request written byte by byte, so that a header may carry NUL or non-UTF-8. */
function sendRaw(c: Case): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const body = c.body === undefined ? Buffer.alloc(0) : Buffer.from(c.body);
    const head = [
      `${c.method} ${c.path} HTTP/1.1`,
      "host: 127.0.0.1",
      `authorization: Bearer ${key}`,
      "connection: close",
      ...(c.contentType ? [`content-type: ${c.contentType}`] : []),
      `content-length: ${body.length}`,
      ...(c.rawHeaders ?? []),
      "",
      "",
    ].join("\r\n");
    const chunks: Buffer[] = [];
    socket.on("data", (d: Buffer) => chunks.push(d));
    socket.on("error", reject);
    socket.on("close", () => {
      const all = Buffer.concat(chunks);
      const split = all.indexOf("\r\n\r\n");
      const headText = all.subarray(0, split < 0 ? all.length : split).toString("latin1");
      const status = Number(/^HTTP\/1\.1 (\d+)/.exec(headText)?.[1] ?? 0);
      const contentType = /\r\ncontent-type: ([^\r]*)/i.exec(headText)?.[1];
      let rest: Buffer = split < 0 ? Buffer.alloc(0) : all.subarray(split + 4);
      if (/\r\ntransfer-encoding: chunked/i.test(headText)) rest = unchunk(rest);
      resolve(answerOf(status, contentType, [rest]));
    });
    socket.end(Buffer.concat([Buffer.from(head, "latin1"), body]));
  });
}

function unchunk(data: Buffer): Buffer {
  const out: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = data.indexOf("\r\n", at);
    if (eol < 0) break;
    const size = Number.parseInt(data.subarray(at, eol).toString("latin1"), 16);
    if (!size) break;
    out.push(data.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(out);
}

// ---------------------------------------------------------------------------------------
// What a refused request must not have changed: rows of every table, jobs of every queue.
// ---------------------------------------------------------------------------------------

let countRows: () => Promise<Record<string, number>>;

async function snapshot(): Promise<{ rows: Record<string, number>; jobs: Record<string, number> }> {
  return { rows: await countRows(), jobs: await queuedJobs(fleet) };
}

// ---------------------------------------------------------------------------------------
// The document: operations, their parameters and request body schemas.
// ---------------------------------------------------------------------------------------

const operations = (): Operation[] => spec.operations();
const resolveRef = (schema: Json): Json => spec.resolveRef(schema);
const validates = (schema: Json, value: unknown): boolean => spec.validates(schema, value);
const typesOf = (schema: Json): string[] => spec.typesOf(schema);

function bodySchema(op: Json): Json {
  return op.requestBody?.content?.["application/json"]?.schema;
}

/** A documented body the route accepts (as far as its schema goes), to break one field of. */
function baseBody(docPath: string, method: string): Json {
  const key = `${method} ${docPath}`;
  switch (key) {
    case "POST /v1/sessions":
      return { agent: AGENT, metadata: { k: "v" } };
    case "POST /v1/batches":
      return { sessions: [{ agent: AGENT, input: "hi", customId: "c1", metadata: { k: "v" } }] };
    case "POST /v1/batches/{id}/sessions":
      return { sessions: [{ agent: AGENT, input: "hi", customId: "c2" }] };
    case "POST /v1/sessions/{id}/messages":
      return { content: "hello" };
    case "POST /v1/sessions/{id}/history":
      return { afterSeq: 0, messages: [{ role: "user", content: "hi" }] };
    case "PATCH /v1/sessions/{id}":
      return { sessionEvents: true };
    default:
      return {};
  }
}

type Field = { path: (string | number)[]; schema: Json };

/** Every field the schema documents, down to `depth` levels (first branch of a union too). */
function fieldsOf(schema: Json, path: (string | number)[] = [], depth = 4): Field[] {
  const s = resolveRef(schema);
  if (!s || depth === 0) return [];
  const out: Field[] = path.length > 0 ? [{ path, schema: s }] : [];
  const branches = [...(s.anyOf ?? []), ...(s.oneOf ?? []), ...(s.allOf ?? [])].map(resolveRef);
  const objectBranch = branches.find((b: Json) => b?.properties);
  const props = s.properties ?? objectBranch?.properties;
  if (props) {
    for (const [name, sub] of Object.entries(props)) out.push(...fieldsOf(sub, [...path, name], depth - 1));
  }
  const items = s.items ?? branches.find((b: Json) => b?.items)?.items;
  if (items) out.push(...fieldsOf(items, [...path, 0], depth - 1));
  return out;
}

function limitOf(
  schema: Json,
  key: "maxLength" | "maxItems" | "maxProperties" | "maximum",
): number | undefined {
  const s = resolveRef(schema);
  if (typeof s?.[key] === "number") return s[key];
  for (const b of [...(s?.anyOf ?? []), ...(s?.oneOf ?? [])]) {
    const v = resolveRef(b)?.[key];
    if (typeof v === "number") return v;
  }
  return undefined;
}

/** Bad values for one field, by the types it is documented with. */
function badValues(field: Field, current: unknown): unknown[] {
  const types = typesOf(field.schema);
  const out: unknown[] = [{ "\u0000": 1 }, ["\uD800"], "\u0000", "a\uD800b", "\uDC00", rawMarker("big")];
  if (types.includes("string")) {
    out.push(42, true, { a: 1 });
    const max = limitOf(field.schema, "maxLength");
    if (max !== undefined && max < 2_000_000) out.push("x".repeat(max + 1));
  }
  if (types.includes("number") || types.includes("integer")) {
    out.push("5", -1, 1.5, -0.000001, 1e300, rawMarker("nan"), rawMarker("inf"), rawMarker("negbig"), null);
    const max = limitOf(field.schema, "maximum");
    if (max !== undefined) out.push(max + 1);
  }
  if (types.includes("boolean")) out.push("true", 1, null);
  if (types.includes("array")) {
    out.push({ 0: 1 }, "[]");
    const max = limitOf(field.schema, "maxItems");
    const element = Array.isArray(current) && current.length > 0 ? current[0] : null;
    if (max !== undefined && max < 20_000) out.push(Array.from({ length: max + 1 }, () => element));
  }
  if (types.includes("object")) {
    out.push([], "{}", { bogus_unknown_field: 1 }, { "\uD800": "v" }, { "": 1 }, deep(200));
    if (current && typeof current === "object" && !Array.isArray(current)) {
      out.push({ ...current, bogus_unknown_field: 1 });
    }
    const max = limitOf(field.schema, "maxProperties");
    if (max !== undefined && max < 20_000) {
      out.push(Object.fromEntries(Array.from({ length: max + 1 }, (_, i) => [`k${i}`, i])));
    }
  }
  return out;
}

function deep(levels: number): Json {
  let v: Json = "x";
  for (let i = 0; i < levels; i++) v = i % 2 ? [v] : { a: v };
  return v;
}

function serialize(body: Json): string {
  let text = JSON.stringify(body);
  for (const [name, token] of Object.entries(RAW))
    text = text.replaceAll(JSON.stringify(rawMarker(name)), token);
  return text;
}

/** The URL of an operation, with `id` (a real one of the right kind unless told). */
function urlOf(docPath: string, id?: string): string {
  return docPath.replace("{id}", encodeURIComponent(id ?? ids[idKindOf(docPath)]!));
}

// ---------------------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------------------

const BAD_IDS = [
  "nope",
  "1",
  "\u0000",
  "%00",
  "%ED%A0%80",
  `${UNKNOWN}x`,
  "x".repeat(5000),
  "'; select 1 --",
];
const BAD_QUERY = [
  "-1",
  "1e309",
  "NaN",
  "Infinity",
  "%00",
  "%ED%A0%80",
  "x".repeat(3000),
  "1.5",
  "[]",
  "%FF",
];
const BAD_HEADER_VALUES = ["a\u0000b", "\u00ff\u00fe", "\u00ed\u00a0\u0080", "x".repeat(9000), ""];

const GENERIC_HEADERS = [
  "authorization: Bearer \u0000",
  "authorization: Bearer \u00ff\u00fe",
  "authorization: Basic \u00ed\u00a0\u0080",
  'content-type: application/json; charset="',
  "content-type: application/json\u0000",
  "content-type: \u00ff/\u00fe",
  "x-forwarded-for: \u0000",
  "origin: \u00ff",
  "host: \u0000",
  `x-padding: ${"x".repeat(20_000)}`,
];

function fixedCases(): Case[] {
  const cases: Case[] = [];
  for (const { method, docPath, op } of operations()) {
    const name = `${method} ${docPath}`;
    const schema = bodySchema(op);
    const takesBody = method === "POST" || method === "PATCH";
    const base = baseBody(docPath, method);
    const json = (body: Json, what: string, mustRefuse?: boolean, path = urlOf(docPath)): Case => ({
      what: `${name}: ${what}`,
      method,
      path,
      docPath,
      body: serialize(body),
      contentType: "application/json",
      mustRefuse: mustRefuse ?? (schema ? !validatesRaw(schema, body) : false),
    });
    // Ids that are not ids (each route that takes one).
    if (docPath.includes("{id}")) {
      for (const id of BAD_IDS) {
        cases.push({
          ...(takesBody ? json(base, `id ${JSON.stringify(id.slice(0, 20))}`, true) : {}),
          what: `${name}: id ${JSON.stringify(id.slice(0, 20))}`,
          method,
          path: docPath.replace("{id}", /%/.test(id) ? id : encodeURIComponent(id)),
          docPath,
          mustRefuse: true,
        } as Case);
      }
    }
    // Query parameters: nasty values and the same one repeated.
    for (const param of (op.parameters ?? []).filter((p: Json) => p.in === "query")) {
      for (const value of BAD_QUERY) {
        cases.push({
          ...(takesBody ? json(base, "") : {}),
          what: `${name}: ?${param.name}=${value.slice(0, 20)}`,
          method,
          path: `${urlOf(docPath)}?${param.name}=${/%/.test(value) ? value : encodeURIComponent(value)}`,
          docPath,
          mustRefuse: false,
        } as Case);
      }
      cases.push({
        what: `${name}: ?${param.name} repeated`,
        method,
        path: `${urlOf(docPath)}?${param.name}=1&${param.name}=2`,
        docPath,
        mustRefuse: false,
      });
    }
    // Headers the route reads, with bytes no client would send.
    for (const header of (op.parameters ?? []).filter((p: Json) => p.in === "header")) {
      for (const value of BAD_HEADER_VALUES) {
        cases.push({
          ...(takesBody ? json(base, "") : {}),
          what: `${name}: header ${header.name} ${JSON.stringify(value.slice(0, 12))}`,
          method,
          path: urlOf(docPath),
          docPath,
          rawHeaders: [`${header.name}: ${value}`],
          mustRefuse: false,
        } as Case);
      }
    }
    // Headers every route reads: the key (sent after the right one, so a request has two) and the body's type.
    for (const raw of GENERIC_HEADERS) {
      cases.push({
        ...(takesBody ? json(base, "") : {}),
        what: `${name}: header ${JSON.stringify(raw.slice(0, 40))}`,
        method,
        path: urlOf(docPath),
        docPath,
        rawHeaders: [raw],
        mustRefuse: false,
      } as Case);
    }
    if (!takesBody) continue;
    // The body as a whole.
    // A route whose body is optional takes none, an empty one and `null` alike (request-bodies.ts).
    const required = !!schema && op.requestBody?.required !== false;
    const whole: [string, string | Buffer | undefined, string | undefined, boolean][] = [
      ["empty body, json type", "", "application/json", required],
      ["no body, json type", undefined, "application/json", false],
      ["text/plain", serialize(base), "text/plain", true],
      ["form type", "a=1", "application/x-www-form-urlencoded", true],
      ["json type with charset latin1", serialize(base), "application/json; charset=latin1", false],
      ["not JSON", "{agent:", "application/json", true],
      ["a JSON string", '"x"', "application/json", true],
      ["null", "null", "application/json", required],
      ["an array", "[]", "application/json", true],
      [
        "deep nesting",
        withRaw(base, `"deep":${'{"a":['.repeat(5000)}1${"]}".repeat(5000)}`),
        "application/json",
        true,
      ],
      ["NaN token", "NaN", "application/json", true],
      [
        "duplicate key",
        withRaw(base, '"bogus_unknown_field":1,"bogus_unknown_field":2'),
        "application/json",
        true,
      ],
      ["unknown field", serialize({ ...base, bogus_unknown_field: 1 }), "application/json", !!schema],
      ["__proto__ key", withRaw(base, '"__proto__":{"polluted":1}'), "application/json", !!schema],
      [
        "invalid UTF-8",
        Buffer.concat([Buffer.from('{"content":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]),
        "application/json",
        true,
      ],
    ];
    for (const [what, body, contentType, mustRefuse] of whole) {
      cases.push({
        what: `${name}: ${what}`,
        method,
        path: urlOf(docPath),
        docPath,
        body,
        contentType,
        mustRefuse,
      });
    }
    const keys = Object.keys(base);
    if (keys.length > 0) {
      // The same documented field twice, the second one bad: whichever wins, nothing half-stored.
      const first = keys[0]!;
      const text = withRaw(base, `${JSON.stringify(first)}:"\\u0000"`);
      cases.push({
        what: `${name}: ${first} twice`,
        method,
        path: urlOf(docPath),
        docPath,
        body: text,
        contentType: "application/json",
        mustRefuse: false,
      });
    }
    // Every documented field, one bad value at a time.
    if (!schema) continue;
    for (const field of fieldsOf(schema)) {
      const current = field.path.reduce((n: Json, p) => n?.[p], base);
      for (const value of badValues(field, current)) {
        const body = setAt(base, field.path, value);
        cases.push({
          ...json(body, `${field.path.join(".")} = ${serialize(value).slice(0, 40)}`),
          field: field.path.join("."),
        });
      }
    }
  }
  return cases;
}

/** `b` over `a`, object by object: both bodies' broken fields in one. */
function merge(a: Json, b: Json): Json {
  if (!a || !b || typeof a !== "object" || typeof b !== "object" || Array.isArray(a) || Array.isArray(b))
    return b;
  const out = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = k in a ? merge(a[k], v) : v;
  return out;
}

/** `body` as JSON with `members` (raw JSON text) added last. */
function withRaw(body: Json, members: string): string {
  const text = serialize(body);
  return text === "{}" ? `{${members}}` : text.replace(/\}$/, `,${members}}`);
}

/** Whether the body as the server parses it (raw tokens become what JSON.parse makes of them) validates. */
function validatesRaw(schema: Json, body: Json): boolean {
  let parsed: Json;
  try {
    parsed = JSON.parse(serialize(body));
  } catch {
    return false;
  }
  return validates(schema, parsed);
}

// ---------------------------------------------------------------------------------------
// The check of one answer
// ---------------------------------------------------------------------------------------

async function check(c: Case, before: Awaited<ReturnType<typeof snapshot>>): Promise<boolean> {
  const answer = await send(c);
  const context = `${c.what}\n  ${c.method} ${c.path.slice(0, 200)} → ${answer.status} ${answer.text.slice(0, 400)}`;
  expect(answer.status, context).toBeGreaterThanOrEqual(200);
  expect(answer.status, context).toBeLessThan(500);
  if (process.env.HOSTILE_LOG && answer.status < 400)
    console.log("ACCEPTED", answer.status, c.what.slice(0, 150));
  if (answer.status < 400) {
    expect(c.mustRefuse, `${context}\n  accepted input its documented schema refuses`).toBe(false);
    return false;
  }
  // An error says nothing of the inside (a success may: the document, the caller's own data).
  expect(answer.text, context).not.toMatch(INTERNAL);
  expect(answer.contentType, context).toMatch(/application\/json/);
  expect(answer.json, context).toMatchObject({
    error: { code: expect.any(String), message: expect.any(String) },
  });
  const documented = doc.paths[c.docPath][c.method.toLowerCase()].responses[answer.status];
  expect(documented, `${context}\n  status not documented`).toBeDefined();
  const schema = documented.content?.["application/json"]?.schema;
  if (schema)
    expect(validates(schema, answer.json), `${context}\n  not the documented error shape`).toBe(true);
  const after = await snapshot();
  // A refusal under a valid Idempotency-Key is kept, to be answered again to a retry
  // (idempotency-hooks.ts `keepsAnswer`): that one row, and nothing else, may be new.
  const keyed = c.headers?.["idempotency-key"] !== undefined;
  const kept = after.rows["public.idempotency_keys"]! - before.rows["public.idempotency_keys"]!;
  expect(kept, context).toBeLessThanOrEqual(keyed ? 1 : 0);
  after.rows["public.idempotency_keys"] = before.rows["public.idempotency_keys"]!;
  expect(after, `${context}\n  a refused request changed what is stored or queued`).toEqual(before);
  return true;
}

describe("the API under hostile input (invariant 5)", () => {
  beforeAll(async () => {
    fleet = await createFleetEnv("hostile-input");
    key = (await new ApiKeys(fleet.database).create("a")).key;
    const { api } = await fleet.startApi();
    port = Number(new URL(api.url).port);
    const opened = await send({
      what: "doc",
      method: "GET",
      path: "/v1/openapi.json",
      docPath: "",
      mustRefuse: false,
    });
    expect(opened.status).toBe(200);
    doc = opened.json;
    spec = new OpenApiDoc(doc);
    const post = async (path: string, body: unknown) => {
      const a = await send({
        what: path,
        method: "POST",
        path,
        docPath: "",
        body: JSON.stringify(body),
        contentType: "application/json",
        mustRefuse: false,
      });
      expect(a.status, a.text).toBeLessThan(300);
      return a.json;
    };
    ({ ids, countRows } = await sweepFixture(fleet, AGENT, post));
  }, 60_000);
  afterAll(() => fleet?.close());

  it("an id over 100 characters is a 414 each route that takes an id documents", async () => {
    const routes = operations().filter((o) => o.docPath.includes("{id}"));
    expect(routes.length).toBeGreaterThan(10);
    for (const { method, docPath } of routes) {
      const c: Case = {
        what: `${method} ${docPath}`,
        method,
        path: urlOf(docPath, "x".repeat(101)),
        docPath,
        mustRefuse: true,
      };
      const answer = await send(c);
      expect(answer.status, c.what).toBe(414);
      expect(
        doc.paths[docPath][method.toLowerCase()].responses[414],
        `${c.what}: 414 documented`,
      ).toBeDefined();
      await check(c, await snapshot());
    }
  });

  it("headers too large (431) or not HTTP (400): a status every route documents", async () => {
    for (const { method, docPath } of operations()) {
      for (const [raw, status] of [
        [`x-padding: ${"x".repeat(20_000)}`, 431],
        ["x-bad: a\u0000b", 400],
      ] as const) {
        const c: Case = {
          what: `${method} ${docPath}`,
          method,
          path: urlOf(docPath),
          docPath,
          rawHeaders: [raw],
          mustRefuse: true,
        };
        const answer = await send(c);
        expect(answer.status, c.what).toBe(status);
        expect(
          doc.paths[docPath][method.toLowerCase()].responses[status],
          `${c.what}: ${status} documented`,
        ).toBeDefined();
        await check(c, await snapshot());
      }
    }
  });

  it("every documented operation, every field: a documented 4xx, nothing stored, nothing queued", async () => {
    const cases = fixedCases();
    const ops = new Set(cases.map((c) => `${c.method} ${c.docPath}`));
    expect([...ops].sort()).toEqual(
      operations()
        .map((o) => `${o.method} ${o.docPath}`)
        .sort()
        .filter((o) => ops.has(o)),
    );
    expect(ops.size, "every operation but the document itself has cases").toBeGreaterThanOrEqual(
      operations().length - 2,
    );
    let refused = 0;
    let before = await snapshot();
    // Every case runs; what went wrong is reported at the end, a line per case.
    const failures: string[] = [];
    for (const c of cases) {
      try {
        if (await check(c, before)) refused++;
        else before = await snapshot();
      } catch (error) {
        failures.push((error as Error).message.split("\n").slice(0, 3).join(" | "));
        before = await snapshot();
      }
    }
    expect(failures, `${failures.length} of ${cases.length} cases`).toEqual([]);
    expect(refused).toBeGreaterThan(cases.length / 2);
  }, 120_000);

  it(`random combinations of bad fields (seed ${SEED})`, async () => {
    const bodyCases = fixedCases().filter((c) => c.mustRefuse && c.field !== undefined);
    const groups = new Map<string, Case[]>();
    for (const c of bodyCases) {
      const op = `${c.method} ${c.docPath}`;
      groups.set(op, [...(groups.get(op) ?? []), c]);
    }
    // Drawn as case names, so that a counterexample prints short.
    const byName = new Map(bodyCases.map((c) => [c.what, c]));
    const byOperation = [...groups.values()].map((of) => of.map((c) => c.what));
    let before = await snapshot();
    await fc.assert(
      fc.asyncProperty(
        fc
          .constantFrom(...byOperation)
          .chain((of) => fc.tuple(fc.constantFrom(...of), fc.constantFrom(...of))),
        fc.constantFrom("\u0000", "\uD800", "\uDFFF", "", "x".repeat(300), "ok-key"),
        async ([nameA, nameB], idempotency) => {
          const a = byName.get(nameA)!;
          const b = byName.get(nameB)!;
          // Two bad fields of one route at once, with a hostile Idempotency-Key perhaps.
          const parse = (c: Case) => JSON.parse(String(c.body).replace(/\b1e309\b|NaN|Infinity/g, "0"));
          const merged = merge(parse(a), parse(b));
          const c: Case = {
            ...a,
            what: `${a.what} + ${b.what} + key ${JSON.stringify(idempotency.slice(0, 8))}`,
            body: JSON.stringify(merged),
            headers:
              /^[\x20-\x7e]*$/.test(idempotency) && idempotency ? { "idempotency-key": idempotency } : {},
            rawHeaders: /^[\x20-\x7e]*$/.test(idempotency) ? undefined : [`idempotency-key: ${idempotency}`],
            mustRefuse: !validates(bodySchema(doc.paths[a.docPath][a.method.toLowerCase()]), merged),
          };
          await check(c, before);
          before = await snapshot();
        },
      ),
      { seed: SEED, numRuns: RANDOM_RUNS, endOnFailure: true },
    );
  }, 120_000);
});
