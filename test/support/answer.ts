import { afterAll, beforeAll } from "vitest";
import { ApiKeys } from "../../src/shared/store/api-keys.js";
import { createFleetEnv, type FleetEnv } from "./fleet-env.js";

/** What a test sees of an HTTP answer: the status, the body as text and, when it parses, as JSON. */
// biome-ignore lint/suspicious/noExplicitAny: tests read answer bodies of every shape
export type Answer = { status: number; json: any; text: string; contentType: string | null };

export async function readAnswer(response: Response): Promise<Answer> {
  const text = await response.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: response.status, json, text, contentType: response.headers.get("content-type") };
}

/** A POST of `body` as JSON to the API at `base`, with a tenant's key and an Idempotency-Key. */
export function postKeyed(
  base: string,
  apiKey: string,
  path: string,
  body: unknown,
  idempotencyKey: string,
): Promise<Response> {
  return fetch(`${base}${path}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${apiKey}`,
      "content-type": "application/json",
      "idempotency-key": idempotencyKey,
    },
    body: JSON.stringify(body),
  });
}

/** A POST of `body` as JSON to the API at `base`, with a tenant's key, read as an Answer. */
export function postAs(base: string, apiKey: string, path: string, body: unknown): Promise<Answer> {
  return fetch(`${base}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  }).then(readAnswer);
}

/**
 * A fleet for a file's tests of the API as one tenant ("a"): made in `beforeAll` with `env`, its
 * API started and a key created; `post` sends as that tenant, `runsOf` counts a session's runs.
 */
export function keyedApiForFile(
  name: string,
  env: Record<string, string>,
): {
  readonly fleet: FleetEnv;
  post: (path: string, body: unknown) => Promise<Answer>;
  runsOf: (sessionId: string) => Promise<number>;
} {
  const held = {} as { fleet: FleetEnv; base: string; key: string };
  beforeAll(async () => {
    held.fleet = await createFleetEnv(name, { env });
    held.key = (await new ApiKeys(held.fleet.database).create("a")).key;
    held.base = (await held.fleet.startApi()).api.url;
  }, 60_000);
  afterAll(() => held.fleet?.close());
  return {
    get fleet() {
      return held.fleet;
    },
    post: (path, body) => postAs(held.base, held.key, path, body),
    runsOf: async (sessionId) =>
      (await held.fleet.database.sql`select 1 from runs where session_id = ${sessionId}`).length,
  };
}
