/**
 * What every request's query and JSON body must be before any route sees it: parseable,
 * storable text (no U+0000, no lone surrogate), no prototype keys, not too deep, no number
 * beyond a double. Each refusal is a 400 naming the field (contracts §4).
 */
import { isUtf8 } from "node:buffer";
import { ValidationError } from "../shared/errors.js";
import { findInJson, type JsonPath } from "../shared/json-walk.js";
import { formatPath, isStorableText, UNSTORABLE_TEXT, unstorableAt } from "../shared/messages.js";

/** Nesting a JSON body may have: deeper values could not be stored (JSON.stringify recurses). */
export const MAX_JSON_DEPTH = 100;
/**
 * Keys one JSON object may have. V8 builds an object of a million keys as a hash table, and
 * every step after parsing (this walk, the schema's unknown-key check, its error) costs about
 * a second each on one: 1.2 million keys in 14 MB held the API's event loop 5.6 s for a 400,
 * against 0.26 s for 16 MB of numbers. No field needs more: metadata's 64 KiB holds < 10,000.
 */
export const MAX_OBJECT_KEYS = 10_000;
/** How many levels of a too-deep value's path its 400 names (`metadata.x[0]`). */
const NAMED_LEVELS = 3;

/**
 * Every query parameter is text Postgres could compare (no U+0000, no lone surrogate): a 400
 * naming it, where the query's value would otherwise reach SQL (`?batch=%00` was a 500).
 */
export function checkQuery(query: unknown): void {
  if (!isObject(query)) return;
  for (const [key, value] of Object.entries(query))
    for (const text of Array.isArray(value) ? value : [value])
      if (typeof text === "string" && !(isStorableText(text) && isStorableText(key)))
        throw isStorableText(key)
          ? new ValidationError(key, UNSTORABLE_TEXT)
          : new ValidationError("", `a query parameter's name ${UNSTORABLE_TEXT}`);
}

/** Spaces, controls and invisible characters (format, separators, unassigned code points). */
const UNSEEN = /[\s\p{C}\p{Z}]/u;

/**
 * An id in a URL that no route could find, quoted for its 404 (pure); undefined for one to
 * look up. No session, run or batch id holds NUL or a lone surrogate (Postgres could not even
 * compare one), none is empty (`DELETE /v1/sessions/`, `fleet batch status ""`) and none holds
 * a space or an invisible character (the API makes every id, of hex digits and dashes). Such an
 * id is named as JSON quotes it, with the unseen characters JSON leaves as they are (U+200B,
 * U+00A0…) escaped too: "session  not found" showed nothing of it, and an id pasted with a
 * trailing space or its line's end read "session ID  not found".
 */
