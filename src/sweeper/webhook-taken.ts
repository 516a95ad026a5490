/**
 * Whether a delivery's receiver took the webhook (pure). The delivery worker keeps that on the
 * job (its progress, in Redis) as soon as a 2xx comes back and before it records the delivery
 * in Postgres (batch-ends.ts): a later attempt, the failed handler and the scan
 * (webhook-owed.ts) then record it delivered, never send it again nor record it failed.
 */
export function receiverTookIt(progress: unknown): boolean {
  return (
    typeof progress === "object" &&
    progress !== null &&
    (progress as { receiverTookIt?: unknown }).receiverTookIt === true
  );
}
