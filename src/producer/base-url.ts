/**
 * The client's `baseUrl`, checked when the client is made: a value that is no http(s) URL
 * ("localhost:8080", which `URL` reads as the scheme `localhost:`; "ftp://x"; "") used to
 * be taken as it was and fail only at the first call, as `fetch`'s own TypeError far from
 * the code that made the client.
 */

/** `value` without its trailing slashes, or a TypeError naming it. */
export function checkedBaseUrl(value: unknown): string {
  const expected = 'baseUrl must be an http:// or https:// URL such as "http://127.0.0.1:3000"';
  if (typeof value !== "string") throw new TypeError(`FleetClient: ${expected}; got ${describe(value)}`);
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
  return value.replace(/\/+$/, "");
}

function describe(value: unknown): string {
  if (value === undefined || value === null) return String(value);
  if (typeof value === "object") return `a value of type ${Array.isArray(value) ? "array" : "object"}`;
  return `${String(value)} (a ${typeof value})`;
}
