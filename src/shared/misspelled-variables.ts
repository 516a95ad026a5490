/**
 * FLEET_* variables spelled one or two letters off one the fleet reads. Such a variable is
 * ignored, and its setting with it: FLEET_TENANT_MAX_ACTIVE_SESSION (no S) left tenants
 * uncapped, FLEET_RETENTON_DAYS kept everything, in silence
 * (test/config-misspelled-variables.test.ts). Only near misses are named: a FLEET_* name near
 * none is an operator's own (a model endpoint's `apiKeyEnv`, a deploy script's), not a typo.
 */
import { CONFIG_VARIABLES } from "./config-schema.js";

/**
 * FLEET_* variables read outside config-schema.ts: the CLI client's (api-client.ts), the
 * debug switch (cli.ts), the provider gate's tuning (provider-limit-settings.ts) and the
 * webhooks' (webhooks.ts).
 */
const OTHER_VARIABLES = [
  "FLEET_API_URL",
  "FLEET_API_KEY",
  "FLEET_DEBUG",
  "FLEET_ENDPOINT_MAX_WAIT_MS",
  "FLEET_ENDPOINT_PERMIT_TTL_MS",
  "FLEET_ENDPOINT_DEFAULT_PAUSE_MS",
  "FLEET_ENDPOINT_MAX_PAUSE_MS",
  "FLEET_WEBHOOK_ALLOWED_URLS",
  "FLEET_WEBHOOK_DENY_PRIVATE",
  "FLEET_WEBHOOK_LOCK_MS",
  "FLEET_WEBHOOK_RETRY_MS",
  "FLEET_WEBHOOK_SECRET",
  "FLEET_WEBHOOK_SECRET_GRACE_MS",
  "FLEET_WEBHOOK_SECRET_PER_TENANT",
  "FLEET_WEBHOOK_STALL_CHECK_MS",
];
const KNOWN: readonly string[] = [
  ...CONFIG_VARIABLES.filter((name) => name.startsWith("FLEET_")),
  ...OTHER_VARIABLES,
];

/** Levenshtein distance, given up past `limit` (pure). */
function distance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++)
      row[j] = Math.min(
        previous[j]! + 1,
        row[j - 1]! + 1,
        previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    previous = row;
  }
  return previous[b.length]!;
}

/**
 * One line for each FLEET_* variable of `env` that the fleet does not read and that is at
 * most two edits from one it does, naming the one meant; never its value (pure).
 */
export function misspelledVariables(env: Record<string, string | undefined>): string[] {
  const lines: string[] = [];
  for (const name of Object.keys(env).sort()) {
    if (!name.startsWith("FLEET_") || KNOWN.includes(name) || env[name] === undefined) continue;
    // The nearest, the first listed of equally near ones.
    let meant: string | undefined;
    let nearest = 3;
    for (const known of KNOWN) {
      const d = distance(name, known, 2);
      if (d < nearest) [meant, nearest] = [known, d];
    }
    if (meant) lines.push(`${name} is not a variable the fleet reads (ignored): did you mean ${meant}?`);
  }
  return lines;
}
