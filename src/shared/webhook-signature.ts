/**
 * A webhook delivery's `Fleet-Signature` header (contracts §9): how the fleet signs a body, and
 * how a receiver checks it (pure).
 */
import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, one `v1=` entry per secret, in the
 * order given: while a tenant's secret rotates, its current secret's and its previous one's
 * (webhook-secrets.ts), as Stripe signs during a rotation. One secret: one entry, as always.
 */
export function signWebhook(secrets: string | readonly string[], body: string, unixSeconds: number): string {
  const macs = (typeof secrets === "string" ? [secrets] : secrets).map(
    (secret) => `v1=${createHmac("sha256", secret).update(`${unixSeconds}.${body}`).digest("hex")}`,
  );
  return [`t=${unixSeconds}`, ...macs].join(",");
}

/**
 * For receivers: whether a `Fleet-Signature` header signs `body`, within `toleranceSeconds`:
 * whether any of its `v1=` entries is the HMAC under `secret` (a header signed during a
 * rotation carries one per secret; each receiver holds one of them).
 * An empty secret verifies nothing: anyone can compute an HMAC with an empty key, and a
 * receiver reading an unset variable (`process.env.FLEET_WEBHOOK_SECRET ?? ""`) took forged
 * deliveries as signed. The header is read as the fleet writes it: one `t` in digits, every
 * `v1` 64 hex digits (Buffer.from(…, "hex") stopped at the first other character, so a MAC
 * with anything after it passed).
 */
export function verifyWebhookSignature(
  secret: string,
  body: string,
  /**
   * `req.headers["fleet-signature"]` as Node gives it: absent (a request anyone sent) or a list
   * (a framework's repeated header) verifies nothing. It threw a TypeError, and a receiver
   * answered 500 (or crashed) where it refuses.
   */
  header: string | readonly string[] | undefined,
  toleranceSeconds = 300,
  nowSeconds = Math.floor(Date.now() / 1000),
): boolean {
  if (secret === "" || typeof header !== "string") return false;
  const entries = header.split(",").map((p) => p.split("=", 2) as [string, string | undefined]);
  const ts = entries.filter(([key]) => key === "t").map(([, value]) => value ?? "");
  const v1s = entries.filter(([key]) => key === "v1").map(([, value]) => value ?? "");
  if (ts.length !== 1 || !/^\d{1,15}$/.test(ts[0]!)) return false;
  if (v1s.length === 0 || !v1s.every((v1) => /^[0-9a-f]{64}$/i.test(v1))) return false;
  const t = Number(ts[0]);
  // Within it, or refused: a tolerance or clock that is not a number (NaN compares false) took any age.
  if (!(Math.abs(nowSeconds - t) <= toleranceSeconds)) return false;
  const expected = Buffer.from(signWebhook(secret, body, t).split("v1=")[1]!, "hex");
  // Every entry is compared, matched or not: how many were looked at says nothing of which matched.
  return v1s
    .map((v1) => Buffer.from(v1, "hex"))
    .reduce((found, given) => timingSafeEqual(given, expected) || found, false);
}
