/**
 * A new user's (or an attacker's) sweep of the HTTP API's trust boundary, driven by the
 * API's own OpenAPI document: every operation it lists gets the requests a careless or
 * hostile client sends, so a route added tomorrow is swept by itself. It complements
 * test/api-hostile-input.test.ts (every field × bytes no client should send) with what a
 * person gets wrong: a required field left out, a field of the wrong JSON type (the answer
 * must name it, contracts §4 "invalid body → 400 naming the field"), a huge string, a
 * compressed body, a body just over the size limit, ids that are not ids (`..`, `%2F`,
 * unicode, empty, another case, with a space or a line's end), query values and names that are
 * not what the route reads, no key or a key of another scheme, and methods a path does not take.
 *
 * Every answer: below 500, with the error shape and the status its operation documents
 * (validated against the documented schema, successes too), no stack trace or internal name,
 * no zod words, within a bound (no hang), and nothing stored or queued for a refused request.
 * `SWEEP_LOG=1` prints every request and its answer, to read the messages by eye.
 */
import { request } from "node:http";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BODY_LIMIT } from "../src/shared/body-limit.js";
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

type Req = {
  method: string;
  path: string;
  body?: string | Buffer;
  headers?: Record<string, string>;
};

const AGENT = { model: { provider: "scripted", steps: [{ text: "ok" }] } };
/** No answer, refusal or not, takes this long on an idle fleet: past it, the request hung. */
const HANG_MS = 15_000;
/** Words that name the inside of the fleet, never to be shown to a caller. */
const INTERNAL =
  /\bat [\w.<>]+ \(|node_modules|\/work\/|\.[jt]s:\d+|postgres|drizzle|bullmq|ioredis|ZodError|TypeError|ReferenceError|Cannot read|undefined is not|relation "|violates|duplicate key|\bselect\b.*\bfrom\b|\bsql\b/i;

/** zod's own words, which a 400 says plainly instead (shared/field-errors.ts `inWords`). */
const ZOD_WORDS = /Too (small|big): |Invalid (option|input)|expected int\b|nonoptional/;

let fleet: FleetEnv;
let port: number;
let key: string;
let doc: Json;
let spec: OpenApiDoc;
let ids: Record<string, string>;
let countRows: () => Promise<Record<string, number>>;

function send(r: Req): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, ...r.headers };
    if (headers.authorization === "") delete headers.authorization;
    if (r.body !== undefined && !("transfer-encoding" in headers))
      headers["content-length"] = String(Buffer.byteLength(r.body));
    const req = request({ host: "127.0.0.1", port, method: r.method, path: r.path, headers }, (res) => {
      if (/event-stream/.test(String(res.headers["content-type"]))) {
        res.destroy();
        resolve({ status: res.statusCode ?? 0, text: "", json: undefined, contentType: "text/event-stream" });
        return;
      }
      const chunks: Buffer[] = [];
      res.on("data", (d: Buffer) => chunks.push(d));
      res.on("end", () => resolve(answerOf(res.statusCode ?? 0, res.headers["content-type"], chunks)));
      res.on("error", reject);
    });
    req.setTimeout(HANG_MS, () => {
      req.destroy();
      reject(new Error(`no answer within ${HANG_MS} ms (a hang)`));
    });
    req.on("error", reject);
    if (r.body !== undefined) req.write(r.body);
    req.end();
  });
}

const snapshot = async () => ({ rows: await countRows(), jobs: await queuedJobs(fleet) });

// ---------------------------------------------------------------------------------------
// The document
// ---------------------------------------------------------------------------------------

const operations = (): Operation[] => spec.operations();
const resolveRef = (schema: Json): Json => spec.resolveRef(schema);
const validates = (schema: Json, value: unknown): boolean => spec.validates(schema, value);
const typesOf = (schema: Json): string[] => spec.typesOf(schema);

/** A body the route accepts, to break one thing of. */
function baseBody(method: string, docPath: string): Json {
  // A fresh copy each time, and no object twice in one (structuredClone keeps shared objects shared).
  return JSON.parse(JSON.stringify(baseBodyOf(method, docPath)));
}

