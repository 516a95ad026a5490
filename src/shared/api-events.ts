/**
 * The events the API streams (contracts §7), as types: what `FleetClient.events()`,
 * `batchEvents()`, `stream()` and `streamResume()` yield. Like api-types.ts, they reach no
 * database or queue library.
 *
 * `FleetEvent` is the union of `KnownFleetEvent` (one member per type, its `data` typed) and
 * `OtherFleetEvent`, the shape every event had before (`type: string`, `data` with untyped
 * fields), which also stands for types added after this client (the contract is additive).
 * That member keeps every earlier use compiling — code that reads `event.data.text`, and code
 * that builds events (a test's fake stream) — so in a `case "MESSAGE":` `data` is still
 * untyped: TypeScript cannot tell that case from the member with `type: string`. Typed
 * reading: `isEventType(event, "MESSAGE")` narrows to that type's `KnownFleetEvent`, as does
 * `Extract<KnownFleetEvent, { type: "MESSAGE" }>` for a handler of one type.
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

/**
 * What every event's `data` carries besides its type's fields: `at`, when the event entered
 * the stream (ISO 8601, Redis's clock; absent from an API older than this field). A MESSAGE's
 * `message.createdAt` is when the message was committed, which a stream written again after a
 * loss keeps while its `at` is the rewrite's.
 */
export type EventTime = { at?: string };

/** An event of a type this client knows. */
export type KnownFleetEvent = {
  [T in FleetEventType]: { id: string; type: T; data: FleetEventDataByType[T] & EventTime & AdditiveFields };
}[FleetEventType];

/**
 * An event as the client typed every event before (and one of a type added after this
 * client): `data` with `type`, `sessionId` or `batchId`, and untyped fields.
 */
export type OtherFleetEvent = {
  id: string;
  type: string;
  data: { sessionId?: string; type: string; runId?: string | null } & EventTime & AdditiveFields;
};

/**
 * One event of a stream: `id` (give it back as `after` to resume), `type`, and `data`, which
 * always carries `type`, and `sessionId` (session events) or `batchId` (batch events), and
 * `runId` for run events.
 */
export type FleetEvent = KnownFleetEvent | OtherFleetEvent;

/**
 * Whether `event` is of `type`, and then typed as that type's event (its `data` fields), e.g.
 * `if (isEventType(event, "MESSAGE")) event.data.message.seq`. A check of `type` alone.
 */
export function isEventType<T extends FleetEventType>(
  event: { type: string },
  type: T,
): event is Extract<KnownFleetEvent, { type: T }> {
  return event.type === type;
}
