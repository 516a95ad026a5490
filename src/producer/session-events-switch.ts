/**
 * `PATCH /v1/sessions/:id` with `{ "sessionEvents": true | false }`: a session's event stream
 * turned on or off after its creation (a batch created without streams keeps them off for
 * the sessions nobody watches; one of them turned on to be followed live, and off again).
 *
 * Turning a stream on waits first for a place of the API's big work when the session's history
 * is 1 MiB or more (api-routes.ts, big-bodies.ts): its sync reads it whole. Refused there (429),
 * nothing is changed. The setting is committed first (session-events-setting.ts). Then, best effort (Redis away:
 * logged, and the answer is still the setting):
 * - on: every stored message goes into the stream at once (EventWriter.startStream), so a
 *   reader that connects now reads the history and then the session as it goes. A job under
 *   way learns the change at its next append (each append reads the setting) and writes from
 *   there, the messages in between first; the RUN_STARTED of a run it had begun is not written.
 * - off: the stream is dropped and its seq key left as an `off` marker, so a job under way
 *   writes nothing more even before its next append tells it, and turning it on again starts
 *   the stream from the first message; open readers end (the drop wakes them and they ask;
 *   else at their next heartbeat), and a new one gets 409 `session_events_off`.
 */
import { NotFoundError, ValidationError } from "../shared/errors.js";
import type { SessionEventsSetting } from "../shared/store/session-events-setting.js";
import { sessionPatchBody } from "./api-schemas.js";
import { parseBody } from "./request-bodies.js";

export type SessionEventsSwitchDeps = {
  setting: Pick<SessionEventsSetting, "set" | "isOn">;
  /** Lifts its `off` marker and writes every stored message its stream lacks (EventWriter.startStream). */
  sync: (sessionId: string) => Promise<void>;
  /** Drops its stream and marks it off (EventWriter.dropStream). */
  drop: (sessionId: string) => Promise<void>;
  /** Told when the stream could not be written or dropped after the setting committed. */
  onStreamError: (error: unknown, sessionId: string, on: boolean) => void;
};

export class SessionEventsSwitch {
  constructor(private readonly deps: SessionEventsSwitchDeps) {}

  /**
   * `placeToSync`: asked before a stream is turned on (whose sync may read and write the whole
   * history), the place that work waits for (api-routes.ts: a big-work place for a session of
   * 1 MiB or more, big-bodies.ts), released once it is done; it throws to refuse (429), and
   * nothing is changed then.
   */
  async patch(
    tenant: string,
    sessionId: string,
    body: unknown,
    placeToSync?: () => Promise<(() => void) | undefined>,
  ): Promise<{ id: string; sessionEvents: boolean }> {
    const on = parseBody(sessionPatchBody, body).sessionEvents;
    const release = on ? await placeToSync?.() : undefined;
    try {
      return await this.switched(tenant, sessionId, on);
    } finally {
      release?.();
    }
  }

  private async switched(
    tenant: string,
    sessionId: string,
    on: boolean,
  ): Promise<{ id: string; sessionEvents: boolean }> {
    const change = await this.deps.setting.set(tenant, sessionId, on);
    switch (change.outcome) {
      case "not_found":
        throw new NotFoundError(`session ${sessionId}`);
      case "refused":
        throw new ValidationError(
          "sessionEvents",
          "cannot be true: the session's batch was created with sessionEvents: false, so none of its sessions has an event stream",
        );
      case "set":
        break;
      default: {
        const unknown: never = change;
        throw new Error(`unknown outcome ${JSON.stringify(unknown)}`);
      }
    }
    // Also when it was already so: a drop or a sync that failed the first time is done now.
    // Then the setting is read again: another PATCH may have committed the other value while
    // this one's drop (or sync) was on its way and landed after that one's, so whoever acts
    // last on Redis makes the stream what Postgres says now.
    let want = on;
    for (let pass = 0; pass < 3; pass++) {
      const wanted = want;
      await (wanted ? this.deps.sync(sessionId) : this.deps.drop(sessionId)).catch((error: unknown) =>
        this.deps.onStreamError(error, sessionId, wanted),
      );
      const now = await this.deps.setting.isOn(sessionId, tenant);
      if (now === null || now === wanted) break;
      want = now;
    }
    return { id: sessionId, sessionEvents: on };
  }
}
