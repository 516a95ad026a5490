/** Small pieces the pages share: navigation, times, JSON, errors, text from elsewhere. */
import type { AnchorHTMLAttributes, ComponentChildren } from "preact";
import { useMemo } from "preact/hooks";
import { ApiError } from "./api";
import { jsonLineBlocks, jsonPieces } from "./direction";
import { revealed, revealedParts, withLineBreaks } from "./invisible";
import { formatJson } from "./json-format";
import type { ReadRetry } from "./read-retry";

/** The console's own routes: /console, /console/sessions/:id, /console/batches/:id. */
export type Route =
  | { page: "sessions"; query: URLSearchParams }
  | { page: "session"; id: string }
  | { page: "batch"; id: string }
  | { page: "unknown"; path: string };

export const BASE = "/console";

export function parseRoute(location: Location): Route {
  const path = location.pathname.replace(/\/+$/, "");
  if (path === BASE) return { page: "sessions", query: new URLSearchParams(location.search) };
  const match = /^\/console\/(sessions|batches)\/([^/]+)$/.exec(path);
  if (match) {
    const id = decodeURIComponent(match[2]!);
    return match[1] === "sessions" ? { page: "session", id } : { page: "batch", id };
  }
  return { page: "unknown", path: location.pathname };
}

export const sessionHref = (id: string) => `${BASE}/sessions/${encodeURIComponent(id)}`;
export const batchHref = (id: string) => `${BASE}/batches/${encodeURIComponent(id)}`;
export const listHref = (query: Record<string, string | undefined> = {}) => {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) if (value) params.set(key, value);
  return params.size > 0 ? `${BASE}?${params}` : BASE;
};

/** Moves within the app without a reload (history API); main.tsx listens for it. */
export function navigate(href: string): void {
  history.pushState(IN_APP, "", href);
  dispatchEvent(new PopStateEvent("popstate"));
}

/** The history state of an entry the console pushed itself. */
const IN_APP = { console: true };

/**
 * Whether the entry before this one is one of the console's, so that going back stays in it:
 * not on a page opened from a bookmark or a shared link, where it would leave the console.
 */
export function cameFromApp(): boolean {
  return (history.state as typeof IN_APP | null)?.console === true;
}

/** A link that stays in the app (a modified click still opens a new tab as usual). */
export function Link(props: AnchorHTMLAttributes & { href: string }) {
  const { href, children, ...rest } = props;
  return (
    <a
      {...rest}
      href={href}
      onClick={(event) => {
        if (event.defaultPrevented || event.button !== 0) return;
        if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
        event.preventDefault();
        navigate(href);
      }}
    >
      {children}
    </a>
  );
}

/** A time in the viewer's zone (the ISO time, in UTC, on hover). */
export function Time({ iso }: { iso: string | null | undefined }) {
  if (!iso) return <span class="muted">—</span>;
  return (
    <time dateTime={iso} title={iso}>
      {TIME_FORMAT.format(new Date(iso))}
    </time>
  );
}

/** One formatter for every time on the page (`toLocaleString` with options makes one per call). */
const TIME_FORMAT = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
  timeZoneName: "short",
});

