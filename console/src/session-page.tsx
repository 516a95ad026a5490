/**
 * `/console/sessions/:id`: one session — its transcript, runs, resume point — kept live from
 * its event stream (live.ts; polling when there is none), with resume (optionally with
 * another model), cancel and send.
 */
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import { ApiError, api, type Message, paths, type ResumePoint, type Session } from "./api";
import { Boundary } from "./boundary";
import { type FleetEvent, followSession, type LiveMode } from "./live";
import { LiveStatus } from "./live-status";
import { type LiveText, liveTextAfter, NO_LIVE_TEXT } from "./live-text";
import { type ReadRetry, readRetried, refusedForGood } from "./read-retry";
import { Actions } from "./session-actions";
import { withEarlierMessages, withEarlierRuns } from "./session-merge";
import { ResumePointView, Runs, usageText } from "./session-runs";
import { Transcript } from "./transcript";
import { Badge, ErrorBox, Json, Link, ReadRetryNotice, Shown, statusKind, Time } from "./ui";

/** How many of its latest runs the page reads again as the session changes. */
const RUNS_WINDOW = 50;

/**
 * Messages per read: a small first page, shown soon; then larger ones (the API answers at
 * most 10,000 and about 4 MiB a page).
 */
const FIRST_MESSAGES_PAGE = 500;
const MESSAGES_PAGE = 5_000;

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
