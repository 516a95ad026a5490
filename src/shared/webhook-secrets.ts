/**
 * Which secret signs a tenant's webhooks (pure). By default FLEET_WEBHOOK_SECRET signs every
 * tenant's, and every tenant's receiver holds it to verify: a signature then proves only that
 * someone holding the fleet's secret made it, and any tenant's receiver could sign a body that
 * another tenant's receiver takes as the fleet's. With FLEET_WEBHOOK_SECRET_PER_TENANT on, each
 * tenant's deliveries are signed with its own secret, derived from the operator's secret and
 * the tenant's name (nothing stored): HMAC-SHA256(FLEET_WEBHOOK_SECRET, DERIVATION + tenant),
 * hex, after `whsec_`. A tenant reads its own with its own key (GET /v1/webhook-secret, `fleet
 * webhook-secret`); no tenant can compute another's without the operator's secret. Rotating
 * FLEET_WEBHOOK_SECRET rotates every tenant's at once; one tenant's alone is rotated by moving
 * it to its next generation (`POST /v1/webhook-secret/rotate`, webhook-secret-generations.ts),
 * which the derivation also signs. Generation 0 (a tenant never rotated) is derived exactly as
 * before generations existed. Until the rotation's grace period ends, deliveries are signed
 * with the generation before it as well, so a receiver switches secrets at its own pace.
 */
import { createHmac } from "node:crypto";

/** What the derivation signs before the tenant's name: a purpose no other HMAC of the secret has. */
const DERIVATION = "agent-fleet webhook signing secret of tenant ";

/**
 * What it signs for a generation after the first, before the tenant's name: it starts unlike
 * DERIVATION, and the generation's digits end at the comma, so no tenant's name and generation
 * sign what another's do.
 */
const generationDerivation = (generation: number) =>
  `agent-fleet webhook signing secret, generation ${generation}, of tenant `;

/** The signing secret of `tenant`, at `generation`, derived from the operator's `secret`. */
export function tenantWebhookSecret(secret: string, tenant: string, generation = 0): string {
  const purpose = generation === 0 ? DERIVATION : generationDerivation(generation);
  return `whsec_${createHmac("sha256", secret).update(`${purpose}${tenant}`).digest("hex")}`;
}

/** A tenant's generation as stored (no row: generation 0), and whether the one before still signs. */
export type SecretGeneration = { generation: number; previousValid: boolean };

/**
 * The secret that signs `tenant`'s webhooks: the operator's as before, or the tenant's own
 * when the operator opted in; undefined without FLEET_WEBHOOK_SECRET (no webhooks).
 */
export function signingSecret(
  settings: { secret: string | undefined; perTenant?: boolean },
  tenant: string,
  generation: SecretGeneration = { generation: 0, previousValid: false },
): string | undefined {
  return signingSecrets(settings, tenant, generation)[0];
}

/**
 * Every secret that signs `tenant`'s deliveries now (pure), the current one first: with the
 * tenant's own secrets, its generation's and, during a rotation's grace period, the one before
 * it. None without FLEET_WEBHOOK_SECRET; the operator's alone without per-tenant secrets
 * (generations are the tenants' own secrets': the operator's rotates by its variable).
 */
export function signingSecrets(
  settings: { secret: string | undefined; perTenant?: boolean },
  tenant: string,
  current: SecretGeneration = { generation: 0, previousValid: false },
): string[] {
  if (!settings.secret) return [];
  if (!settings.perTenant) return [settings.secret];
  const secrets = [tenantWebhookSecret(settings.secret, tenant, current.generation)];
  if (current.previousValid && current.generation > 0)
    secrets.push(tenantWebhookSecret(settings.secret, tenant, current.generation - 1));
  return secrets;
}