export function unfindableId(id: string): string | undefined {
  if (id !== "" && isStorableText(id) && !UNSEEN.test(id)) return undefined;
  const escaped = (c: string) =>
    Array.from({ length: c.length }, (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, "0")}`).join(
      "",
    );
  return JSON.stringify(id).replace(/[\s\p{C}\p{Z}]/gu, (c) => (c === " " ? c : escaped(c)));
}

/**
 * A `/v1` query parameter is given once (pure): no route reads a list of them, and each read
 * a repeated one as a list and refused it in words about its value, which was right
 * (`?include=usage&include=usage`: `include: expected "usage"`). `path`: without the query.
 */
export function checkRepeatedQuery(path: string, query: unknown): void {
  if (!path.startsWith("/v1/") || !isObject(query)) return;
  for (const [key, value] of Object.entries(query))
    if (Array.isArray(value))
      throw new ValidationError(
        key.length > 100 ? `${key.slice(0, 100)}…` : key,
        `is given ${value.length} times; give it once (no route reads a list of them)`,
      );
}

/** What checkRouteQuery reads of a route's documentation (route-docs.ts `RouteDoc`). */
export type QueryDoc = { querystring?: unknown; body?: unknown };

/**
 * A `/v1` route that documents no query parameter reads none: one sent is a 400 naming it,
 * before an Idempotency-Key is claimed or anything done (pure). Ignored, `DELETE
 * /v1/batches/:id?dryRun=true` deleted the batch and all its sessions, `POST
 * /v1/sessions/:id/cancel?dryRun=1` cancelled, and `POST /v1/sessions?dryRun=1` or
 * `POST /v1/batches/:id/sessions?close=true` created as if the option were absent: an option
 * the caller believed in. The routes that document a query (route-docs.ts `querystring`: the
 * lists, a session's and a batch's reads, the event streams) parse it strictly themselves.
 * A parameter those do not document is a 400 naming it as sent, as the event streams name it:
 * their strict parse named it as a JSON path, `?limit[]=1` (qs's list form) `["limit[]"]:
 * unknown field`, a name no caller could look up.
 * `doc`: the matched route's documentation (undefined: not a documented route, unchecked);
 * `noFields`: the body of a route that reads none (request-bodies.ts `NO_FIELDS`);
 * `path`: the request's path without its query.
 */
export function checkRouteQuery(
  method: string,
  path: string,
  query: unknown,
  doc: QueryDoc | undefined,
  noFields: unknown,
): void {
  if (doc === undefined || !path.startsWith("/v1/") || !isObject(query)) return;
  if (doc.querystring !== undefined) {
    const known = (doc.querystring as { shape?: Record<string, unknown> }).shape;
    const unknown = known && Object.keys(query).find((key) => !Object.hasOwn(known, key));
    if (unknown !== undefined)
      throw new ValidationError(cutName(unknown), "is not a parameter of this route");
    return;
  }
  const [name] = Object.keys(query);
  if (name === undefined) return;
  const quoted = `${method} ${path.length > 200 ? `${path.slice(0, 200)}…` : path}`;
  const reads =
    doc.body === undefined
      ? "it reads only its path"
      : doc.body === noFields
        ? "it reads only its path (and no body or {})"
        : "what it reads goes in its JSON body";
  throw new ValidationError(
    cutName(name),
    method === "DELETE"
      ? `a DELETE takes no query parameters; ${quoted} ${reads.slice("it ".length)}`
      : `${quoted} takes no query parameters; ${reads}`,
  );
}

/** A parameter's name as a 400 names it: its first 100 characters. */
function cutName(name: string): string {
  return name.length > 100 ? `${name.slice(0, 100)}…` : name;
}

/**
 * A body sent in a form the API does not read — another charset, compressed: a 415 naming
 * the header that says so (error-answers.ts).
 */
export class UnsupportedBodyError extends Error {
  override name = "UnsupportedBodyError";
  constructor(
    readonly field: "Content-Type" | "Content-Encoding",
    message: string,
  ) {
    super(message);
  }
}

/**
 * The charset a Content-Type declares (`application/json; charset="UTF-8"` → `utf-8`), lower
 * case and unquoted; undefined when it declares none.
 */
export function declaredCharset(contentType: string | undefined): string | undefined {
  const match = /;\s*charset\s*=\s*("?)([^";\s]*)\1/i.exec(contentType ?? "");
  return match ? match[2]!.toLowerCase() : undefined;
}

/**
 * A JSON body's bytes as text: JSON is UTF-8 (RFC 8259), so a body declared in another
 * charset is an UnsupportedBodyError (415), and so is a compressed one (the API decompresses
 * nothing: a gzip body was read as text, and one said gzip but sent plain was served); bytes
 * that are not UTF-8 are a 400. Decoding them anyway replaced each bad byte with U+FFFD:
 * "café" sent in Latin-1 was stored as "caf\uFFFD" and answered 201.
 */
export function decodeJsonBody(
  bytes: Buffer,
  headers: { "content-type"?: string; "content-encoding"?: string },
): string {
  const encoding = (headers["content-encoding"] ?? "").trim().toLowerCase();
  if (encoding !== "" && encoding !== "identity")
    throw new UnsupportedBodyError(
      "Content-Encoding",
      `the body must be sent uncompressed; Content-Encoding ${JSON.stringify(encoding.slice(0, 40))} is not read here`,
    );
  const charset = declaredCharset(headers["content-type"]);
  if (charset !== undefined && charset !== "utf-8" && charset !== "utf8")
    throw new UnsupportedBodyError(
      "Content-Type",
      `the body must be JSON in UTF-8: Content-Type's charset must be utf-8 or left out, not ${JSON.stringify(charset.slice(0, 40))}`,
    );
  if (!isUtf8(bytes))
    throw new ValidationError("", "the body is not valid UTF-8; JSON must be sent as UTF-8");
  return bytes.toString("utf8");
}

