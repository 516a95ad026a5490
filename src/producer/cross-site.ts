/**
 * Whether a request comes from a web page of another origin (pure). Dev mode (auth.ts) serves
 * requests without a key, so any page the developer opens could drive it: a body-less
 * `fetch(url, {method: "POST", mode: "no-cors"})` needs no CORS preflight, and a cancel, a
 * resume, a delete or a secret's rotation takes no body. Browsers say where a request comes
 * from — `Origin` on every cross-origin request and every POST, `Sec-Fetch-Site` on all of
 * them — and a page cannot change either; curl, the CLI and FleetClient send neither.
 */

/** The request headers read here (Node's IncomingHttpHeaders fit). */
export type RequestSite = {
  host?: string | undefined;
  origin?: string | undefined;
  "sec-fetch-site"?: string | string[] | undefined;
  "sec-fetch-mode"?: string | string[] | undefined;
  "sec-fetch-dest"?: string | string[] | undefined;
};

const first = (value: string | string[] | undefined): string | undefined =>
  Array.isArray(value) ? value[0] : value;

/** `scheme://host[:port]` of an `Origin`, its default port left out, lower case; undefined when it has none (`null`). */
function originOf(origin: string): string | undefined {
  try {
    const url = new URL(origin);
    return url.protocol === "http:" || url.protocol === "https:" ? `${url.protocol}//${url.host}` : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Why a request is from another site or origin than the API's own (its `Host`), to be refused
 * where no key says who sent it; undefined when it is not: no `Origin` (curl, clients, a
 * same-origin GET) or the API's own origin, and `Sec-Fetch-Site` absent, `same-origin` or
 * `none` (a URL typed or bookmarked). `same-site` is refused too: another port of the same
 * host is another origin, whose pages the API does not serve. A link followed to a page (a
 * top-level GET navigation: no `Origin`, `Sec-Fetch-Mode: navigate`, `Sec-Fetch-Dest:
 * document`) is not refused: its answer goes to the person in the tab, not to the page that
 * linked, and GETs act on nothing; a form's POST sends `Origin`.
 */
export function crossSiteReason(headers: RequestSite): string | undefined {
  const site = first(headers["sec-fetch-site"])?.trim().toLowerCase();
  const linkFollowed =
    headers.origin === undefined &&
    first(headers["sec-fetch-mode"])?.toLowerCase() === "navigate" &&
    first(headers["sec-fetch-dest"])?.toLowerCase() === "document";
  if ((site === "cross-site" || site === "same-site") && !linkFollowed)
    return `it comes from a page of another ${site === "cross-site" ? "site" : "origin"} (Sec-Fetch-Site: ${site})`;
  const origin = headers.origin;
  if (origin === undefined) return undefined;
  const from = originOf(origin);
  const own = from === undefined ? undefined : originOf(`${from.split("//", 1)[0]}//${headers.host ?? ""}`);
  if (from !== undefined && from === own) return undefined;
  return `it comes from a page of another origin (Origin: ${JSON.stringify(origin.slice(0, 100))})`;
}
