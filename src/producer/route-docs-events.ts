/**
 * The documented event-stream routes (route-docs.ts, contracts §7): a batch's and a
 * session's Server-Sent Events.
 */
import {
  batchEventSchema,
  errorSchema,
  eventsHeaders,
  eventsQuery,
  gone,
  sessionEventSchema,
  sessionEventsQuery,
} from "./api-schemas.js";
import { common, missing, type RouteDoc } from "./route-docs-common.js";

/** The event-stream routes, by `METHOD path` (route-docs.ts puts them in ROUTE_DOCS). */
export const EVENT_ROUTE_DOCS = {
  "GET /v1/batches/:id/events": {
    operationId: "batchEvents",
    summary:
      "Server-Sent Events (text/event-stream): SESSION_ENDED for each session that reaches a terminal state, then BATCH_COMPLETED, after which the stream ends",
    idParam: "batch id",
    querystring: eventsQuery,
    headers: eventsHeaders,
    responses: {
      200: {
        description:
          "An event stream: `id:` (resume with Last-Event-ID or ?after=), `event:` (the type), `data:` (a BatchEvent)",
        schema: batchEventSchema,
        media: "text/event-stream",
      },
      204: {
        description:
          "Resumed (Last-Event-ID or ?after=) at or after the batch's BATCH_COMPLETED: nothing follows it, so there is no stream; an event-stream client stops reconnecting",
      },
      ...common,
      ...missing,
      ...gone,
    },
  },
  "GET /v1/sessions/:id/events": {
    operationId: "events",
    summary:
      "Server-Sent Events (text/event-stream) of what the session does; without an id, from the RUN_STARTED of its latest run",
    idParam: "session id",
    querystring: sessionEventsQuery,
    headers: eventsHeaders,
    responses: {
      200: {
        description:
          "An event stream: `id:` (strictly increasing; resume with Last-Event-ID or ?after=), `event:` (the type), `data:` (a SessionEvent); `: heartbeat` comments while idle",
        schema: sessionEventSchema,
        media: "text/event-stream",
      },
      ...common,
      ...missing,
      409: {
        description:
          'The session was created with `sessionEvents: false` (`reason: "session_events_off"`): it has no event stream',
        schema: errorSchema,
      },
      ...gone,
    },
  },
} satisfies Record<string, RouteDoc>;
