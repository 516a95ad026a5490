/**
 * One request to the API as a tenant's client sends it: `Bearer KEY`, a JSON body when one is
 * given, a time limit. For the tests that compare raw answers (statuses, heads) route by route.
 */
export function keyedCall(base: () => string, timeoutMs: number) {
  return (method: string, path: string, key: string, body?: unknown, signal?: AbortSignal) =>
    fetch(`${base()}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: signal ?? AbortSignal.timeout(timeoutMs),
    });
}