function baseBodyOf(method: string, docPath: string): Json {
  switch (`${method} ${docPath}`) {
    case "POST /v1/sessions":
      return {
        agent: { ...AGENT, fallbackModels: [AGENT.model], budget: { maxTokens: 1000 } },
        metadata: { k: "v" },
        messages: [{ role: "user", content: "hi" }],
      };
    case "POST /v1/batches":
      return { sessions: [{ agent: AGENT, input: "hi", customId: "c1" }] };
    case "POST /v1/batches/{id}/sessions":
      return { sessions: [{ agent: AGENT, input: "hi", customId: "c2" }] };
    case "POST /v1/sessions/{id}/messages":
      return { content: "hello", goal: { text: "done", maxRounds: 2 } };
    case "POST /v1/sessions/{id}/resume":
    case "POST /v1/batches/{id}/resume":
      return { model: AGENT.model };
    case "POST /v1/sessions/{id}/history":
      return { afterSeq: 0, messages: [{ role: "user", content: "hi" }] };
    case "PATCH /v1/sessions/{id}":
      return { sessionEvents: true };
    default:
      return {};
  }
}

function urlOf(docPath: string, id?: string): string {
  return docPath.replace("{id}", id ?? ids[idKindOf(docPath)]!);
}

type Path = (string | number)[];
/** A field's path as the API names it: `sessions[0].agent.model`. */
const named = (path: Path) =>
  path.map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? p : `.${p}`)).join("");

/** The fields of the base body that the schema documents, with their schema (depth-bounded). */
function fieldsIn(schema: Json, value: Json, path: Path = [], depth = 5): { path: Path; schema: Json }[] {
  const s = resolveRef(schema);
  if (!s || depth === 0) return [];
  const out = path.length > 0 ? [{ path, schema: s }] : [];
  const branches = [...(s.anyOf ?? []), ...(s.oneOf ?? []), ...(s.allOf ?? [])].map(resolveRef);
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const props = s.properties ?? branches.find((b: Json) => b?.properties)?.properties ?? {};
    for (const [name, v] of Object.entries(value)) {
      if (props[name]) out.push(...fieldsIn(props[name], v, [...path, name], depth - 1));
    }
  } else if (Array.isArray(value) && value.length > 0) {
    const items = s.items ?? branches.find((b: Json) => b?.items)?.items;
    if (items) out.push(...fieldsIn(items, value[0], [...path, 0], depth - 1));
  }
  return out;
}

/** Every field the schema documents, whether the base body has it or not (depth-bounded). */
function documentedFields(schema: Json, path: Path = [], depth = 5): { path: Path; schema: Json }[] {
  const s = resolveRef(schema);
  if (!s || depth === 0) return [];
  const out = path.length > 0 ? [{ path, schema: s }] : [];
  const branches = [...(s.anyOf ?? []), ...(s.oneOf ?? []), ...(s.allOf ?? [])].map(resolveRef);
  const props = s.properties ?? branches.find((b: Json) => b?.properties)?.properties ?? {};
  for (const [name, sub] of Object.entries(props))
    out.push(...documentedFields(sub, [...path, name], depth - 1));
  const items = s.items ?? branches.find((b: Json) => b?.items)?.items;
  if (items) out.push(...documentedFields(items, [...path, 0], depth - 1));
  return out;
}

/** Which properties of an object schema are required (from the object branch of a union too). */
function requiredOf(schema: Json): string[] {
  const s = resolveRef(schema);
  if (!s) return [];
  if (Array.isArray(s.required)) return s.required;
  const branch = [...(s.anyOf ?? []), ...(s.oneOf ?? [])].map(resolveRef).find((b: Json) => b?.required);
  return branch?.required ?? [];
}

function at(body: Json, path: Path): Json {
  return path.reduce((n: Json, p) => n?.[p], body);
}

function removeAt(body: Json, path: Path): Json {
  const copy = structuredClone(body);
  delete at(copy, path.slice(0, -1))[path[path.length - 1]!];
  return copy;
}

