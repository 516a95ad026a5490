/**
 * A delivery's `Fleet-Signature` (contracts §9): signed with the tenant's own secrets when the
 * operator opted in (webhook-secrets.ts) — its generation's and, during a rotation's grace
 * period, the one before it, read from Postgres at each attempt, so a rotation applies to
 * the next attempt of every delivery already queued — else with the fleet's.
 */
import type { WebhookSecretGenerations } from "../shared/store/webhook-secret-generations.js";
import { signingSecrets } from "../shared/webhook-secrets.js";
import { signWebhook } from "../shared/webhook-signature.js";
import type { WebhookSettings } from "../shared/webhooks.js";

/** Where each tenant's generation is read; absent: every tenant at generation 0. */
export type SecretGenerations = Pick<WebhookSecretGenerations, "current">;

export async function deliverySignature(
  settings: Pick<WebhookSettings, "secret" | "perTenant">,
  generations: SecretGenerations | undefined,
  tenant: string,
  body: string,
): Promise<string> {
  const generation = settings.perTenant ? await generations?.current(tenant) : undefined;
  const secrets = signingSecrets(settings, tenant, generation);
  if (secrets.length === 0) throw new Error("FLEET_WEBHOOK_SECRET is not set in the sweeper; cannot sign");
  return signWebhook(secrets, body, Math.floor(Date.now() / 1000));
}
