/**
 * `/console/sessions/:id`: one session — its transcript, runs, resume point — kept live from
 * its event stream (live.ts; polling when there is none), with resume (optionally with
 * another model), cancel and send.
 */
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import {
  ApiError,
  api,
  type Message,
  newIdempotencyKey,
  paths,
  type ResumePoint,
  type Run,
  type Session,
} from "./api";
import { Boundary } from "./boundary";
import { type FleetEvent, followSession, type LiveMode } from "./live";
import { LiveStatus } from "./live-status";
import { type LiveText, liveTextAfter, NO_LIVE_TEXT } from "./live-text";
import { type ReadRetry, readRetried, refusedForGood } from "./read-retry";
import { Transcript } from "./transcript";
import {
  Badge,
  duration,
  Empty,
  ErrorBox,
  Json,
  Link,
  ReadRetryNotice,
  revealed,
  Shown,
  statusKind,
  Time,
} from "./ui";

/**
 * A session read with `afterSeq` (its messages after that seq only), with the page's
 * messages before them. The page's messages run from seq 1 without a gap (a MESSAGE event
 * is added only as the next seq), so they hold every seq up to `afterSeq`.
 */
export function withEarlierMessages(
  next: Session,
  current: Session | null,
  afterSeq: number,
): Session | null {
  if (afterSeq === 0) return next;
  const earlier = (current?.messages ?? []).filter((m) => m.seq <= afterSeq);
  // Not the messages it was read after (the page changed meanwhile): read it whole.
  if (earlier.length !== afterSeq) return null;
  const later = next.messages.filter((m) => m.seq > afterSeq);
  // Events that came in while the read was on its way are kept too.
  const last = later.at(-1)?.seq ?? afterSeq;
  const newer = (current?.messages ?? []).filter((m) => m.seq > last);
  return { ...next, messages: [...earlier, ...later, ...newer] };
}

/**
 * The runs of a session read with `runsLimit` (its latest runs only), with the page's runs
 * before them; null when the page cannot tell them from its own (read it whole): runs it
 * never saw may lie before the window, or one of its earlier runs had not ended and may have
 * changed since. An ended run never changes, and runs are never removed.
 */
export function withEarlierRuns(next: Session, current: Session | null): Run[] | null {
  const window = next.runs;
  if (!next.nextRunsBefore) return window;
  const known = current?.runs ?? [];
  const at = window[0] ? known.findIndex((run) => run.id === window[0]!.id) : -1;
  if (at < 0) return null;
  const earlier = known.slice(0, at);
  return earlier.every((run) => run.status === "ended") ? [...earlier, ...window] : null;
}

/** How many of its latest runs the page reads again as the session changes. */
const RUNS_WINDOW = 50;

/**
 * Messages per read: a small first page, shown soon; then larger ones (the API answers at
 * most 10,000 and about 4 MiB a page).
 */
const FIRST_MESSAGES_PAGE = 500;
const MESSAGES_PAGE = 5_000;

function usageText(usage: unknown): string {
  if (!usage || typeof usage !== "object") return "—";
  const u = usage as Record<string, unknown>;
  const parts = [
    typeof u.inputTokens === "number" ? `in ${u.inputTokens}` : "",
    typeof u.outputTokens === "number" ? `out ${u.outputTokens}` : "",
    typeof u.costUsd === "number" && u.costUsd > 0 ? `$${u.costUsd.toFixed(4)}` : "",
    // Steps whose provider reported no usage: the sums miss them.
    typeof u.unknownSteps === "number" && u.unknownSteps > 0
      ? `${u.unknownSteps} step${u.unknownSteps === 1 ? "" : "s"} without usage`
      : "",
  ].filter(Boolean);
  return parts.length > 0 ? parts.join(", ") : JSON.stringify(usage);
}

/**
 * A run's MODEL in a few words: its endpoint or provider, and its model name, each isolated
 * (a right-to-left endpoint drew the model's name on its left).
 */
