/**
 * `/console/batches/:id`: a batch's counts as a progress bar (read again every 2 s while it
 * runs), its results as a download (fetched with the key: a plain link could not send it),
 * cancel, a resume of its parked sessions (one pass of `POST /v1/batches/:id/resume`), and a
 * link to its sessions in the list.
 */
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import {
  ApiError,
  api,
  authHeaders,
  type Batch,
  type BatchResumePage,
  failure,
  paths,
  storedKey,
} from "./api";
import { type ReadRetry, readRetried, refusedForGood } from "./read-retry";
import { Badge, ErrorBox, Link, listHref, ReadRetryNotice, revealed, Shown, Time } from "./ui";

const PARTS = ["completed", "parked", "cancelled", "running", "queued"] as const;

/** What the page asks before it cancels a batch (a native dialog: plain text, the id revealed). */
function cancelQuestion(id: string, unfinished: number): string {
  return (
    `Cancel batch ${revealed(id)}?\n\n` +
    `Its ${unfinished} unfinished ${unfinished === 1 ? "session is" : "sessions are"} cancelled: queued runs dropped, ` +
    "running ones aborted, none resumed automatically. Finished sessions keep their results."
  );
}

/** What the page asks before it resumes a batch's parked sessions (plain text, the id revealed). */
function resumeQuestion(id: string, parked: number): string {
  return (
    `Resume the ${parked} parked ${parked === 1 ? "session" : "sessions"} of batch ${revealed(id)}?\n\n` +
    "Each is run again from its resume point with its agent's model: its model calls and tools run, " +
    "and cost, as any run's. Those that cannot be resumed stay parked and are named."
  );
}

