/**
 * How the session page (session-page.tsx) puts a partial read of a session — its messages
 * after a seq, its latest runs — together with what it already shows (pure).
 */
import type { Run, Session } from "./api";

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
