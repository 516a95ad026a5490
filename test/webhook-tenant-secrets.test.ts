/**
 * Per-tenant webhook secrets (FLEET_WEBHOOK_SECRET_PER_TENANT, opt-in). One FLEET_WEBHOOK_SECRET
 * signed every tenant's webhooks, and each tenant's receiver must hold it to verify: tenant A's
 * receiver could sign a body of its choosing that tenant B's receiver took as the fleet's.
 * With the option on, each tenant's deliveries are signed with a secret derived from the
 * operator's and the tenant's name, which the tenant reads with its own key (GET
 * /v1/webhook-secret, `fleet webhook-secret`); with it off, nothing changes, byte for byte.
 */
import { createHmac } from "node:crypto";
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { webhookSecretCommand } from "../src/commands/webhook-secret.js";
import { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { signingSecret, tenantWebhookSecret } from "../src/shared/webhook-secrets.js";
import { signWebhook, verifyWebhookSignature } from "../src/shared/webhook-signature.js";
import { webhookSettingsFromEnv } from "../src/shared/webhooks.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const OPERATOR = "whsec-operator-secret";
const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
type Delivery = { body: string; signature: string };

/** A receiver on a free port that takes every delivery (204). */
async function receiver(into: Delivery[]): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => {
      body += d;
    });
    req.on("end", () => {
      into.push({ body, signature: String(req.headers["fleet-signature"]) });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}/` };
}

describe("the signing secret (pure)", () => {
  it("is the operator's unless the operator opts in; then one per tenant, derived", () => {
    const off = webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET: OPERATOR });
    expect(off.perTenant).toBe(false);
    expect(signingSecret(off, "a")).toBe(OPERATOR);
    const on = webhookSettingsFromEnv({
      FLEET_WEBHOOK_SECRET: OPERATOR,
      FLEET_WEBHOOK_SECRET_PER_TENANT: "1",
    });
    expect(on.perTenant).toBe(true);
    const a = signingSecret(on, "a");
    expect(a).toBe(tenantWebhookSecret(OPERATOR, "a"));
    expect(a).toMatch(/^whsec_[0-9a-f]{64}$/);
    expect(a).not.toBe(signingSecret(on, "b"));
    expect(a).not.toBe(tenantWebhookSecret("another-operator-secret", "a"));
    // No tenant name is a prefix trick of another's: "a" + "b" is not "ab".
    expect(tenantWebhookSecret(OPERATOR, "ab")).not.toBe(tenantWebhookSecret(`${OPERATOR}a`, "b"));
    expect(() => webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET_PER_TENANT: "maybe" })).toThrow(
      /FLEET_WEBHOOK_SECRET_PER_TENANT/,
    );
    // On without a secret to derive from: refused at start, not a fleet that signs with nothing.
    expect(() => webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET_PER_TENANT: "1" })).toThrow(
      /FLEET_WEBHOOK_SECRET_PER_TENANT.*FLEET_WEBHOOK_SECRET/,
    );
  });
});

describe("FLEET_WEBHOOK_SECRET_PER_TENANT=1", () => {
  let fleet: FleetEnv;
  let sweeper: RunningSweeper | undefined;
  let base = "";
  const keys: Record<string, string> = {};
  const received: Record<"a" | "b", Delivery[]> = { a: [], b: [] };
  const servers: Server[] = [];
  const urls: Record<string, string> = {};

  beforeAll(async () => {
    fleet = await createFleetEnv("webhooktenantsecrets", {
      env: { FLEET_WEBHOOK_SECRET: OPERATOR, FLEET_WEBHOOK_SECRET_PER_TENANT: "1" },
    });
    const apiKeys = new ApiKeys(fleet.database);
    for (const tenant of ["a", "b"] as const) {
      keys[tenant] = (await apiKeys.create(`tenant-${tenant}`)).key;
      const { server, url } = await receiver(received[tenant]);
      servers.push(server);
      urls[tenant] = url;
    }
    base = (await fleet.startApi()).api.url;
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    for (const s of servers) s.close();
    await fleet?.close();
  });

  it("signs each tenant's delivery with its own secret, which only that tenant reads; another tenant's cannot verify nor forge it", async () => {
    const client = (tenant: string) => new FleetClient({ baseUrl: base, apiKey: keys[tenant] });
    const secrets = {
      a: (await client("a").webhookSecret()).secret,
      b: (await client("b").webhookSecret()).secret,
    };
    expect(secrets.a).toBe(tenantWebhookSecret(OPERATOR, "tenant-a"));
    expect(secrets.b).toBe(tenantWebhookSecret(OPERATOR, "tenant-b"));
    const ids = {
      a: (await client("a").createBatch([{ agent }], { webhook: { url: urls.a! } })).id,
      b: (await client("b").createBatch([{ agent }], { webhook: { url: urls.b! } })).id,
    };
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    await waitFor(() => received.a.length > 0 && received.b.length > 0, 30_000, "both deliveries");
    const [a, b] = [received.a[0]!, received.b[0]!];
    expect(JSON.parse(a.body).id).toBe(ids.a);
    expect(JSON.parse(b.body).id).toBe(ids.b);
    // Each receiver verifies its own tenant's delivery with its own secret…
    expect(verifyWebhookSignature(secrets.a, a.body, a.signature)).toBe(true);
    expect(verifyWebhookSignature(secrets.b, b.body, b.signature)).toBe(true);
    // …and not another tenant's, nor with the operator's secret (no tenant holds it now).
    expect(verifyWebhookSignature(secrets.a, b.body, b.signature)).toBe(false);
    expect(verifyWebhookSignature(secrets.b, a.body, a.signature)).toBe(false);
    expect(verifyWebhookSignature(OPERATOR, a.body, a.signature)).toBe(false);
    // What tenant A can sign with all it holds, B's receiver refuses: A cannot forge B's delivery.
    const t = Math.floor(Date.now() / 1000);
    const forged = JSON.stringify({ ...JSON.parse(b.body), status: "cancelled" });
    expect(verifyWebhookSignature(secrets.b, forged, signWebhook(secrets.a, forged, t))).toBe(false);
    expect(verifyWebhookSignature(secrets.b, forged, signWebhook(secrets.b, forged, t))).toBe(true);
  }, 60_000);

  it("`fleet webhook-secret` prints the caller's own secret, with its own key", async () => {
    for (const tenant of ["a", "b"]) {
      let out = "";
      const io = {
        stdout: {
          write: (s: string) => {
            out += s;
            return true;
          },
        } as unknown as NodeJS.WritableStream,
        stderr: process.stderr,
      };
      expect(await webhookSecretCommand({ api: base, apiKey: keys[tenant]!, io })).toBe(0);
      expect(JSON.parse(out)).toEqual({ secret: tenantWebhookSecret(OPERATOR, `tenant-${tenant}`) });
    }
  });
});

describe("with the option off (the default)", () => {
  let fleet: FleetEnv;
  let sweeper: RunningSweeper | undefined;
  let server: Server | undefined;
  const received: Delivery[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("webhooktenantsecretsoff", { env: { FLEET_WEBHOOK_SECRET: OPERATOR } });
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    server?.close();
    await fleet?.close();
  });

  it("signs with FLEET_WEBHOOK_SECRET exactly as before, and reveals no secret through the API", async () => {
    const { client, api } = await fleet.startApi();
    let url: string;
    ({ server, url } = await receiver(received));
    await client.createBatch([{ agent }], { webhook: { url } });
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    await waitFor(() => received.length > 0, 30_000, "the delivery");
    const { body, signature } = received[0]!;
    // The header as written before the option existed: t=<unix>,v1=<hex HMAC of "t.body">.
    const t = /^t=(\d+),/.exec(signature)![1]!;
    expect(signature).toBe(
      `t=${t},v1=${createHmac("sha256", OPERATOR).update(`${t}.${body}`).digest("hex")}`,
    );
    const answer = await fetch(`${api.url}/v1/webhook-secret`);
    expect(answer.status).toBe(404);
    expect(await answer.text()).not.toContain(OPERATOR);
  }, 60_000);
});
