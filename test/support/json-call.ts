/**
 * One request to the API at `base` with `key` as its bearer, a JSON body when given, answered
 * within 10 s: its status and its JSON (query-parameter-names, repeated-query).
 */
// biome-ignore lint/suspicious/noExplicitAny: the answers are JSON of every shape
type Json = any;

export async function jsonCall(
  base: string,
  key: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; json: Json }> {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: response.status, json: await response.json() };
}
