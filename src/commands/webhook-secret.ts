/**
 * `fleet webhook-secret`: prints `{"secret"}`, the secret that signs the caller's tenant's batch
 * webhooks, read with its own key (`GET /v1/webhook-secret`) when the operator turned on
 * per-tenant secrets (FLEET_WEBHOOK_SECRET_PER_TENANT). Exit 2 with the API's message when
 * they are off (the fleet's FLEET_WEBHOOK_SECRET signs every webhook) or the API cannot be reached.
 */
import { type AnswerOptions, printAnswer } from "./api-client.js";

export function webhookSecretCommand(options: AnswerOptions = {}): Promise<number> {
  return printAnswer(options, "fleet webhook-secret", (client) => client.webhookSecret());
}
