/**
 * The `/v1` routes as documented: for each, what it takes and its answers by status
 * (api-schemas.ts has the schemas). openapi.ts turns this table into the OpenAPI document and
 * the routes' Fastify schemas; the tests check real answers against it.
 * The routes are written by family (route-docs-sessions.ts, route-docs-batches.ts,
 * route-docs-events.ts, route-docs-webhooks.ts; what they share: route-docs-common.ts) and
 * listed here in this order, which is the order the document's named schemas
 * (`components.schemas`) are first met, and so listed, in.
 */
import { BATCH_ROUTE_DOCS } from "./route-docs-batches.js";
import { common, headersTooLarge, idTooLong, notHttp, type RouteDoc } from "./route-docs-common.js";
import { EVENT_ROUTE_DOCS } from "./route-docs-events.js";
import { SESSION_ROUTE_DOCS } from "./route-docs-sessions.js";
import { WEBHOOK_SECRET_ROUTE_DOCS } from "./route-docs-webhooks.js";

export type { ResponseDoc, RouteDoc } from "./route-docs-common.js";

/** Every `/v1` route, by `METHOD path` as Fastify registers it. */
export const ROUTE_DOCS: Record<string, RouteDoc> = withTransportAnswers({
  "POST /v1/sessions": SESSION_ROUTE_DOCS["POST /v1/sessions"],
  "POST /v1/batches": BATCH_ROUTE_DOCS["POST /v1/batches"],
  "POST /v1/batches/:id/sessions": BATCH_ROUTE_DOCS["POST /v1/batches/:id/sessions"],
  "GET /v1/batches/:id": BATCH_ROUTE_DOCS["GET /v1/batches/:id"],
  "GET /v1/batches/:id/results": BATCH_ROUTE_DOCS["GET /v1/batches/:id/results"],
  "GET /v1/batches/:id/events": EVENT_ROUTE_DOCS["GET /v1/batches/:id/events"],
  "GET /v1/sessions/:id/events": EVENT_ROUTE_DOCS["GET /v1/sessions/:id/events"],
  "POST /v1/batches/:id/cancel": BATCH_ROUTE_DOCS["POST /v1/batches/:id/cancel"],
  "POST /v1/batches/:id/resume": BATCH_ROUTE_DOCS["POST /v1/batches/:id/resume"],
  "DELETE /v1/sessions/:id": SESSION_ROUTE_DOCS["DELETE /v1/sessions/:id"],
  "DELETE /v1/batches/:id": BATCH_ROUTE_DOCS["DELETE /v1/batches/:id"],
  "PATCH /v1/sessions/:id": SESSION_ROUTE_DOCS["PATCH /v1/sessions/:id"],
  "POST /v1/sessions/:id/cancel": SESSION_ROUTE_DOCS["POST /v1/sessions/:id/cancel"],
  "GET /v1/sessions": SESSION_ROUTE_DOCS["GET /v1/sessions"],
  "GET /v1/sessions/:id": SESSION_ROUTE_DOCS["GET /v1/sessions/:id"],
  "POST /v1/sessions/:id/messages": SESSION_ROUTE_DOCS["POST /v1/sessions/:id/messages"],
  "POST /v1/sessions/:id/history": SESSION_ROUTE_DOCS["POST /v1/sessions/:id/history"],
  "POST /v1/sessions/:id/resume": SESSION_ROUTE_DOCS["POST /v1/sessions/:id/resume"],
  "GET /v1/sessions/:id/resume-point": SESSION_ROUTE_DOCS["GET /v1/sessions/:id/resume-point"],
  "GET /v1/runs/:id": SESSION_ROUTE_DOCS["GET /v1/runs/:id"],
  "GET /v1/webhook-secret": WEBHOOK_SECRET_ROUTE_DOCS["GET /v1/webhook-secret"],
  "POST /v1/webhook-secret/rotate": WEBHOOK_SECRET_ROUTE_DOCS["POST /v1/webhook-secret/rotate"],
  "GET /v1/openapi.json": {
    operationId: "openapi",
    summary: "This document",
    responses: {
      200: { description: "OpenAPI 3.1" },
      401: common[401],
      403: common[403],
      408: common[408],
      429: common[429],
      500: common[500],
      503: common[503],
    },
  },
});

/**
 * What the API answers before any route runs (http-api.ts `frameworkErrors` and
 * `clientErrorHandler`), documented on each route it can reach: 431 for headers over Node's
 * limit and 400 for bytes that are not HTTP on every route, 414 for an id over 100
 * characters on each route that takes an id. Each was answered, in the error shape, but
 * documented on none (400 was documented on all but GET /v1/openapi.json).
 */
function withTransportAnswers(docs: Record<string, RouteDoc>): Record<string, RouteDoc> {
  return Object.fromEntries(
    Object.entries(docs).map(([route, doc]) => {
      const responses: RouteDoc["responses"] = { 400: notHttp, ...doc.responses, 431: headersTooLarge };
      if (doc.idParam) responses[414] = idTooLong;
      return [route, { ...doc, responses }];
    }),
  );
}
