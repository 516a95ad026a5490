/**
 * What `GET /v1/webhook-secret` and `POST /v1/webhook-secret/rotate` answer (webhook-secrets.ts):
 * only while the operator turned on per-tenant secrets (FLEET_WEBHOOK_SECRET_PER_TENANT), and
 * each for the caller's own tenant. Off: undefined, a 404 (the fleet's secret is never served,
 * and rotates by its variable, every tenant's at once). The rotation's answer names the new
 * generation, not its secret (read with the GET): an answer is kept with its Idempotency-Key in
 * Postgres for 24 h, and a secret kept there would be read by whoever reads the database, which
 * otherwise holds no tenant's secret (each is derived from FLEET_WEBHOOK_SECRET).
 */
import type { WebhookSecretGenerations } from "../shared/store/webhook-secret-generations.js";
import { signingSecret } from "../shared/webhook-secrets.js";
import type { WebhookSettings } from "../shared/webhooks.js";
import type { ApiDeps } from "./api-deps.js";

export function webhookSecretRoutes(
  settings: Pick<WebhookSettings, "secret" | "perTenant" | "rotationGraceMs">,
  generations: Pick<WebhookSecretGenerations, "current" | "rotate">,
): Pick<ApiDeps, "webhookSecret" | "rotateWebhookSecret"> {
  return {
    webhookSecret: async (tenant) =>
      settings.perTenant ? signingSecret(settings, tenant, await generations.current(tenant)) : undefined,
    rotateWebhookSecret: async (tenant) => {
      if (!settings.perTenant) return undefined;
      const rotation = await generations.rotate(tenant, settings.rotationGraceMs ?? 86_400_000);
      return {
        generation: rotation.generation,
        previousValidUntil: rotation.previousValidUntil.toISOString(),
      };
    },
  };
}
