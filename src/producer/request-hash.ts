/**
 * What an `Idempotency-Key` is bound to (contracts §9): the method, the path and the body as
 * a JSON value. Objects' keys are sorted, so the same body serialised with its keys in
 * another order (a client that rebuilds it for a retry) is the same request, not a 409.
 */
import { createHash } from "node:crypto";

/**
 * A JSON.stringify replacer that gives every object its keys in sorted order (objects already
 * in order pass as they are), about twice JSON.stringify's own time where building the text
 * by hand took five to ten times it. Integer-like keys come first in numeric order whatever
 * the insertion order (JavaScript's rule), which still makes the text a function of the set
 * of keys.
 */
function sortedKeys(_key: string, value: unknown): unknown {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  const keys = Object.keys(value);
  let inOrder = true;
  for (let i = 1; i < keys.length && inOrder; i++) inOrder = keys[i - 1]! <= keys[i]!;
  if (inOrder) return value;
  const sorted: Record<string, unknown> = {};
  for (const key of keys.sort()) sorted[key] = (value as Record<string, unknown>)[key];
  return sorted;
}

/** JSON with every object's keys sorted; arrays keep their order. Pure. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, sortedKeys) ?? "null";
}

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

/** The request's hash, keys in any order. */
export function requestHash(method: string, url: string, body: unknown): string {
  return sha256(`${method} ${url}\n${canonicalJson(body ?? null)}`);
}

/**
 * The hash of releases before keys were sorted (the body as parsed, in its own key order): a
 * key stored by one of them during a rolling upgrade still replays for the same request.
 */
export function legacyRequestHash(method: string, url: string, body: unknown): string {
  return sha256(`${method} ${url}\n${JSON.stringify(body ?? null)}`);
}

/**
 * The request target a key is bound to (pure): the path, and the query as the routes read it
 * (parsed), its parameters in sorted order, so that `?a=1&b=2` and `?b=2&a=1` are one request
 * and `?a=1&b=3` another (a repeated parameter keeps its values' order). Without a query, the
 * path alone, hashed as before. Hashed as sent, the reordered query was refused 409
 * `idempotency_key_reused`.
 */
export function requestTarget(url: string, query: unknown): string {
  const path = url.split("?", 1)[0]!;
  const empty =
    query === null || query === undefined || (typeof query === "object" && Object.keys(query).length === 0);
  return empty ? path : `${path}?${canonicalJson(query)}`;
}