export function duration(from: string | null, to: string | null): string {
  if (!from) return "—";
  const ms = (to ? Date.parse(to) : Date.now()) - Date.parse(from);
  if (ms < 1_000) return `${ms} ms`;
  if (ms < 120_000) return `${(ms / 1_000).toFixed(1)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

/** Text from elsewhere with its invisible characters shown as their code points (invisible.ts). */
function Revealed({ text }: { text: string }) {
  return useMemo(() => revealedNodes(text), [text]);
}

/** What Revealed renders: the text alone, or its parts with each invisible character marked. */
function revealedNodes(text: string): ComponentChildren {
  const parts = revealedParts(text);
  if (parts.length === 1 && typeof parts[0] === "string") return parts[0];
  return parts.map((part, i) =>
    typeof part === "string" ? (
      part
    ) : (
      <span key={i} class="invisible-char" title="an invisible character, shown as its code point">
        {part.mark}
      </span>
    ),
  );
}

/**
 * Text that models, tools, callers or a link wrote, within a line of the page's own: every
 * invisible character (a bidi override, a zero-width space…) shown as its code point, marked,
 * so that it reads as it is written (invisible.ts); and direction-isolated (`<bdi>`: its
 * direction is its first letter's), so that right-to-left text reads right to left without
 * taking the characters and numbers around it along (direction.ts). Cut once per text, not
 * at each render.
 */
export function Shown({ text }: { text: string | null | undefined }) {
  return (
    <bdi>
      <Revealed text={text ?? ""} />
    </bdi>
  );
}

/**
 * Text that models, tools or callers wrote, as a block (a message, a tool's output): each
 * paragraph in its own direction (`unicode-bidi: plaintext`, style.css), so a Hebrew
 * paragraph reads right to left and an English one beside it left to right.
 */
export function TextBlock({ text }: { text: string }) {
  const shown = useMemo(() => withLineBreaks(text), [text]);
  return (
    <pre class="text" dir="auto">
      <Revealed text={shown} />
    </pre>
  );
}

/**
 * Formatted JSON: left to right, as its braces and quotes are, with each string that holds
 * right-to-left letters isolated (a Hebrew key drew its value on its left). Longer than
 * JSON_BLOCK_LINES lines, it is laid out in blocks of lines, each a box of its own (direction.ts
 * jsonLineBlocks): 100,000 isolated strings in one box took 24 s to show. Cut once per text.
 */
export function JsonText({ text }: { text: string }) {
  const blocks = useMemo(() => jsonLineBlocks(text), [text]);
  return (
    <pre class="json" dir="ltr">
      {blocks.length === 1 ? (
        <JsonPieces text={text} />
      ) : (
        blocks.map((block, i) => (
          <span key={i} class="json-lines">
            <JsonPieces text={block} />
          </span>
        ))
      )}
    </pre>
  );
}

/**
 * Lines of formatted JSON, each string with right-to-left letters in a `<bdi>` of its own.
 * Rendered once per text, as elements, not a component per piece (100,000 of them were
 * 200,000 components with a hook each).
 */
function JsonPieces({ text }: { text: string }) {
  return useMemo(
    () =>
      jsonPieces(text).map((piece) =>
        typeof piece === "string" ? revealedNodes(piece) : <bdi>{revealedNodes(piece.isolate)}</bdi>,
      ),
    [text],
  );
}

export { revealed };

/**
 * A value (a call's arguments, metadata, timings) laid out as `JSON.stringify(value, null, 2)`
 * would, within the bound a tool result's layout has (json-format.ts), else as one line: 100
 * levels of nesting (what the API and a model's arguments may hold) repeat their indentation
 * at every line.
 */
export function Json({ value }: { value: unknown }) {
  const text = useMemo(() => {
    const compact = JSON.stringify(value) ?? String(value);
    return formatJson(compact) ?? compact;
  }, [value]);
  return <JsonText text={text} />;
}

/** A failure in a line: an API answer's status, code, reason and message, or the error's message. */
export function failureText(error: unknown): string {
  return error instanceof ApiError
    ? `${error.status} ${error.code}${error.reason ? ` (${error.reason})` : ""}: ${error.message}`
    : error instanceof Error
      ? error.message
      : String(error);
}

export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  const message = failureText(error);
  return (
    <p class="error" role="alert">
      <Shown text={message} />
    </p>
  );
}

/** A page's first read failed for a moment and is tried again (read-retry.ts): what and when. */
export function ReadRetryNotice({ retry, what }: { retry: ReadRetry | null; what: string }) {
  if (!retry) return null;
  return (
    <p class="error read-retry" role="status">
      A read of {what} failed (<Shown text={failureText(retry.failure)} />
      ); trying again in {Math.round(retry.inMs / 1000)} s (attempt {retry.attempt}).
    </p>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

/** A short label; a string child (a status, a reason) is shown with its invisible characters revealed. */
export function Badge({ kind, children }: { kind?: string; children: ComponentChildren }) {
  return (
    <span class={`badge ${kind ?? ""}`}>
      {typeof children === "string" ? <Shown text={children} /> : children}
    </span>
  );
}

export function statusKind(status: string): string {
  if (status === "completed") return "ok";
  if (status === "parked" || status === "cancelled" || status === "stopped") return "warn";
  if (status === "running" || status === "queued") return "busy";
  if (status === "interrupted") return "bad";
  return "";
}
