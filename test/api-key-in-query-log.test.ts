/**
 * A key sent in the URL's query (`?api_key=…`, `?key=…`, `?access_token=…`: what a client that
 * cannot set headers, such as a browser's EventSource, is tempted to do) is refused — only
 * `Authorization: Bearer KEY` is read — but the API's request log line quoted the URL whole:
 * a working key written in clear into the operator's logs, where keys are never logged
 * (README "Tenants and API keys": only its hash is stored). The log keeps the path and the
 * query's names, not such values.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { spawnApi } from "./support/api-process.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
beforeAll(async () => {
  fleet = await createFleetEnv("querykeylog");
}, 60_000);
afterAll(() => fleet?.close());

it("a key sent in the query is refused and not written to the API's log", async () => {
  const { key } = await new ApiKeys(fleet.database).create("acme");
  const secret = key.slice(key.lastIndexOf("_") + 1);
  const api = await spawnApi(fleet, { LOG_LEVEL: "info" });
  const paths = [
    `/v1/sessions?api_key=${key}`,
    `/v1/sessions?limit=1&key=${key}`,
    `/v1/sessions/x/events?access_token=${encodeURIComponent(key)}`,
    `/v1/sessions?${key}`,
  ];
  for (const path of paths) {
    const response = await fetch(`${api.url}${path}`);
    await response.arrayBuffer();
    expect(response.status).toBe(401);
  }
  // The same requests with the key where it belongs too: still not in the log.
  for (const path of paths) {
    const response = await fetch(`${api.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
    await response.arrayBuffer();
    expect(response.status).toBeLessThan(500);
  }
  api.signal();
  await api.exited;
  const output = api.output();
  // The requests are logged, their keys redacted: the key's id stays (`fleet keys list` shows it).
  expect(output).toContain("/v1/sessions?api_key=");
  // `fk_<12 hex>_<secret>`: the secret is base64url and may itself hold `_`.
  expect(output).toContain(`${key.slice(0, "fk_".length + 12 + 1)}[redacted]`);
  expect(output).toContain("&key=[redacted]");
  expect(output).not.toContain(secret);
}, 120_000);