/**
 * Parses a JSON body: what cannot be parsed is a 400 saying why (checkBody checks the rest).
 * An empty body is no body (undefined), as if no Content-Type had been sent: clients and curl
 * send `Content-Type: application/json` with nothing on routes whose body is optional (resume,
 * cancel), which were answered 400; a route that needs a body says that none was sent
 * (request-bodies.ts `parseBody`).
 */
export function parseJsonBody(text: string): unknown {
  if (text.length === 0) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    // Only where: V8's message quotes the body, which is the caller's and may be long.
    const at = /position (\d+)/.exec((error as Error).message)?.[1];
    throw new ValidationError("", `the body is not valid JSON${at ? ` (at position ${at})` : ""}`);
  }
  return value;
}

/**
 * Agents and models are parsed by agent-config.ts and model-config.ts, which store a scripted
 * model's steps (model output) with unstorable code units replaced and refuse them anywhere else.
 */
const parsedAsAgent = (depth: number, path: () => JsonPath): boolean => {
  if (depth > 3) return false;
  const [first, second, third] = path();
  if (depth === 1) return first === "agent" || first === "model";
  return depth === 3 && first === "sessions" && typeof second === "number" && third === "agent";
};

const isObject = (value: unknown): value is object => value !== null && typeof value === "object";

/**
 * Where `value` nests a container deeper than MAX_JSON_DEPTH, named by its first NAMED_LEVELS
 * levels (as checkBody names it); undefined when it does not. For what reads JSON the API
 * will refuse so (the CLI's files) before its own recursive walks overflow the stack.
 */
export function tooDeepAt(value: unknown): JsonPath | undefined {
  const path = findInJson(value, (item, _key, depth) =>
    isObject(item) && depth >= MAX_JSON_DEPTH ? "stop" : undefined,
  );
  return path?.slice(0, NAMED_LEVELS);
}

/**
 * Checks a parsed JSON body before any route sees it, in one walk (json-walk.ts: nothing is
 * allocated per value, so a body of millions of values costs about what parsing it did):
 * - no key that could rewrite an object's prototype once some code assigns it (`__proto__`,
 *   or `constructor` holding `prototype`; Fastify's own parser calls both "not valid JSON");
 * - not nested deeper than MAX_JSON_DEPTH (the field cut to its first levels), no object
 *   with more than MAX_OBJECT_KEYS keys;
 * - no number beyond a double (JSON.parse makes `1e400` Infinity, stored as null);
 * - every string and key other than agents' storable as it is (no U+0000, no lone
 *   surrogate: Postgres refuses them).
 * Each is a 400 naming the field — `content`, `metadata.note`, `messages[2].content`.
 *
 * `rootDepth`: how deep `body` sits in the body a request will carry (the CLI's files check
 * each message as a page will nest it, `{"messages": [message]}`: 2), its fields named from it.
 */
export function checkBody(body: unknown, rootDepth = 0): void {
  let message = "";
  let suffix: string | null = null;
  /** A too-deep value is named by its first levels only. */
  let cut = false;
  /** The depth of the agent being walked through; -1: none. */
  let agentDepth = -1;
  const path = findInJson(body, (item, key, depth, pathOf) => {
    if (agentDepth >= 0 && depth <= agentDepth) agentDepth = -1;
    if (key === "__proto__" || (key === "constructor" && isObject(item) && "prototype" in item)) {
      message = "this key is not accepted";
      if (key === "constructor") suffix = "prototype";
      return "stop";
    }
    if (isObject(item) && !Array.isArray(item) && Object.keys(item).length > MAX_OBJECT_KEYS) {
      message = `has more than ${MAX_OBJECT_KEYS.toLocaleString("en")} keys`;
      return "stop";
    }
    if (isObject(item) && depth + rootDepth >= MAX_JSON_DEPTH) {
      message = `nests deeper than ${MAX_JSON_DEPTH} levels`;
      cut = true;
      return "stop";
    }
    if (typeof item === "number" && !Number.isFinite(item)) {
      message = "is a number too large for a JSON double";
      return "stop";
    }
    if (agentDepth >= 0) return undefined;
    if (unstorableAt(item, key)) {
      message = UNSTORABLE_TEXT;
      return "stop";
    }
    if (rootDepth === 0 && isObject(item) && parsedAsAgent(depth, pathOf)) agentDepth = depth;
    return undefined;
  });
  if (path === undefined) return;
  const named = cut ? path.slice(0, NAMED_LEVELS) : path;
  throw new ValidationError(formatPath("", suffix ? [...named, suffix] : named), message);
}
