/**
 * `/console`: the tenant's sessions, newest activity first, paged by the API's cursor
 * (`before` = the previous page's `nextCursor`). Filters and the page live in the URL, so
 * a filtered list (the parked queue: `?status=parked`) can be bookmarked and shared.
 */
import { useEffect, useState } from "preact/hooks";
import { api, paths, type SessionPage } from "./api";
import { hasInvisible, unrevealed, withoutInvisible } from "./invisible";
import { type ReadRetry, readRetried } from "./read-retry";
import {
  Badge,
  batchHref,
  cameFromApp,
  Empty,
  ErrorBox,
  Link,
  listHref,
  navigate,
  ReadRetryNotice,
  revealed,
  Shown,
  sessionHref,
  statusKind,
  Time,
} from "./ui";

const STATUSES = ["", "queued", "running", "completed", "parked", "cancelled", "active"] as const;
const PAGE_SIZE = 50;

/**
 * A text filter of the list: typed in its own direction, not spell-checked, and shown with its
 * invisible characters revealed (`revealed`), as the value it stands for is compared.
 */
function FilterInput(props: {
  label: string;
  name: string;
  value: string;
  onValue: (value: string) => void;
  placeholder: string;
}) {
  return (
    <label>
      {props.label}{" "}
      <input
        name={props.name}
        dir="auto"
        spellcheck={false}
        value={props.value}
        onInput={(event) => props.onValue(revealed(event.currentTarget.value))}
        placeholder={props.placeholder}
      />
    </label>
  );
}

