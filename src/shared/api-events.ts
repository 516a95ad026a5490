/**
 * The events the API streams (contracts §7), as types: what `FleetClient.events()`,
 * `batchEvents()`, `stream()` and `streamResume()` yield. Like api-types.ts, they reach no
 * database or queue library.
 *
 * `FleetEvent` is a union discriminated by `type`: in `case "MESSAGE":` its `data.message`
 * is a stored message, in `case "RUN_COMPLETED":` `data.outcome` a string, and so on. The
 * contract is additive, so it also has a member for types this client does not know
 * (`type: string`): a `case` for a type added later compiles, and a `switch` needs a
 * `default`. For a handler of one type: `Extract<FleetEvent, { type: "MESSAGE" }>`.
 */
import type { BatchCounts, BatchJson } from "./api-types.js";
import type { SessionEvent } from "./events.js";
import type { StoredMessage } from "./messages.js";

type Written = { [T in SessionEvent["type"]]: Extract<SessionEvent, { type: T }> };

/** The `data` of each event type the API sends (contracts §7; the session's id is in every session event). */
export type FleetEventDataByType = Omit<Written, "MESSAGE"> & {
  /** `message`: as `GET /v1/sessions/:id` has it (by `role`; untyped fields of other roles read as before). */
  MESSAGE: Omit<Written["MESSAGE"], "message"> & { message: StoredMessage & AdditiveFields };
  /** The session was deleted: the last event of its stream. */
  SESSION_DELETED: { type: "SESSION_DELETED"; sessionId: string };
  /** A batch's session reached a terminal state (batch streams). */
  SESSION_ENDED: {
    type: "SESSION_ENDED";
    batchId: string;
    sessionId: string;
    customId: string | null;
    status: "completed" | "parked" | "cancelled";
    parkedReason?: string;
  };
  /** Every session of the batch has ended: the last event of its stream. */
  BATCH_COMPLETED: {
    type: "BATCH_COMPLETED";
    batchId: string;
    status: Exclude<BatchJson["status"], "running">;
    counts: BatchCounts;
  };
  /** The batch was deleted: the last event of its stream. */
  BATCH_DELETED: { type: "BATCH_DELETED"; batchId: string };
};

/** The event types this client knows. */
export type FleetEventType = keyof FleetEventDataByType;

/**
 * Fields a type's `data` may carry besides its own (contracts §7 is additive), untyped as they
 * always were: code that reads `event.data.text` without looking at the type still compiles.
 */
// biome-ignore lint/suspicious/noExplicitAny: additive fields, and reads of fields of other types (see above)
type AdditiveFields = { [field: string]: any };

type Data = FleetEventDataByType[FleetEventType];
type FieldOf<U> = U extends unknown ? Exclude<keyof U, "type"> : never;
type FieldType<U, F> = U extends unknown ? (F extends keyof U ? U[F] : never) : never;
/** Every known type's fields, each with the types it has in any of them. */
type AnyKnownFields = { [F in FieldOf<Data>]: FieldType<Data, F> };

/** An event of a type this client knows. */
export type KnownFleetEvent = {
  [T in FleetEventType]: { id: string; type: T; data: FleetEventDataByType[T] & AdditiveFields };
}[FleetEventType];

/**
 * An event of a type added after this client. Its fields are typed as the known types'
 * fields of the same names only so that a `case "MESSAGE":` (which TypeScript cannot tell
 * from this member) still types `data.message`; such an event may have none of them.
 */
export type OtherFleetEvent = {
  id: string;
  type: string;
  data: AnyKnownFields & { type: string; sessionId?: string; runId?: string | null } & AdditiveFields;
};

/**
 * One event of a stream: `id` (give it back as `after` to resume), `type`, and `data`, which
 * always carries `type`, and `sessionId` (session events) or `batchId` (batch events), and
 * `runId` for run events.
 */
export type FleetEvent = KnownFleetEvent | OtherFleetEvent;
