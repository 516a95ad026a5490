/**
 * The documented routes of a tenant's own webhook signing secret (route-docs.ts): reading
 * it and rotating it, when per-tenant secrets are on (FLEET_WEBHOOK_SECRET_PER_TENANT).
 */
import { z } from "zod";
import { errorSchema } from "./api-schemas.js";
import { common, noFields, post, type RouteDoc } from "./route-docs-common.js";

/** The webhook-secret routes, by `METHOD path` (route-docs.ts puts them in ROUTE_DOCS). */
export const WEBHOOK_SECRET_ROUTE_DOCS = {
  "GET /v1/webhook-secret": {
    operationId: "webhookSecret",
    summary:
      "The secret that signs this tenant's batch webhooks, when the operator turned on per-tenant secrets (FLEET_WEBHOOK_SECRET_PER_TENANT); each key reads its own tenant's only",
    responses: {
      200: {
        description: "This tenant's webhook signing secret (`Cache-Control: no-store`)",
        schema: z.object({ secret: z.string() }),
      },
      ...common,
      404: {
        description:
          "Per-tenant webhook secrets are off: the fleet's FLEET_WEBHOOK_SECRET signs every webhook",
        schema: errorSchema,
      },
    },
  },
  "POST /v1/webhook-secret/rotate": post({
    operationId: "rotateWebhookSecret",
    summary:
      "Rotates this tenant's own webhook signing secret (FLEET_WEBHOOK_SECRET_PER_TENANT): deliveries are signed with the new secret and, until previousValidUntil (FLEET_WEBHOOK_SECRET_GRACE_MS), with the one before too; read the new one with GET /v1/webhook-secret. With an Idempotency-Key, a retry rotates nothing",
    ...noFields,
    responses: {
      200: {
        description: "The new generation, and until when the secret it replaced still signs deliveries",
        schema: z.object({ generation: z.number().int(), previousValidUntil: z.string() }),
      },
      ...common,
      404: {
        description:
          "Per-tenant webhook secrets are off: the fleet's FLEET_WEBHOOK_SECRET signs every webhook, rotated by the operator",
        schema: errorSchema,
      },
    },
  }),
} satisfies Record<string, RouteDoc>;
