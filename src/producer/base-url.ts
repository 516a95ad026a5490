/**
 * The client's `baseUrl`, checked when the client is made: a value that is no http(s) URL
 * ("localhost:8080", which `URL` reads as the scheme `localhost:`; "ftp://x"; "") used to
 * be taken as it was and fail only at the first call, as `fetch`'s own TypeError far from
 * the code that made the client.
 */

/**
 * `value` as the API's root, to which each call adds its `/v1/…` path: without its trailing
 * slashes, and without a last `/v1` (the API's version prefix, which `FLEET_API_URL=…/v1` or
 * a baseUrl copied from a `curl …/v1/sessions` line holds); or a TypeError naming it. A path
 * before the prefix (an API behind a proxy at `/fleet`) is kept. Before, `…/v1` and `…/v1/`
 * sent every call to `/v1/v1/…` (a 404 that named no cause).
 */
export function checkedBaseUrl(given: unknown): string {
  const expected = 'baseUrl must be an http:// or https:// URL such as "http://127.0.0.1:3000"';
  if (typeof given !== "string") throw new TypeError(`FleetClient: ${expected}; got ${describe(given)}`);
  // Without the blanks and controls around it, which the URL parser drops too: kept, the check
  // below passed and every call failed (`Failed to parse URL from  http://… /v1/…`).
  const value = withoutEdgeControls(given);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TypeError(`FleetClient: ${expected}; got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new TypeError(`FleetClient: ${expected}; got ${JSON.stringify(value)}`);
  // fetch refuses such a URL at every call; the value is not repeated: it holds a secret.
  if (url.username !== "" || url.password !== "")
    throw new TypeError(
      `FleetClient: baseUrl must not carry a user name or password (${url.protocol}//…@${url.host}); pass the API key as apiKey`,
    );
  // Each call's path is appended to the value: after a query or fragment it would be part of
  // it. What follows the `?` or `#` is not repeated: it may hold a token.
  const extra = /[?#]/.exec(value);
  if (extra)
    throw new TypeError(
      `FleetClient: baseUrl must not carry a query (?…) or fragment (#…): each call adds its path after it; got "${value.slice(0, extra.index + 1)}…"`,
    );
  return value.replace(/\/+$/, "").replace(/\/v1$/, "");
}

/** `text` without the C0 controls and spaces at its ends, which the URL parser drops (pure). */
function withoutEdgeControls(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && text.charCodeAt(start) <= 0x20) start++;
  while (end > start && text.charCodeAt(end - 1) <= 0x20) end--;
  return text.slice(start, end);
}

function describe(value: unknown): string {
  if (value === undefined || value === null) return String(value);
  if (typeof value === "object") return `a value of type ${Array.isArray(value) ? "array" : "object"}`;
  return `${String(value)} (a ${typeof value})`;
}
