/**
 * Why a webhook's delivery failed, as stored in `batches.webhook_last_error` and shown as
 * `webhook.lastError` (pure). One line, at most WEBHOOK_ERROR_MAX characters: the attempt and
 * its reason as the sweeper saw it (the receiver's status, no answer in time, a refused or
 * unresolvable address, its sweepers' deaths), never the receiver's answer body (postWebhook
 * reads none) and never a secret it is given (the signing secrets).
 */
import { scrubSecrets } from "./scrub-secrets.js";

export const WEBHOOK_ERROR_MAX = 300;

export function webhookErrorText(
  failure: { attempt: number; message: string; givenUp?: string },
  secrets: readonly (string | undefined)[] = [],
): string {
  const oneLine = (text: string) => text.replace(/[\p{Cc}\s]+/gu, " ").trim();
  const attempt = `attempt ${failure.attempt}: ${oneLine(failure.message) || "(no reason given)"}`;
  const givenUp = failure.givenUp === undefined ? "" : oneLine(failure.givenUp);
  const text = scrubSecrets(
    givenUp === ""
      ? attempt
      : givenUp === oneLine(failure.message)
        ? `given up: ${attempt}`
        : `given up: ${givenUp}; ${attempt}`,
    secrets,
  );
  return text.length <= WEBHOOK_ERROR_MAX ? text : `${text.slice(0, WEBHOOK_ERROR_MAX - 1)}…`;
}

/**
 * The batch as a delivery sends it (pure): without `webhook.lastError`, which is the
 * operator's and the tenant's to read in the API, so that every attempt sends the same body
 * as before it was stored (a retry's body named the attempt before it).
 */
export function deliveryBody<T extends { webhook?: { lastError?: string } }>(batch: T): T {
  if (batch.webhook?.lastError === undefined) return batch;
  const { lastError: _, ...webhook } = batch.webhook;
  return { ...batch, webhook };
}

/**
 * A failed attempt's reason as its tenant reads it (pure): a connection's error names the
 * address the URL's host resolved to (`connect ECONNREFUSED 10.3.4.5:8080`), which is where
 * the operator's resolver sends that name: for a name of the operator's network, an internal
 * address the tenant could not look up itself. It reads as the URL's host, as the tenant wrote
 * it. Node's attempt at several addresses (an AggregateError with no message) says each.
 */
export function attemptErrorText(error: unknown, url: string): string {
  let hostname: string;
  try {
    hostname = new URL(url).hostname;
  } catch {
    return errorMessage(error);
  }
  const inner = error instanceof AggregateError && error.message === "" ? error.errors : [error];
  return inner
    .map((one) => {
      let text = errorMessage(one);
      const { address, port } = (one ?? {}) as { address?: unknown; port?: unknown };
      if (typeof address !== "string" || address === "" || address === hostname) return text;
      if (port !== undefined)
        text = text.replaceAll(`${address}:${String(port)}`, `${hostname}:${String(port)}`);
      return text.replaceAll(address, hostname);
    })
    .join("; ");
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The text `attemptErrorText` gave a delivery's error, kept on it for the "failed" handler. */
export function tenantTextOf(error: Error): string {
  const said = (error as { tenantText?: unknown }).tenantText;
  return typeof said === "string" ? said : error.message;
}
