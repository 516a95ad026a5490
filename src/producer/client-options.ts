/** What the client's calls take (and `RunWithSession`, what `getRun` answers), exported by the package. */
import type { AgentConfigInput } from "../shared/agent-config.js";
import type { RunJson } from "../shared/api-types.js";
import type { Message } from "../shared/messages.js";

/** One session of a batch (contracts §9). */
export type BatchSessionInput = {
  agent: AgentConfigInput;
  metadata?: Record<string, unknown> | undefined;
  messages?: Message[] | undefined;
  input?: string | undefined;
  /** The caller's id for it, unique within the batch; results carry it. */
  customId?: string | undefined;
  /** false: this session has no event stream, whatever the batch's setting (additive). */
  sessionEvents?: boolean | undefined;
};

/**
 * `idempotencyKey`: sent as `Idempotency-Key`; a retry with the same key and body acts once.
 * A POST or DELETE that met a FleetNetworkError or a 5xx may have been done: send it again
 * only with the key it was sent with (without one, it may act twice).
 */
export type PostOptions = { idempotencyKey?: string | undefined };

export type RunWithSession = RunJson & {
  sessionId: string;
  /**
   * Only for a queued run whose session is parked: its `parkedReason`. The run starts only
   * when someone acts (resumes the session, or sends it a message); `waitForRun` rejects.
   */
  sessionParkedReason?: string | undefined;
};

/** What `getSession` asks for (every field optional: without them, the whole session). */
export type SessionPageOptions = {
  /** Only the messages after this seq. */
  afterSeq?: number | undefined;
  /** At most this many messages (1 to 10,000); the answer's `nextAfterSeq` starts the next page. */
  limit?: number | undefined;
  /** Only the latest this many runs (0 to 1,000; 0: none); `nextRunsBefore` pages to older ones. */
  runsLimit?: number | undefined;
  /** The `nextRunsBefore` of the previous answer. */
  runsBefore?: string | undefined;
  /** Stops the request (it rejects with the signal's reason). */
  signal?: AbortSignal | undefined;
};

export type EventsOptions = {
  /** Resume after this event id; without it the stream starts at the latest run's RUN_STARTED. */
  after?: string | undefined;
  /**
   * `events()` without an `after`: start at this run's RUN_STARTED (`?run=`), or at the first
   * event kept when that is no longer kept, instead of the latest run's. A run the session does
   * not have rejects with a 404; an API of the last release refuses it (400, `field: "run"`).
   */
  run?: string | undefined;
  /** Stops the iteration (and the request) when aborted. */
  signal?: AbortSignal | undefined;
  /**
   * Longest wait between reconnect attempts (default 5 s; the first is after 250 ms); a 429's
   * or 5xx's Retry-After is waited out whole. A number ≥ 0: NaN or a negative one rejects the
   * iteration with a TypeError naming it.
   */
  maxReconnectDelayMs?: number | undefined;
  /**
   * Rejects with a FleetNetworkError when the first connection finds no API at all (nothing
   * listening, a name that does not resolve), instead of trying again; once the API has
   * answered, later drops reconnect as usual. A connection taken but not answered within
   * `idleTimeoutMs` found an API: it is tried again, `onRetry` told. Default false.
   */
  failIfUnreachable?: boolean | undefined;
  /**
   * A connection that brings nothing — no event, no heartbeat, no answer — for this long is
   * taken as broken and made anew with the last id (default 60 s: the API sends a heartbeat
   * every `FLEET_SSE_HEARTBEAT_MS`, 15 s by default; 0: never). A network cut that sends no
   * FIN or RST leaves the socket open, and without this nothing more was read until the HTTP
   * stack's own body timeout, 300 s later. Not counted while the caller holds an event. NaN or
   * a negative one rejects the iteration with a TypeError naming it.
   */
  idleTimeoutMs?: number | undefined;
  /**
   * Told why before each wait to reconnect that follows a failure (additive): the API
   * unreachable or a connection that broke (a FleetNetworkError), an answer of 429 or 5xx
   * (its FleetApiError), and for `events()` without an `after`, the 410 its own reconnect got
   * before it reads the session's stream again. A stream that ended cleanly reconnects untold; an event that is not
   * one (its data not a JSON object) is no retry: the iteration rejects with a FleetApiError
   * `invalid_response` naming it.
   */
  onRetry?: ((reason: unknown) => void) | undefined;
};

/** Goal mode for one run (contracts §8). */
export type Goal = { text: string; maxRounds: number };
