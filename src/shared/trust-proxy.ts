/**
 * FLEET_API_TRUST_PROXY (config.ts), checked as Fastify's proxy-addr reads a list of trusted
 * proxies.
 */
import { isIP } from "node:net";
import { ValidationError } from "./errors.js";

/** FLEET_API_TRUST_PROXY as Fastify's `trustProxy`: false (default), true, hops, or addresses. */
export function parseTrustProxy(value: string | undefined): boolean | number | string {
  const v = (value ?? "").trim();
  if (v === "" || v.toLowerCase() === "false") return false;
  if (v.toLowerCase() === "true") return true;
  if (/^\d+$/.test(v)) return Number(v);
  // Checked here as Fastify's proxy-addr reads it, so that a typo stops the start naming the
  // variable (exit 2) rather than Fastify's `invalid IP address: …` with no name (exit 1).
  for (const entry of v.split(",").map((it) => it.trim()))
    if (!isProxyAddress(entry))
      throw new ValidationError(
        "FLEET_API_TRUST_PROXY",
        `${JSON.stringify(entry)} is no proxy address: give true, a number of hops, or a comma-separated list of addresses and CIDRs (10.0.0.0/8, ::1, loopback)`,
      );
  return v;
}

/** One entry of a trusted-proxy list: loopback/linklocal/uniquelocal, an IP, or IP/prefix (IPv4 also IP/netmask). */
function isProxyAddress(entry: string): boolean {
  if (["loopback", "linklocal", "uniquelocal"].includes(entry)) return true;
  const slash = entry.lastIndexOf("/");
  const kind = isIP(slash < 0 ? entry : entry.slice(0, slash));
  if (kind === 0) return false;
  if (slash < 0) return true;
  const range = entry.slice(slash + 1);
  if (/^\d+$/.test(range)) return Number(range) > 0 && Number(range) <= (kind === 4 ? 32 : 128);
  if (kind !== 4 || isIP(range) !== 4) return false;
  const mask = range.split(".").reduce((bits, octet) => (bits << 8) | Number(octet), 0) >>> 0;
  return mask !== 0 && ((~mask >>> 0) & ((~mask >>> 0) + 1)) === 0;
}
