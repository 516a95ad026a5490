/**
 * `PATCH /v1/sessions/:id` with `{ "sessionEvents": true | false }`: a session's event stream
 * turned on or off after its creation (a batch created without streams keeps them off for
 * the sessions nobody watches; one of them turned on to be followed live, and off again).
 *
 * The setting is committed first (session-events-setting.ts). Then, best effort (Redis away:
 * logged, and the answer is still the setting):
 * - on: every stored message goes into the stream at once (EventWriter.writeAfterSync), so a
 *   reader that connects now reads the history and then the session's next run as it goes. A
 *   run under way when it was turned on was claimed without a stream: its events start with
 *   the session's next run (whose first write brings the messages in between), and its
 *   RUN_COMPLETED is written by the repair that looks for runs whose end a stream lacks.
 * - off: the stream and its seq key are dropped, so that turning it on again starts it from the
 *   first message; open readers end (the drop wakes them and they ask; else at their next
 *   heartbeat), and a new one gets 409 `session_events_off`. A run under way that was
 *   claimed with its stream may write it until that run ends; nobody can read it, and it
 *   expires after FLEET_EVENTS_MAX_AGE_MS.
 */
import { NotFoundError, ValidationError } from "../shared/errors.js";
import { toValidationError } from "../shared/messages.js";
import type { SessionEventsSetting } from "../shared/store/session-events-setting.js";
import { sessionPatchBody } from "./api-schemas.js";

export type SessionEventsSwitchDeps = {
  setting: Pick<SessionEventsSetting, "set">;
  /** Writes every stored message its stream lacks (EventWriter.writeAfterSync). */
  sync: (sessionId: string) => Promise<void>;
  /** Drops its stream and seq key (EventWriter.dropStream). */
  drop: (sessionId: string) => Promise<void>;
  /** Told when the stream could not be written or dropped after the setting committed. */
  onStreamError: (error: unknown, sessionId: string, on: boolean) => void;
};

export class SessionEventsSwitch {
  constructor(private readonly deps: SessionEventsSwitchDeps) {}

  async patch(
    tenant: string,
    sessionId: string,
    body: unknown,
  ): Promise<{ id: string; sessionEvents: boolean }> {
    const parsed = sessionPatchBody.safeParse(body ?? undefined);
    if (!parsed.success) throw toValidationError("", parsed.error);
    const on = parsed.data.sessionEvents;
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
    await (on ? this.deps.sync(sessionId) : this.deps.drop(sessionId)).catch((error: unknown) =>
      this.deps.onStreamError(error, sessionId, on),
    );
    return { id: sessionId, sessionEvents: on };
  }
}
