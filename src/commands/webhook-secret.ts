/**
 * `fleet webhook-secret`: prints `{"secret"}`, the secret that signs the caller's tenant's batch
 * webhooks, read with its own key (`GET /v1/webhook-secret`) when the operator turned on
 * per-tenant secrets (FLEET_WEBHOOK_SECRET_PER_TENANT). Exit 2 with the API's message when
 * they are off (the fleet's FLEET_WEBHOOK_SECRET signs every webhook) or the API cannot be reached.
 * `--rotate` first rotates it (`POST /v1/webhook-secret/rotate`, with `--idempotency-key` acting
 * once) and prints `{"secret", "previousValidUntil"}`: the secret now, and until when the one
 * it replaced also signs.
 */
import { type AnswerOptions, printAnswer } from "./api-client.js";

export function webhookSecretCommand(
  options: AnswerOptions & { rotate?: boolean; idempotencyKey?: string } = {},
): Promise<number> {
  return printAnswer(options, "fleet webhook-secret", async (client) => {
    if (!options.rotate) return client.webhookSecret();
    const { previousValidUntil } = await client.rotateWebhookSecret({
      idempotencyKey: options.idempotencyKey,
    });
    return { ...(await client.webhookSecret()), previousValidUntil };
  });
}