export function SessionsPage({ query }: { query: URLSearchParams }) {
  const status = query.get("status") ?? "";
  const parkedReason = query.get("parkedReason") ?? "";
  const batch = query.get("batch") ?? "";
  const before = query.get("before") ?? "";
  const page = Number(query.get("page") ?? "1") || 1;
  /**
   * The page read, with the query it answers: one read for other filters or another page is
   * not shown while the next is on its way. With a slow API, "Parked queue" showed the previous
   * list's sessions under its title, nothing said, and its "Next page" carried the previous
   * list's cursor. A Refresh of the same query keeps the rows until the answer.
   */
  const [read, setRead] = useState<{ query: string; page: SessionPage } | null>(null);
  const queryKey = JSON.stringify([status, parkedReason, batch, before]);
  const data = read?.query === queryKey ? read.page : null;
  const [error, setError] = useState<unknown>(null);
  const [loading, setLoading] = useState(true);
  const [reload, setReload] = useState(0);
  const [retry, setRetry] = useState<ReadRetry | null>(null);

  useEffect(() => {
    let live = true;
    setLoading(true);
    setRetry(null);
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (status) params.set("status", status);
    if (parkedReason) params.set("parkedReason", parkedReason);
    if (batch) params.set("batch", batch);
    if (before) params.set("before", before);
    // A read failing for a moment (a 503, a dropped connection) is tried again (read-retry.ts).
    readRetried(() => api<SessionPage>("GET", paths.sessions(params)), {
      wanted: () => live,
      onRetry: (next) => live && setRetry(next),
    })
      .then((got) => {
        if (!live || !got) return;
        setRead({ query: queryKey, page: got.answer });
        setError(null);
      })
      .catch((failure) => {
        if (!live) return;
        setError(failure);
        setRead(null);
      })
      .finally(() => {
        if (live) setLoading(false);
      });
    return () => {
      live = false;
    };
  }, [status, parkedReason, batch, before, reload, queryKey]);

  // The filters as shown: an invisible character as its code point (‹U+200B›), typed, pasted or
  // from the link alike; what is sent is what is shown, each such code point as its character.
  const [reasonInput, setReasonInput] = useState(() => revealed(parkedReason));
  const [batchInput, setBatchInput] = useState(() => revealed(batch));
  useEffect(() => {
    setReasonInput(revealed(parkedReason));
    setBatchInput(revealed(batch));
  }, [parkedReason, batch]);
  const apply = (nextStatus: string, reason: string, batchId: string) =>
    navigate(
      listHref({
        status: nextStatus,
        parkedReason: unrevealed(reason.trim()),
        batch: unrevealed(batchId.trim()),
      }),
    );
  const hiddenIn = [
    hasInvisible(unrevealed(reasonInput)) ? "parked reason" : "",
    hasInvisible(unrevealed(batchInput)) ? "batch" : "",
  ].filter(Boolean);

  const parkedQueue = status === "parked" && !batch;
  const current = { status, parkedReason, batch };
  return (
    <section aria-labelledby="list-title">
      <h1 id="list-title">{parkedQueue ? "Parked queue" : "Sessions"}</h1>
      {parkedQueue && (
        <p class="muted">
          Sessions that nothing will run until someone acts: open one to see why, then resume it (possibly
          with another model) or send it a message.
        </p>
      )}
      <form
        class="filters"
        onSubmit={(event) => {
          event.preventDefault();
          const form = new FormData(event.currentTarget);
          apply(String(form.get("status") ?? ""), reasonInput, batchInput);
        }}
      >
        <label>
          Status{" "}
          <select name="status" value={status}>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s || "any"}
              </option>
            ))}
          </select>
        </label>
        <FilterInput
          label="Parked reason"
          name="parkedReason"
          value={reasonInput}
          onValue={setReasonInput}
          placeholder="e.g. attempts_exhausted"
        />
        <FilterInput
          label="Batch"
          name="batch"
          value={batchInput}
          onValue={setBatchInput}
          placeholder="batch id"
        />
        <button type="submit">Apply</button>
        <button type="button" onClick={() => navigate(listHref())}>
          Clear
        </button>
        <button type="button" onClick={() => setReload((n) => n + 1)} disabled={loading}>
          Refresh
        </button>
      </form>
      {hiddenIn.length > 0 && (
        <p class="hint" role="status">
          The {hiddenIn.join(" and the ")} filter holds invisible characters, shown as{" "}
          <span class="invisible-char">‹U+…›</span> (a value copied from elsewhere often carries them): it
          matches only text that holds them too.{" "}
          <button
            type="button"
            onClick={() =>
              apply(
                status,
                withoutInvisible(unrevealed(reasonInput)),
                withoutInvisible(unrevealed(batchInput)),
              )
            }
          >
            Remove them
          </button>
        </p>
      )}
      <ErrorBox error={error} />
      <ReadRetryNotice retry={retry} what="the sessions" />
      {loading && !data && <p aria-busy="true">Loading…</p>}
      {data && data.sessions.length === 0 && (
        <Empty>
          {page > 1
            ? "No more sessions."
            : status || parkedReason || batch
              ? "No session matches these filters."
              : "No sessions yet. Create one with `POST /v1/sessions` or `fleet demo`."}
        </Empty>
      )}
      {data && data.sessions.length > 0 && (
        <div class="scroll">
          <table class="list">
            <thead>
              <tr>
                <th scope="col">Session</th>
                <th scope="col">State</th>
                <th scope="col">Parked reason</th>
                <th scope="col">Batch</th>
                <th scope="col">Last activity</th>
              </tr>
            </thead>
            <tbody>
              {data.sessions.map((s) => (
                <tr key={s.id}>
                  <td class="free">
                    <div>
                      <Link href={sessionHref(s.id)} class="mono">
                        <Shown text={s.id} />
                      </Link>
                      {s.customId && (
                        <span class="muted">
                          {" "}
                          · <Shown text={s.customId} />
                        </span>
                      )}
                    </div>
                  </td>
                  <td>
                    <Badge kind={statusKind(s.status)}>{s.status}</Badge>{" "}
                    {!s.parked && (
                      <span class="muted small">
                        <Shown text={s.tailState} />
                      </span>
                    )}
                  </td>
                  <td class="free">
                    <div>
                      <Shown text={s.parkedReason} />
                    </div>
                  </td>
                  <td>
                    {s.batchId && (
                      <Link href={batchHref(s.batchId)} class="mono">
                        <Shown text={s.batchId.slice(0, 8)} />
                      </Link>
                    )}
                  </td>
                  <td>
                    <Time iso={s.updatedAt} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <nav class="pager" aria-label="Pages">
        {page > 1 && cameFromApp() && (
          <button type="button" onClick={() => history.back()}>
            ← Previous page
          </button>
        )}
        {page > 1 && <Link href={listHref(current)}>Newest</Link>}
        <span class="muted">Page {page}</span>
        {data?.nextCursor && (
          <Link href={listHref({ ...current, before: data.nextCursor, page: String(page + 1) })} rel="next">
            Next page →
          </Link>
        )}
      </nav>
    </section>
  );
}