export function BatchPageView({ id }: { id: string }) {
  const [batch, setBatch] = useState<Batch | null>(null);
  /** The batch's read failed (cleared by the next read that answers). */
  const [error, setError] = useState<unknown>(null);
  /**
   * An action failed (download, resume, cancel): kept until the next action, not cleared by
   * the reads every 2 s while the batch runs, which took it off the page before it was read.
   */
  const [actionError, setActionError] = useState<unknown>(null);
  const [missing, setMissing] = useState(false);
  /** The API refused a read for good (refusedForGood: a 400, a 403): the page reads the batch no more. */
  const [refused, setRefused] = useState(false);
  const [busy, setBusy] = useState(false);
  const [resumeNote, setResumeNote] = useState<string | null>(null);
  const [retry, setRetry] = useState<ReadRetry | null>(null);
  /** The batch the page shows (null once it has left it): its first read stops trying then. */
  const following = useRef<string | null>(null);

  /**
   * `first`: the page's first read, tried again when it fails for a moment (read-retry.ts);
   * a later one (every 2 s while the batch runs) is simply read again at the next tick.
   */
  const read = useCallback(
    async (first: boolean) => {
      try {
        const get = () => api<Batch>("GET", paths.batch(id));
        const got = first
          ? await readRetried(get, { wanted: () => following.current === id, onRetry: setRetry })
          : { answer: await get() };
        if (!got) return;
        setBatch(got.answer);
        setError(null);
      } catch (failed) {
        if (failed instanceof ApiError && failed.status === 404) setMissing(true);
        else setError(failed);
        // Asked again it would say the same: as the session page, the page stops reading (it
        // read a running batch every 2 s for as long as the tab stayed open, each a refusal).
        if (refusedForGood(failed) && following.current === id) setRefused(true);
      }
    },
    [id],
  );
  const load = useCallback(() => read(false), [read]);

  useEffect(() => {
    following.current = id;
    setRetry(null);
    setRefused(false);
    void read(true);
    return () => {
      following.current = null;
    };
  }, [id, read]);
  // Read again while it runs, and while it is there: a batch deleted meanwhile (404) was read
  // every 2 s for as long as the tab stayed open, its last status being `running`; so was one
  // whose reads were refused for good (a 400, a 403).
  useEffect(() => {
    if (batch?.status !== "running" || missing || refused) return;
    const timer = setInterval(() => void load(), 2_000);
    return () => clearInterval(timer);
  }, [batch?.status, missing, refused, load]);

  const download = async () => {
    setBusy(true);
    setActionError(null);
    try {
      const key = storedKey();
      const response = await fetch(paths.batchResults(id), {
        headers: authHeaders({}, key),
        cache: "no-store",
      });
      if (!response.ok) throw await failure(response, key);
      const url = URL.createObjectURL(await response.blob());
      const link = document.createElement("a");
      link.href = url;
      link.download = `batch-${id}-results.ndjson`;
      link.click();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (failed) {
      setActionError(failed);
    } finally {
      setBusy(false);
    }
  };

  /**
   * One pass over the batch's parked sessions: each resumed, or named with why it cannot be.
   * A page that fails stops the pass; what the pages before it did is said with the failure.
   */
  const resumeParked = async () => {
    setBusy(true);
    setActionError(null);
    setResumeNote(null);
    let resumed = 0;
    const refused = new Map<string, number>();
    const left = () => [...refused].map(([reason, n]) => `${n} ${reason}`).join(", ");
    const sessions = (n: number) => `${n} parked session${n === 1 ? "" : "s"}`;
    try {
      let cursor: string | null = null;
      do {
        const page: BatchResumePage = await api<BatchResumePage>(
          "POST",
          paths.batchResume(id),
          cursor ? { cursor } : {},
        );
        resumed += page.resumed.length;
        for (const { reason } of page.refused) refused.set(reason, (refused.get(reason) ?? 0) + 1);
        cursor = page.nextCursor;
        if (page.retryAfterSeconds) await new Promise((r) => setTimeout(r, page.retryAfterSeconds! * 1_000));
      } while (cursor);
      setResumeNote(
        `Resumed ${sessions(resumed)}${left() ? `; nothing to resume in ${left()} (still parked)` : ""}.`,
      );
      await load();
    } catch (failed) {
      setActionError(failed);
      if (resumed > 0 || refused.size > 0) {
        setResumeNote(
          `Resumed ${sessions(resumed)} before the pass stopped${left() ? ` (nothing to resume in ${left()})` : ""}; those it had not reached are still parked: resume again for them.`,
        );
        void load();
      }
    } finally {
      setBusy(false);
    }
  };

  if (missing) {
    return (
      <section>
        <h1>Batch not found</h1>
        <p>
          No batch{" "}
          <span class="mono">
            <Shown text={id} />
          </span>{" "}
          for this API key: it does not exist (or was deleted), or it belongs to another tenant.
        </p>
        <Link href={listHref()}>Back to the sessions</Link>
      </section>
    );
  }
  const counts = batch?.counts;
  const done = counts ? counts.completed + counts.parked + counts.cancelled : 0;
  return (
    <article aria-labelledby="batch-title">
      <h1 id="batch-title">
        Batch{" "}
        <span class="mono">
          <Shown text={id} />
        </span>
      </h1>
      <ErrorBox error={error} />
      {refused && <p class="muted">This page reads the batch no more: reload it to try again.</p>}
      <ErrorBox error={actionError} />
      {!batch || !counts ? (
        !error &&
        (retry ? <ReadRetryNotice retry={retry} what="the batch" /> : <p aria-busy="true">Loading…</p>)
      ) : (
        <>
          <p>
            <Badge kind={batch.status === "running" ? "busy" : batch.status === "ended" ? "ok" : "warn"}>
              {batch.status}
            </Badge>{" "}
            created <Time iso={batch.createdAt} />
            {batch.endedAt && (
              <>
                , ended <Time iso={batch.endedAt} />
              </>
            )}
          </p>
          <div class="progress" aria-hidden="true">
            {PARTS.map((part) =>
              counts[part] > 0 ? (
                <span
                  key={part}
                  class={`part ${part}`}
                  style={{ width: `${(100 * counts[part]) / Math.max(1, counts.total)}%` }}
                  title={`${part}: ${counts[part]}`}
                />
              ) : null,
            )}
          </div>
          <progress max={Math.max(1, counts.total)} value={done} aria-label="sessions finished">
            {done} of {counts.total}
          </progress>
          <p>
            {done} of {counts.total} sessions finished
          </p>
          <ul class="legend">
            {PARTS.map((part) => (
              <li key={part}>
                <span class={`swatch ${part}`} /> {part}: {counts[part]}{" "}
                {counts[part] > 0 && part !== "running" && part !== "queued" && (
                  <Link href={listHref({ batch: id, status: part })}>list</Link>
                )}
              </li>
            ))}
          </ul>
          <p class="row">
            <button type="button" onClick={() => void download()} disabled={busy}>
              Download results (NDJSON)
            </button>
            <Link href={listHref({ batch: id })}>This batch's sessions</Link>
            {counts.parked > 0 && (
              <button
                type="button"
                disabled={busy}
                onClick={() => {
                  // One misclick must not resume a whole batch's parked sessions: asked first.
                  if (confirm(resumeQuestion(id, counts.parked))) void resumeParked();
                }}
              >
                Resume parked sessions
              </button>
            )}
            {batch.status === "running" && (
              <button
                type="button"
                class="danger"
                disabled={busy}
                onClick={() => {
                  // One misclick must not cancel a production batch: asked first, nothing sent on "Cancel".
                  if (!confirm(cancelQuestion(id, counts.queued + counts.running))) return;
                  setActionError(null);
                  void api("POST", paths.batchCancel(id), {}).then(load).catch(setActionError);
                }}
              >
                Cancel batch
              </button>
            )}
          </p>
          {resumeNote && (
            <p role="status">
              <Shown text={resumeNote} />
            </p>
          )}
        </>
      )}
    </article>
  );
}