function ModelLabel({ model }: { model: unknown }) {
  const m = (typeof model === "object" && model !== null ? model : {}) as Record<string, unknown>;
  const where =
    typeof m.endpoint === "string" ? m.endpoint : typeof m.provider === "string" ? m.provider : "model";
  return (
    <>
      <Shown text={where} />
      {typeof m.model === "string" && (
        <>
          :<Shown text={m.model} />
        </>
      )}
    </>
  );
}

function Runs({ runs }: { runs: Run[] }) {
  return (
    <section aria-labelledby="runs-title">
      <h2 id="runs-title">Runs ({runs.length})</h2>
      {runs.length === 0 ? (
        <Empty>No runs yet.</Empty>
      ) : (
        <div class="scroll">
          <table class="runs">
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">Kind</th>
                <th scope="col">Resume kind</th>
                <th scope="col">Trigger</th>
                <th scope="col">Status</th>
                <th scope="col">Outcome (endedReason)</th>
                <th scope="col">Queued</th>
                <th scope="col">Started</th>
                <th scope="col">Took</th>
                <th scope="col">Usage</th>
              </tr>
            </thead>
            <tbody>
              {runs.map((run) => (
                <tr key={run.id} class={`run ${run.status}`}>
                  <td class="mono" title={revealed(`${run.id}${run.workerId ? ` on ${run.workerId}` : ""}`)}>
                    <Shown text={run.id.slice(0, 8)} />
                  </td>
                  <td class="free">
                    <div>
                      <Shown text={run.kind} />
                      {run.model != null && (
                        <div class="muted small run-model">
                          on <ModelLabel model={run.model} />
                        </div>
                      )}
                    </div>
                  </td>
                  <td>
                    <Shown text={run.resumeKind} />
                  </td>
                  <td>
                    <Shown text={run.trigger} />
                  </td>
                  <td>
                    <Badge kind={run.status === "ended" ? "" : "busy"}>{run.status}</Badge>
                  </td>
                  <td class="free">
                    <div>
                      <span class="outcome">
                        <Shown text={run.endedReason} />
                      </span>
                      {run.error && (
                        <div class="muted small">
                          <Shown text={run.error} />
                        </div>
                      )}
                    </div>
                  </td>
                  <td>
                    <Time iso={run.createdAt} />
                  </td>
                  <td>
                    <Time iso={run.startedAt} />
                  </td>
                  <td>
                    {duration(run.startedAt, run.endedAt)}
                    {run.timings && (
                      <details>
                        <summary>timings</summary>
                        <Json value={run.timings} />
                      </details>
                    )}
                  </td>
                  <td>
                    <Shown text={usageText(run.usage)} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function ResumePointView({ point }: { point: ResumePoint | null }) {
  return (
    <section aria-labelledby="point-title">
      <h2 id="point-title">Resume point</h2>
      {!point ? (
        <p class="muted">…</p>
      ) : point.resumable ? (
        <div>
          <p>
            <Badge kind="busy">
              resumable: <Shown text={point.kind} />
            </Badge>{" "}
            <Shown text={point.description} />
          </p>
          {point.unansweredToolCalls.length > 0 && (
            <details>
              <summary>{point.unansweredToolCalls.length} unanswered tool call(s)</summary>
              <Json value={point.unansweredToolCalls} />
            </details>
          )}
        </div>
      ) : (
        <p>
          <Badge kind={point.reason === "completed" ? "ok" : "warn"}>
            not resumable: <Shown text={point.reason} />
          </Badge>
        </p>
      )}
    </section>
  );
}

/** What the page asks before it cancels a session (a native dialog: plain text, ids revealed). */
function cancelQuestion(session: Session, running: boolean): string {
  return (
    `Cancel session ${revealed(session.id)}${running ? ` (${session.status})` : ""}?\n\n` +
    "Queued runs are dropped and a running one is aborted (a tool that was running gets a " +
    "cancelled result); the session is then never resumed automatically. A new message re-opens it."
  );
}

function Actions({ session, onDone }: { session: Session; onDone: () => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [info, setInfo] = useState("");
  const [model, setModel] = useState("");
  const [content, setContent] = useState("");
  /**
   * The Idempotency-Key of the message in the box, kept until it is sent or changed: a send
   * whose answer was lost (a gateway's 504, a cut connection) leaves the text in the box, and
   * sending it again must not store it twice (the API answers the first send's answer).
   */
  const sendKey = useRef<string | null>(null);
  const act = async (what: () => Promise<string>) => {
    setBusy(true);
    setError(null);
    setInfo("");
    try {
      setInfo(await what());
      onDone();
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  const running = session.status === "running" || session.status === "queued";
  return (
    <section aria-labelledby="actions-title" class="actions">
      <h2 id="actions-title">Actions</h2>
      <ErrorBox error={error} />
      {info && (
        <p class="info" role="status">
          <Shown text={info} />
        </p>
      )}
      <div class="action-grid">
        <form
          onSubmit={(event) => {
            event.preventDefault();
            void act(async () => {
              let body: { model?: unknown } = {};
              if (model.trim()) {
                try {
                  body = { model: JSON.parse(model) };
                } catch (parseError) {
                  throw new Error(`MODEL is not valid JSON: ${(parseError as Error).message}`);
                }
              }
              const answer = await api<{ runId: string; kind: string }>(
                "POST",
                paths.resume(session.id),
                body,
              );
              return `Resume queued (${answer.kind}), run ${answer.runId}.`;
            });
          }}
        >
          <label for="resume-model">Resume — with another model (optional JSON MODEL; empty: the same)</label>
          <textarea
            id="resume-model"
            rows={4}
            value={model}
            onInput={(event) => setModel(event.currentTarget.value)}
            placeholder='{ "provider": "openai", "model": "…" }'
            spellcheck={false}
          />
          <button type="submit" disabled={busy}>
            Resume
          </button>
        </form>
        <form
          onSubmit={(event) => {
            event.preventDefault();
            void act(async () => {
              sendKey.current ??= newIdempotencyKey();
              const answer = await api<{ runId: string }>(
                "POST",
                paths.messages(session.id),
                { content },
                { idempotencyKey: sendKey.current },
              );
              sendKey.current = null;
              setContent("");
              return `Message sent, run ${answer.runId}.`;
            });
          }}
        >
          <label for="send-content">Send a message</label>
          <textarea
            id="send-content"
            dir="auto"
            rows={4}
            value={content}
            onInput={(event) => {
              // Another text is another message: a key of its own.
              if (event.currentTarget.value !== content) sendKey.current = null;
              setContent(event.currentTarget.value);
            }}
            required
          />
          <button type="submit" disabled={busy || content.trim() === ""}>
            Send
          </button>
        </form>
        <div>
          <p class="muted">
            Cancel drops queued runs and aborts a running one; the session is then never resumed
            automatically.
          </p>
          <button
            type="button"
            class="danger"
            disabled={busy}
            onClick={() => {
              // One misclick must not cancel a production run: asked first, nothing sent on "Cancel".
              if (!confirm(cancelQuestion(session, running))) return;
              void act(async () => {
                const answer = await api<{ cancelled: boolean; status: string }>(
                  "POST",
                  paths.cancel(session.id),
                  {},
                );
                return answer.cancelled ? "Cancelled." : `Nothing to cancel (${answer.status}).`;
              });
            }}
          >
            Cancel session{running ? " (running)" : ""}
          </button>
        </div>
      </div>
    </section>
  );
}

export function SessionPageView({ id }: { id: string }) {
  const [session, setSession] = useState<Session | null>(null);
  const [point, setPoint] = useState<ResumePoint | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [missing, setMissing] = useState(false);
  /** The API refused a read for good (refusedForGood): the page follows the session no more. */
  const [refused, setRefused] = useState(false);
  const live = useRef<{ stop: () => void } | null>(null);
  const [mode, setMode] = useState<LiveMode>("connecting");
  /** The event stream failed and is tried again: said beside the mode. */
  const [streamRetry, setStreamRetry] = useState<ReadRetry | null>(null);
  const [liveText, setLive] = useState<LiveText>(NO_LIVE_TEXT);
  const [reading, setReading] = useState(false);
  const [retry, setRetry] = useState<ReadRetry | null>(null);
  /** The session the page follows (null once it has left it): a read of another stops. */
  const following = useRef<string | null>(null);
  const refreshTimer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  const loading = useRef<Promise<void> | undefined>(undefined);

  /** The session as last rendered (what a read after the page's last message starts from). */
  const shown = useRef<Session | null>(null);
  shown.current = session;

  const load = useCallback(async () => {
    // One read at a time; a read asked for meanwhile follows it.
    if (loading.current) await loading.current.catch(() => {});
    // Not a session the page follows (any more): left, or its reads refused for good.
    if (following.current !== id) return;
    const read = (async () => {
      try {
        const nextPoint = api<ResumePoint>("GET", paths.resumePoint(id)).catch(() => null);
        // A long session is not read whole again: only the messages after the page's last,
        // and its latest runs (the first read has them all: every run's outcome is on the page).
        // Messages come a page at a time, each rendered as it comes (a session of 50,000 is
        // shown from its first page on, not after one read of all of it).
        let have = shown.current?.id === id ? shown.current : null;
        // Whether more pages are known to follow what the page shows: then a failed read leaves
        // the transcript partial, and is tried again (with backoff, said on the page) rather
        // than left so until a reload or the next event. So is the first read (the page shows
        // nothing yet): a 503 or a dropped connection at load is not shown as the page's error.
        let partial = false;
        for (;;) {
          const afterSeq = have?.messages.at(-1)?.seq ?? 0;
          const limit = afterSeq === 0 ? FIRST_MESSAGES_PAGE : MESSAGES_PAGE;
          const runsLimit = have ? RUNS_WINDOW : 0;
          const read = () => api<Session>("GET", paths.session(id, afterSeq, runsLimit, limit));
          const got: { answer: Session } | null =
            partial || have === null
              ? await readRetried(read, { wanted: () => following.current === id, onRetry: setRetry })
              : { answer: await read() };
          if (!got) return;
          const next: Session = got.answer;
          const merged: { session: Session | null } = { session: null };
          setSession((current) => {
            const mine = current?.id === id ? current : null;
            const messages = withEarlierMessages(next, mine, afterSeq);
            const runs = withEarlierRuns(next, mine);
            merged.session = messages && runs ? { ...messages, runs } : null;
            return merged.session ?? current;
          });
          // Not the messages or runs the page had (they changed meanwhile): read from the start.
          have = merged.session;
          const more: boolean = next.nextAfterSeq != null || have === null;
          partial = more;
          setReading(more);
          if (!more || following.current !== id) break;
        }
        const point = await nextPoint;
        if (point) setPoint(point);
        setError(null);
      } catch (failure) {
        setRetry(null);
        setReading(false);
        if (failure instanceof ApiError && failure.status === 404) setMissing(true);
        else setError(failure);
        // Asked again, it would say the same: it polled the session every second for ever.
        if (refusedForGood(failure) && following.current === id) {
          following.current = null;
          live.current?.stop();
          setRefused(true);
        }
      }
    })();
    loading.current = read;
    await read;
  }, [id]);

  /** Runs, status and resume point change with most events: read again, at most every 300 ms. */
  const refreshSoon = useCallback(() => {
    if (refreshTimer.current) return;
    refreshTimer.current = setTimeout(() => {
      refreshTimer.current = undefined;
      void load();
    }, 300);
  }, [load]);

  useEffect(() => {
    following.current = id;
    setSession(null);
    setMissing(false);
    setRefused(false);
    setLive(NO_LIVE_TEXT);
    setReading(false);
    setRetry(null);
    void load();
    const onEvent = (event: FleetEvent) => {
      const { data } = event;
      setLive((current) => liveTextAfter(current, event));
      if (event.type === "MESSAGE_DELTA") return;
      if (event.type === "MESSAGE" && data.message && typeof data.message === "object") {
        const message = data.message as Message;
        setSession((current) => {
          if (!current) return current;
          const last = current.messages.at(-1)?.seq ?? 0;
          if (message.seq <= last) return current;
          if (message.seq !== last + 1) {
            refreshSoon();
            return current;
          }
          return { ...current, messages: [...current.messages, message] };
        });
      }
      refreshSoon();
    };
    const follower = followSession(id, {
      onEvent,
      onReset: () => {
        // The stream starts again: what streamed comes again from its run's RUN_STARTED.
        setLive((current) => liveTextAfter(current, { type: "reset" }));
        void load();
      },
      onPoll: load,
      onMode: setMode,
      onRetry: setStreamRetry,
      onMissing: () => setMissing(true),
    });
    live.current = follower;
    return () => {
      following.current = null;
      follower.stop();
      clearTimeout(refreshTimer.current);
      refreshTimer.current = undefined;
    };
  }, [id, load, refreshSoon]);

  // The runs table is rendered again only when the runs change, not at every event or delta
  // (a session of 1,000 runs blocked the page for seconds while it ran).
  const runs = session?.runs;
  const runsView = useMemo(() => runs && <Runs runs={runs} />, [runs]);

  if (missing) {
    return (
      <section>
        <h1>Session not found</h1>
        <p>
          No session{" "}
          <span class="mono">
            <Shown text={id} />
          </span>{" "}
          for this API key: it does not exist, or it belongs to another tenant.
        </p>
        <Link href="/console">Back to the sessions</Link>
      </section>
    );
  }
  return (
    <article aria-labelledby="session-title">
      <h1 id="session-title">
        Session{" "}
        <span class="mono">
          <Shown text={id} />
        </span>
      </h1>
      <ErrorBox error={error} />
      {refused && <p class="muted">This page reads the session no more: reload it to try again.</p>}
      {!session ? (
        !error &&
        (retry ? <ReadRetryNotice retry={retry} what="the session" /> : <p aria-busy="true">Loading…</p>)
      ) : (
        <>
          <dl class="facts">
            <div>
              <dt>Status</dt>
              <dd>
                <Badge kind={statusKind(session.status)}>{session.status}</Badge>
                {session.parkedReason && (
                  <span class="parked-reason">
                    {" "}
                    parked: <Shown text={session.parkedReason} />
                  </span>
                )}
              </dd>
            </div>
            <div>
              <dt>Tail</dt>
              <dd>
                <Shown text={session.tailState} />
              </dd>
            </div>
            <div>
              <dt>Created</dt>
              <dd>
                <Time iso={session.createdAt} />
              </dd>
            </div>
            <div>
              <dt>Updated</dt>
              <dd>
                <Time iso={session.updatedAt} />
              </dd>
            </div>
            <div>
              <dt>Usage</dt>
              <dd>
                <Shown text={usageText(session.usage)} />
              </dd>
            </div>
            <div>
              <dt>Updates</dt>
              <dd>
                <LiveStatus mode={mode} retry={streamRetry} />
              </dd>
            </div>
          </dl>
          <Actions session={session} onDone={() => void load()} />
          <ResumePointView point={point} />
          {runsView}
          <Boundary what="The transcript">
            <Transcript
              messages={session.messages}
              streaming={liveText.text}
              reading={reading}
              retry={retry}
            />
          </Boundary>
          <details>
            <summary>Agent and metadata</summary>
            <Json value={{ agent: session.agent, metadata: session.metadata }} />
          </details>
        </>
      )}
    </article>
  );
}
