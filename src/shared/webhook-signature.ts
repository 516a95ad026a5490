/**
 * A webhook delivery's `Fleet-Signature` header (contracts §9): how the fleet signs a body, and
 * how a receiver checks it (pure).
 */
import { createHmac, timingSafeEqual } from "node:crypto";

/** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. */
export function signWebhook(secret: string, body: string, unixSeconds: number): string {
  const mac = createHmac("sha256", secret).update(`${unixSeconds}.${body}`).digest("hex");
  return `t=${unixSeconds},v1=${mac}`;
}

/**
 * For receivers: whether a `Fleet-Signature` header signs `body`, within `toleranceSeconds`.
 * An empty secret verifies nothing: anyone can compute an HMAC with an empty key, and a
 * receiver reading an unset variable (`process.env.FLEET_WEBHOOK_SECRET ?? ""`) took forged
 * deliveries as signed. The header is read as the fleet writes it: `t` in digits, `v1` 64 hex
 * digits (Buffer.from(…, "hex") stopped at the first other character, so a MAC with anything
 * after it passed).
 */
export function verifyWebhookSignature(
  secret: string,
  body: string,
  header: string,
  toleranceSeconds = 300,
  nowSeconds = Math.floor(Date.now() / 1000),
): boolean {
  if (secret === "") return false;
  const parts = Object.fromEntries(header.split(",").map((p) => p.split("=", 2) as [string, string]));
  const v1 = parts.v1 ?? "";
  if (!/^\d{1,15}$/.test(parts.t ?? "") || !/^[0-9a-f]{64}$/i.test(v1)) return false;
  const t = Number(parts.t);
  if (Math.abs(nowSeconds - t) > toleranceSeconds) return false;
  const expected = Buffer.from(signWebhook(secret, body, t).split("v1=")[1]!, "hex");
  const given = Buffer.from(v1, "hex");
  return given.length === expected.length && timingSafeEqual(given, expected);
}