/** A value of a JSON type the field is not documented to take (undefined if it takes all). */
function wrongType(schema: Json): unknown {
  const types = typesOf(schema);
  if (types.length === 0) return undefined;
  const candidates: [string, unknown][] = [
    ["string", 42],
    ["object", ["an", "array"]],
    ["array", { an: "object" }],
    ["number", "5"],
    ["integer", "5"],
    ["boolean", "true"],
  ];
  for (const [type, value] of candidates) {
    if (!types.includes(type)) continue;
    const valueType = Array.isArray(value) ? "array" : typeof value;
    if (!types.includes(valueType) && !(valueType === "number" && types.includes("integer"))) return value;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------
// The check of one answer
// ---------------------------------------------------------------------------------------

type Expect = {
  /** A success would be wrong: the request breaks what the document says. */
  mustRefuse?: boolean;
  /** The answer must name this field (its `field`, or its message). */
  names?: string;
  /** Only this status will do. */
  status?: number;
  /** The field was sent with a wrong JSON type: the message says what it must be. */
  typed?: boolean;
  /** What the message must match (an id quoted, say). */
  says?: RegExp;
  /**
   * The body sent, when the sweep made parents of the broken field that the base body had not:
   * an answer naming a required field of them that is missing names a fault of the request too.
   */
  sent?: Json;
};

/** `sessions[0].agent` as a path. */
const pathOf = (field: string): Path =>
  [...field.matchAll(/([^.[\]]+)|\[(\d+)\]/g)].map((m) => (m[2] !== undefined ? Number(m[2]) : m[1]!));

async function sweep(
  what: string,
  op: Operation,
  r: Req,
  want: Expect,
  before: Awaited<ReturnType<typeof snapshot>>,
): Promise<string | undefined> {
  let answer: Answer;
  try {
    answer = await send(r);
  } catch (error) {
    return `${what}: ${(error as Error).message}`;
  }
  const seen = `${what}: ${r.method} ${r.path.slice(0, 80)} → ${answer.status} ${answer.text.slice(0, 300)}`;
  if (process.env.SWEEP_LOG) console.log(seen.slice(0, 400));
  if (answer.status >= 500 || answer.status < 200) return `${seen} (a 5xx)`;
  if (want.status !== undefined && answer.status !== want.status) return `${seen} (wanted ${want.status})`;
  const documented = op.op.responses[String(answer.status)];
  if (!documented) return `${seen} (status not documented)`;
  const schema = documented.content?.["application/json"]?.schema;
  if (answer.status < 400) {
    if (want.mustRefuse) return `${seen} (accepted)`;
    if (schema && answer.json !== undefined && !validates(schema, answer.json))
      return `${seen} (a success not of the documented shape)`;
    return undefined;
  }
  if (schema && !validates(schema, answer.json)) return `${seen} (not the documented shape)`;
  if (!answer.json?.error?.message) return `${seen} (not the error shape)`;
  if (INTERNAL.test(answer.text)) return `${seen} (shows internals)`;
  if (ZOD_WORDS.test(answer.json.error.message)) return `${seen} (in zod's words)`;
  if (want.names !== undefined) {
    // Its `field` is the one broken (or, where the sweep made its parent, a required one of
    // those left out); an answer without `field` says it in its message.
    const { field, message } = answer.json.error;
    const named =
      typeof field === "string"
        ? field === want.names || (want.sent !== undefined && at(want.sent, pathOf(field)) === undefined)
        : String(message).includes(want.names);
    if (!named) return `${seen} (does not name ${want.names})`;
    if (want.typed && !/expected|must be|one of|is required/.test(String(message)))
      return `${seen} (does not say what ${want.names} must be)`;
  }
  if (want.says && !want.says.test(answer.json.error.message)) return `${seen} (does not say ${want.says})`;
  const after = await snapshot();
  if (JSON.stringify(after) !== JSON.stringify(before))
    return `${seen} (a refused request changed what is stored or queued)`;
  return undefined;
}

/** Runs every case, reporting every failure at the end (one line each). */
async function sweepAll(cases: [string, Operation, Req, Expect][]): Promise<void> {
  const failures: string[] = [];
  let before = await snapshot();
  for (const [what, op, r, want] of cases) {
    const failure = await sweep(what, op, r, want, before);
    if (failure) failures.push(failure);
    before = await snapshot();
  }
  expect(failures, `${failures.length} of ${cases.length} cases`).toEqual([]);
}

const json = (body: Json, headers: Record<string, string> = {}) => ({
  body: typeof body === "string" ? body : JSON.stringify(body),
  headers: { "content-type": "application/json", ...headers },
});

const bodyOps = () =>
  operations().filter((o) => o.method === "POST" || o.method === "PATCH" || o.op.requestBody);
const schemaOf = (o: Operation) => o.op.requestBody?.content?.["application/json"]?.schema;

describe("the API's trust boundary, swept from its OpenAPI document", () => {
  beforeAll(async () => {
    fleet = await createFleetEnv("trust-sweep");
    key = (await new ApiKeys(fleet.database).create("a")).key;
    const { api } = await fleet.startApi();
    port = Number(new URL(api.url).port);
    const opened = await send({ method: "GET", path: "/v1/openapi.json" });
    expect(opened.status).toBe(200);
    doc = opened.json;
    spec = new OpenApiDoc(doc);
    const post = async (path: string, body: unknown) => {
      const a = await send({ method: "POST", path, ...json(body) });
      expect(a.status, a.text).toBeLessThan(300);
      return a.json;
    };
    ({ ids, countRows } = await sweepFixture(fleet, AGENT, post));
  }, 60_000);
  afterAll(() => fleet?.close());

  it("a required field left out, or of the wrong JSON type: a 400 naming it", async () => {
    const cases: [string, Operation, Req, Expect][] = [];
    for (const o of bodyOps()) {
      const schema = schemaOf(o);
      if (!schema) continue;
      const base = baseBody(o.method, o.docPath);
      const path = urlOf(o.docPath);
      for (const name of requiredOf(schema)) {
        cases.push([
          `${o.method} ${o.docPath} without ${name}`,
          o,
          { method: o.method, path, ...json(removeAt(base, [name])) },
          { status: 400, names: name },
        ]);
      }
      for (const field of documentedFields(schema)) {
        const value = wrongType(field.schema);
        if (value === undefined) continue;
        for (const req of requiredOf(field.schema)) {
          if (at(base, [...field.path, req]) === undefined) continue;
          cases.push([
            `${o.method} ${o.docPath} without ${named([...field.path, req])}`,
            o,
            { method: o.method, path, ...json(removeAt(base, [...field.path, req])) },
            { status: 400, names: named([...field.path, req]) },
          ]);
        }
        const sent = setAt(base, field.path, value);
        cases.push([
          `${o.method} ${o.docPath} ${named(field.path)} = ${JSON.stringify(value)}`,
          o,
          { method: o.method, path, ...json(sent) },
          { status: 400, names: named(field.path), sent, typed: true },
        ]);
      }
    }
    expect(cases.length).toBeGreaterThan(20);
    await sweepAll(cases);
  }, 60_000);

  it("a huge string in every string field, numbers out of every range: refused or taken, never a 5xx", async () => {
    const cases: [string, Operation, Req, Expect][] = [];
    for (const o of bodyOps()) {
      const schema = schemaOf(o);
      if (!schema) continue;
      const base = baseBody(o.method, o.docPath);
      const path = urlOf(o.docPath);
      for (const field of fieldsIn(schema, base)) {
        const types = typesOf(field.schema);
        const values: unknown[] = [];
        if (types.includes("string")) values.push("x".repeat(900_000), "\u0000", "a\ud800b");
        if (types.includes("number") || types.includes("integer"))
          values.push(-1, 1.5, 2 ** 63, -(2 ** 63), 1e308, "1e309");
        if (types.includes("object")) values.push([{}], null);
        for (const value of values) {
          const body = setAt(base, field.path, value);
          cases.push([
            `${o.method} ${o.docPath} ${named(field.path)} = ${JSON.stringify(value).slice(0, 30)}`,
            o,
            { method: o.method, path, ...json(body) },
            { mustRefuse: !validates(schema, body) },
          ]);
        }
      }
    }
    await sweepAll(cases);
  }, 60_000);

  it("bodies in forms the API does not read: compressed, untyped, over the size limit", async () => {
    const cases: [string, Operation, Req, Expect][] = [];
    for (const o of bodyOps()) {
      const base = JSON.stringify(baseBody(o.method, o.docPath));
      const name = `${o.method} ${o.docPath}`;
      const path = urlOf(o.docPath);
      const r = (body: string | Buffer, headers: Record<string, string>): Req => ({
        method: o.method,
        path,
        body,
        headers,
      });
      const typed = { "content-type": "application/json" };
      cases.push(
        [
          `${name} gzip'd`,
          o,
          r(gzipSync(base), { ...typed, "content-encoding": "gzip" }),
          { status: 415, names: "Content-Encoding" },
        ],
        [
          `${name} labelled br`,
          o,
          r(base, { ...typed, "content-encoding": "br" }),
          { status: 415, names: "Content-Encoding" },
        ],
        [`${name} no content-type`, o, r(base, {}), { status: 415, names: "Content-Type" }],
        [
          `${name} application/json-seq`,
          o,
          r(base, { "content-type": "application/json-seq" }),
          { status: 415, names: "Content-Type" },
        ],
        [
          `${name} one byte over the limit`,
          o,
          r(`{"x":"${"x".repeat(BODY_LIMIT - 7)}"}`, typed),
          { status: 413 },
        ],
        [
          `${name} over the limit, chunked`,
          o,
          r(`{"x":"${"x".repeat(BODY_LIMIT)}"}`, { ...typed, "transfer-encoding": "chunked" }),
          { status: 413 },
        ],
      );
    }
    await sweepAll(cases);
  }, 60_000);

  it("without a key, with a key of another scheme, by a method the path does not take", async () => {
    const cases: [string, Operation, Req, Expect][] = [];
    for (const o of operations()) {
      const name = `${o.method} ${o.docPath}`;
      const takesBody = o.method === "POST" || o.method === "PATCH";
      const body: Partial<Req> = takesBody ? json(baseBody(o.method, o.docPath)) : {};
      const path = urlOf(o.docPath);
      // The document itself is open to no one without a key either (every /v1 route needs one).
      cases.push(
        [
          `${name} without a key`,
          o,
          { method: o.method, path, ...body, headers: { ...body.headers, authorization: "" } },
          { status: 401 },
        ],
        [
          `${name} with the key as Basic`,
          o,
          {
            method: o.method,
            path,
            ...body,
            headers: { ...body.headers, authorization: `Basic ${Buffer.from(`:${key}`).toString("base64")}` },
          },
          { status: 401 },
        ],
      );
      // A method no operation of the path documents: a 404 in the error shape, nothing done.
      const taken = Object.keys(doc.paths[o.docPath]).map((m) => m.toUpperCase());
      if (o.method !== taken[0]) continue;
      for (const method of ["PUT", "PATCH", "DELETE", "POST"].filter((m) => !taken.includes(m)))
        cases.push([
          `${method} ${o.docPath}`,
          { ...o, op: { responses: { 404: { content: {} } } } },
          { method, path, ...json({}) },
          { status: 404, says: /^no route/ },
        ]);
    }
    await sweepAll(cases);
  }, 60_000);

  it("ids that are not ids, and query values that are not what a parameter reads", async () => {
    const cases: [string, Operation, Req, Expect][] = [];
    const badIds = [
      "..",
      "..%2F..%2Fsessions",
      "%2E%2E",
      "%2F",
      "a%2Fb",
      "%C3%A9",
      "%F0%9F%98%80",
      "%20",
      "%09",
      "-1",
      "0",
      "null",
      "{id}",
      "%7Bid%7D",
    ];
    for (const o of operations()) {
      const takesBody = o.method === "POST" || o.method === "PATCH";
      const body = takesBody ? json(baseBody(o.method, o.docPath)) : {};
      const name = `${o.method} ${o.docPath}`;
      if (o.docPath.includes("{id}")) {
        for (const id of [...badIds, ids.session!.toUpperCase(), `${ids.session}%20`, `${ids.session}%0A`]) {
          cases.push([
            `${name} id ${id.slice(0, 40)}`,
            o,
            { method: o.method, path: urlOf(o.docPath, id), ...body },
            // An id with a space or a control in it is named quoted, so that the reader sees it.
            { mustRefuse: true, ...(/%(20|09|0A)/.test(id) ? { says: /"[^"]*(\\n|\\t| )[^"]*"/ } : {}) },
          ]);
        }
        // An empty id: `/v1/sessions//messages`.
        cases.push([
          `${name} empty id`,
          o,
          { method: o.method, path: urlOf(o.docPath, ""), ...body },
          { mustRefuse: true },
        ]);
      }
      for (const param of (o.op.parameters ?? []).filter((p: Json) => p.in === "query")) {
        const numeric = ["integer", "number"].some((t) => typesOf(param.schema).includes(t));
        const values = ["-1", "abc", "1.5", "0x10", "1e3", "", " 1", "%00", "!!!garbage!!!", "eyJ4IjoxfQ"];
        for (const value of values) {
          const refuse = numeric && ["-1", "abc", "1.5", "0x10", "%00", "!!!garbage!!!"].includes(value);
          cases.push([
            `${name} ?${param.name}=${value}`,
            o,
            { method: o.method, path: `${urlOf(o.docPath)}?${param.name}=${encodeURI(value)}`, ...body },
            refuse ? { status: 400, names: param.name } : {},
          ]);
        }
        // qs's list and object forms: a parameter of another name, named as it was sent.
        for (const other of [`${param.name}[]`, `${param.name}[a]`]) {
          cases.push([
            `${name} ?${other}=1`,
            o,
            { method: o.method, path: `${urlOf(o.docPath)}?${other}=1`, ...body },
            { status: 400, names: other },
          ]);
        }
        cases.push([
          `${name} ?${param.name} (no value)`,
          o,
          { method: o.method, path: `${urlOf(o.docPath)}?${param.name}`, ...body },
          {},
        ]);
      }
      cases.push([
        `${name} ?bogus=1`,
        o,
        { method: o.method, path: `${urlOf(o.docPath)}?bogus=1`, ...body },
        { status: 400, names: "bogus" },
      ]);
    }
    await sweepAll(cases);
  }, 60_000);
});
