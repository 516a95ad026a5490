/**
 * Which secret signs a tenant's webhooks (pure). By default FLEET_WEBHOOK_SECRET signs every
 * tenant's, and every tenant's receiver holds it to verify: a signature then proves only that
 * someone holding the fleet's secret made it, and any tenant's receiver could sign a body that
 * another tenant's receiver takes as the fleet's. With FLEET_WEBHOOK_SECRET_PER_TENANT on, each
 * tenant's deliveries are signed with its own secret, derived from the operator's secret and
 * the tenant's name (nothing stored): HMAC-SHA256(FLEET_WEBHOOK_SECRET, DERIVATION + tenant),
 * hex, after `whsec_`. A tenant reads its own with its own key (GET /v1/webhook-secret, `fleet
 * webhook-secret`); no tenant can compute another's without the operator's secret. Rotating
 * FLEET_WEBHOOK_SECRET rotates every tenant's at once.
 */
import { createHmac } from "node:crypto";

/** What the derivation signs before the tenant's name: a purpose no other HMAC of the secret has. */
const DERIVATION = "agent-fleet webhook signing secret of tenant ";

/** The signing secret of `tenant` derived from the operator's `secret`. */
export function tenantWebhookSecret(secret: string, tenant: string): string {
  return `whsec_${createHmac("sha256", secret).update(`${DERIVATION}${tenant}`).digest("hex")}`;
}

/**
 * The secret that signs `tenant`'s webhooks: the operator's as before, or the tenant's own
 * when the operator opted in; undefined without FLEET_WEBHOOK_SECRET (no webhooks).
 */
export function signingSecret(
  settings: { secret: string | undefined; perTenant?: boolean },
  tenant: string,
): string | undefined {
  if (!settings.secret) return undefined;
  return settings.perTenant ? tenantWebhookSecret(settings.secret, tenant) : settings.secret;
}
