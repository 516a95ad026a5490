/**
 * Removing keys from text that is about to be logged, stored or shown (pure). A provider's
 * error message may quote what it was sent ("Incorrect API key provided: sk-…"), and a log
 * line or a run's `error` must never carry it.
 *
 * `scrubSecrets` replaces:
 * - every value given in `secrets` (the key a request used, the values of the key variables
 *   of the environment: `secretValuesFromEnv`), without surrounding blanks, longest first;
 *   values shorter than `MIN_SECRET_LENGTH` are left alone, so that a short variable ("1",
 *   "no-key") cannot blank out ordinary words;
 * - anything shaped like a key: `sk-…` (OpenAI and Anthropic keys), `Bearer …`, and the
 *   value after `api_key=`, `x-api-key:`, `token:`, `secret=`, `password:` (quoted or not);
 * - OpenAI organization and project ids (`org-…`, `proj_…`), which name the operator's
 *   account in the errors every tenant reads.
 */

export const REDACTED = "[redacted]";

/** Values shorter than this are not treated as secrets (see the file comment). */
export const MIN_SECRET_LENGTH = 8;

/**
 * Variables that hold provider credentials, by name (the SDKs' own names). A declared
 * endpoint's `apiKeyEnv` may have any name; `secretValuesFromEnv` also takes every variable
 * whose name ends like a credential's, and callers pass the key they used besides.
 */
export const SECRET_ENV_NAMES: readonly string[] = [
  "OPENAI_API_KEY",
  "OPENAI_ADMIN_KEY",
  "OPENAI_ORG_ID",
  "OPENAI_PROJECT_ID",
  "OPENAI_WEBHOOK_SECRET",
  "ANTHROPIC_API_KEY",
  "ANTHROPIC_AUTH_TOKEN",
  "ANTHROPIC_WEBHOOK_SIGNING_KEY",
  "OPENAI_CUSTOM_HEADERS",
  "ANTHROPIC_CUSTOM_HEADERS",
];

/** Names that end like a credential's: `TEAM_KEY`, `GATEWAY_API_KEY`, `X_TOKEN`, `DB_PASSWORD`. */
const SECRET_ENV_NAME = /(^|_)(KEY|API_KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$/i;

/** Header values of a `NAME: value` lines variable (`*_CUSTOM_HEADERS`). */
function headerValues(text: string): string[] {
  return text.split("\n").flatMap((line) => {
    const colon = line.indexOf(":");
    return colon >= 0 ? [line.slice(colon + 1).trim()] : [];
  });
}

/** The values of `env`'s credential variables (see SECRET_ENV_NAMES), worth scrubbing. */
export function secretValuesFromEnv(env: Readonly<Record<string, string | undefined>>): string[] {
  const values: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (!value) continue;
    if (name.endsWith("_CUSTOM_HEADERS")) values.push(...headerValues(value));
    else if (SECRET_ENV_NAMES.includes(name) || SECRET_ENV_NAME.test(name)) values.push(value.trim());
  }
  return values.filter((v) => v.length >= MIN_SECRET_LENGTH);
}

const PATTERNS: readonly [RegExp, string][] = [
  // OpenAI (sk-…, sk-proj-…) and Anthropic (sk-ant-…) keys, including masked echoes (sk-ab**cd).
  [/\bsk-[A-Za-z0-9_*.-]{4,}/g, `sk-${REDACTED}`],
  // The operator's OpenAI organization and project, which its errors name whatever the
  // environment says ("Rate limit reached for gpt-4o in organization org-…", "Project
  // `proj_…` does not have access to model …"); OPENAI_ORG_ID and OPENAI_PROJECT_ID are
  // scrubbed by value only when set. Ids are 16 characters and more: `org-wide` stays.
  [/\borg-[A-Za-z0-9]{16,}\b/g, `org-${REDACTED}`],
  [/\bproj_[A-Za-z0-9]{16,}\b/g, `proj_${REDACTED}`],
  // An Authorization header or its echo.
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=*-]+/gi, `$1 ${REDACTED}`],
  // `x-api-key: …`, `api_key=…`, `"token": "…"`, `password=…`.
  [
    /\b((?:x-)?api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password)(["']?\s*[:=]\s*["']?)([^\s"',;&]{4,})/gi,
    `$1$2${REDACTED}`,
  ],
];

/** `text` without the given secrets and without anything shaped like a key (see the file comment). */
export function scrubSecrets(text: string, secrets: readonly (string | null | undefined)[] = []): string {
  let out = text;
  // Without surrounding blanks: a key read with a line break (a secret made from a file) is
  // sent trimmed — fetch trims a header's value — and a server quotes it so.
  const values = [
    ...new Set(
      secrets
        .map((s) => (typeof s === "string" ? s.trim() : ""))
        .filter((s) => s.length >= MIN_SECRET_LENGTH),
    ),
  ].sort((a, b) => b.length - a.length);
  for (const value of values) out = out.split(value).join(REDACTED);
  for (const [pattern, replacement] of PATTERNS) out = out.replace(pattern, replacement);
  return out;
}
