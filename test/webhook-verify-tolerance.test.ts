/**
 * The receivers' check (verifyWebhookSignature) fails closed on a tolerance it cannot compare
 * with: `Math.abs(now - t) > NaN` is false, so a tolerance read from an unset or mistyped
 * variable (`Number(process.env.WEBHOOK_TOLERANCE)`, NaN) took a delivery signed years ago —
 * any captured delivery replayed for ever — as fresh.
 */
import { describe, expect, it } from "vitest";
import { signWebhook, verifyWebhookSignature } from "../src/shared/webhook-signature.js";

const SECRET = "whsec-tolerance";
const body = JSON.stringify({ id: "b1", status: "ended" });
const signedAt = 1_700_000_000;
const header = signWebhook(SECRET, body, signedAt);
const aYearLater = signedAt + 365 * 86_400;

describe("verifyWebhookSignature's replay window", () => {
  it("takes a fresh delivery and refuses an old one", () => {
    expect(verifyWebhookSignature(SECRET, body, header, 300, signedAt + 10)).toBe(true);
    expect(verifyWebhookSignature(SECRET, body, header, 300, aYearLater)).toBe(false);
  });

  it("refuses every delivery when the tolerance or the clock is not a number, rather than any age", () => {
    expect(verifyWebhookSignature(SECRET, body, header, Number.NaN, aYearLater)).toBe(false);
    expect(verifyWebhookSignature(SECRET, body, header, Number(undefined), signedAt)).toBe(false);
    expect(verifyWebhookSignature(SECRET, body, header, 300, Number.NaN)).toBe(false);
  });
});
