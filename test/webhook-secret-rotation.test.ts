/**
 * Rotating one tenant's own webhook secret (FLEET_WEBHOOK_SECRET_PER_TENANT). Each tenant's
 * secret was derived from FLEET_WEBHOOK_SECRET and its name alone, so a tenant whose secret
 * leaked could not get a new one without the operator rotating every tenant's. Now
 * `POST /v1/webhook-secret/rotate` (`fleet webhook-secret --rotate`) moves that tenant alone
 * to its next generation, and for FLEET_WEBHOOK_SECRET_GRACE_MS after it deliveries carry a
 * `v1=` entry under each of the new and the previous secret: a receiver still holding the old
 * one, or already the new one, takes every delivery. A replay with the Idempotency-Key rotates
 * nothing.
 */
import { createHmac } from "node:crypto";
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { webhookSecretCommand } from "../src/commands/webhook-secret.js";
import { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { signingSecrets, tenantWebhookSecret } from "../src/shared/webhook-secrets.js";
import { signWebhook, verifyWebhookSignature } from "../src/shared/webhook-signature.js";
import { webhookSettingsFromEnv } from "../src/shared/webhooks.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const OPERATOR = "whsec-operator-secret-rotation";
const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
type Delivery = { body: string; signature: string; status: number };

/** A receiver that verifies with the secret it holds now (`held()`): 204, or 401 when it does not verify. */
async function receiver(held: () => string, into: Delivery[]): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => {
      body += d;
    });
    req.on("end", () => {
      const signature = String(req.headers["fleet-signature"]);
      const status = verifyWebhookSignature(held(), body, signature) ? 204 : 401;
      into.push({ body, signature, status });
      res.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}/` };
}

const v1Entries = (header: string) => header.split(",").filter((p) => p.startsWith("v1=")).length;

/** What a command prints, parsed. */
async function printed(
  run: (io: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream }) => Promise<number>,
) {
  let out = "";
  const write = (s: string) => {
    out += s;
    return true;
  };
  const stdout = { write } as unknown as NodeJS.WritableStream;
  expect(await run({ stdout, stderr: process.stderr })).toBe(0);
  return JSON.parse(out);
}

describe("generations and signatures (pure)", () => {
  it("generation 0 is derived as before; each later one differs; both sign during the grace period", () => {
    const before = `whsec_${createHmac("sha256", OPERATOR).update("agent-fleet webhook signing secret of tenant t").digest("hex")}`;
    expect(tenantWebhookSecret(OPERATOR, "t")).toBe(before);
    expect(tenantWebhookSecret(OPERATOR, "t", 0)).toBe(before);
    const gens = [0, 1, 2, 11].map((g) => tenantWebhookSecret(OPERATOR, "t", g));
    expect(new Set(gens).size).toBe(4);
    // A generation and a name never sign what another generation and name do.
    expect(tenantWebhookSecret(OPERATOR, "1, of tenant t", 1)).not.toBe(
      tenantWebhookSecret(OPERATOR, "t", 11),
    );
    const on = webhookSettingsFromEnv({
      FLEET_WEBHOOK_SECRET: OPERATOR,
      FLEET_WEBHOOK_SECRET_PER_TENANT: "1",
    });
    expect(on.rotationGraceMs).toBe(86_400_000);
    expect(signingSecrets(on, "t", { generation: 2, previousValid: true })).toEqual([gens[2], gens[1]]);
    expect(signingSecrets(on, "t", { generation: 2, previousValid: false })).toEqual([gens[2]]);
    expect(signingSecrets(on, "t")).toEqual([before]);
    // Without per-tenant secrets the operator's signs alone, whatever a tenant's generation.
    const off = webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET: OPERATOR });
    expect(signingSecrets(off, "t", { generation: 3, previousValid: true })).toEqual([OPERATOR]);
    expect(webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET_GRACE_MS: "0" }).rotationGraceMs).toBe(0);
    expect(() => webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET_GRACE_MS: "-1" })).toThrow(
      /FLEET_WEBHOOK_SECRET_GRACE_MS/,
    );
  });

  it("a header with a v1= entry per secret verifies under either; nothing else does", () => {
    const body = '{"id":"b"}';
    const [a, b] = ["whsec_new", "whsec_old"];
    const header = signWebhook([a, b], body, 1_700_000_000);
    expect(v1Entries(header)).toBe(2);
    expect(header.startsWith(`${signWebhook(a, body, 1_700_000_000)},v1=`)).toBe(true);
    expect(verifyWebhookSignature(a, body, header, 300, 1_700_000_100)).toBe(true);
    expect(verifyWebhookSignature(b, body, header, 300, 1_700_000_100)).toBe(true);
    expect(verifyWebhookSignature("whsec_other", body, header, 300, 1_700_000_100)).toBe(false);
    expect(verifyWebhookSignature(a, `${body} `, header, 300, 1_700_000_100)).toBe(false);
    // One malformed entry, or a second timestamp, and the header is not the fleet's.
    expect(verifyWebhookSignature(a, body, `${header},v1=zz`, 300, 1_700_000_100)).toBe(false);
    expect(verifyWebhookSignature(a, body, `${header},t=1700000000`, 300, 1_700_000_100)).toBe(false);
  });
});

describe("POST /v1/webhook-secret/rotate, with FLEET_WEBHOOK_SECRET_PER_TENANT=1", () => {
  let fleet: FleetEnv;
  let sweeper: RunningSweeper | undefined;
  let base = "";
  const keys: Record<string, string> = {};
  const held: Record<string, string> = {};
  const received: Record<"a" | "b", Delivery[]> = { a: [], b: [] };
  const servers: Server[] = [];
  const urls: Record<string, string> = {};
  const client = (tenant: string) => new FleetClient({ baseUrl: base, apiKey: keys[tenant] });
  const delivered = async (tenant: "a" | "b", count: number) => {
    await client(tenant).createBatch([{ agent }], { webhook: { url: urls[tenant]! } });
    await waitFor(() => received[tenant].length >= count, 30_000, `tenant ${tenant}'s delivery ${count}`);
    return received[tenant][count - 1]!;
  };

  beforeAll(async () => {
    fleet = await createFleetEnv("webhooksecretrotation", {
      env: { FLEET_WEBHOOK_SECRET: OPERATOR, FLEET_WEBHOOK_SECRET_PER_TENANT: "1" },
    });
    const apiKeys = new ApiKeys(fleet.database);
    for (const tenant of ["a", "b"] as const) {
      keys[tenant] = (await apiKeys.create(`tenant-${tenant}`)).key;
      const { server, url } = await receiver(() => held[tenant]!, received[tenant]);
      servers.push(server);
      urls[tenant] = url;
    }
    base = (await fleet.startApi()).api.url;
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    for (const s of servers) s.close();
    await fleet?.close();
  });

  it("rotates the caller's secret alone, once per Idempotency-Key; until the grace period ends deliveries verify under the old and the new", async () => {
    const old = {
      a: (await client("a").webhookSecret()).secret,
      b: (await client("b").webhookSecret()).secret,
    };
    held.a = old.a;
    held.b = old.b;
    const started = Date.now();
    const rotated = await client("a").rotateWebhookSecret({ idempotencyKey: "rotate-1" });
    expect(rotated.generation).toBe(1);
    const until = Date.parse(rotated.previousValidUntil);
    expect(until - started).toBeGreaterThan(86_400_000 - 60_000);
    // A replay answers the first rotation and rotates nothing.
    expect(await client("a").rotateWebhookSecret({ idempotencyKey: "rotate-1" })).toEqual(rotated);
    const [row] = await fleet.database.sql<{ tenant: string; generation: number }[]>`
      select tenant, generation from webhook_secret_generations`;
    expect(row).toEqual({ tenant: "tenant-a", generation: 1 });
    const now = {
      a: (await client("a").webhookSecret()).secret,
      b: (await client("b").webhookSecret()).secret,
    };
    expect(now.a).toBe(tenantWebhookSecret(OPERATOR, "tenant-a", 1));
    expect(now.a).not.toBe(old.a);
    expect(now.b).toBe(old.b);

    // a's receiver still holds the old secret: it takes the delivery; so does one holding the new.
    const first = await delivered("a", 1);
    expect(first.status).toBe(204);
    expect(v1Entries(first.signature)).toBe(2);
    expect(verifyWebhookSignature(now.a, first.body, first.signature)).toBe(true);
    expect(verifyWebhookSignature(old.a, first.body, first.signature)).toBe(true);
    // b rotated nothing: one entry, under its one secret.
    const other = await delivered("b", 1);
    expect(other.status).toBe(204);
    expect(v1Entries(other.signature)).toBe(1);
    expect(verifyWebhookSignature(old.b, other.body, other.signature)).toBe(true);

    // The receiver switches at its own pace: holding the new secret, it takes the next one too.
    held.a = now.a;
    expect((await delivered("a", 2)).status).toBe(204);
    expect(received.a.every((d) => d.status === 204)).toBe(true);

    // The grace period over (its end moved to the past, as a day's wait would): the new secret alone.
    await fleet.database.sql`update webhook_secret_generations
      set previous_valid_until = now() - interval '1 second' where tenant = 'tenant-a'`;
    const after = await delivered("a", 3);
    expect(after.status).toBe(204);
    expect(v1Entries(after.signature)).toBe(1);
    expect(verifyWebhookSignature(old.a, after.body, after.signature)).toBe(false);
    expect(verifyWebhookSignature(now.a, after.body, after.signature)).toBe(true);
  }, 90_000);

  it("`fleet webhook-secret --rotate` prints the new secret; run again with its --idempotency-key, it rotates nothing", async () => {
    const run = () =>
      printed((io) =>
        webhookSecretCommand({ api: base, apiKey: keys.b!, io, rotate: true, idempotencyKey: "cli-rotate" }),
      );
    const first = await run();
    expect(first.secret).toBe(tenantWebhookSecret(OPERATOR, "tenant-b", 1));
    expect(Date.parse(first.previousValidUntil)).toBeGreaterThan(Date.now());
    expect(await run()).toEqual(first);
    expect(await printed((io) => webhookSecretCommand({ api: base, apiKey: keys.b!, io }))).toEqual({
      secret: first.secret,
    });
  });

  it("takes no body or `{}`; a body with a field it does not know is a 400 naming it, and rotates nothing", async () => {
    const generation = async () => {
      const [row] = await fleet.database.sql<{ generation: number }[]>`
        select generation from webhook_secret_generations where tenant = 'tenant-b'`;
      return row?.generation ?? 0;
    };
    const rotate = (body: string) =>
      fetch(`${base}/v1/webhook-secret/rotate`, {
        method: "POST",
        headers: { authorization: `Bearer ${keys.b}`, "content-type": "application/json" },
        body,
      });
    const before = await generation();
    // Before, any JSON object was accepted and ignored: this rotated (200).
    const refused = await rotate('{"tenant":"tenant-a"}');
    expect(refused.status).toBe(400);
    expect(await refused.json()).toEqual({
      error: { code: "invalid_request", field: "tenant", message: "tenant: unknown field" },
    });
    expect(await generation()).toBe(before);
    const notObject = await rotate("[]");
    expect(notObject.status).toBe(400);
    expect(await generation()).toBe(before);
    expect((await rotate("{}")).status).toBe(200);
    expect(await generation()).toBe(before + 1);
  });
});

describe("with per-tenant secrets off (the default)", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("webhooksecretrotationoff", { env: { FLEET_WEBHOOK_SECRET: OPERATOR } });
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
  });

  it("rotates nothing: 404, as the GET, and the fleet's secret is never served", async () => {
    const { api } = await fleet.startApi();
    const answer = await fetch(`${api.url}/v1/webhook-secret/rotate`, { method: "POST" });
    expect(answer.status).toBe(404);
    expect(await answer.text()).not.toContain(OPERATOR);
    const [row] = await fleet.database.sql<
      { n: number }[]
    >`select count(*)::int as n from webhook_secret_generations`;
    expect(row!.n).toBe(0);
  }, 60_000);

  it("`fleet webhook-secret` says in a sentence that the fleet's secret signs every webhook, exit 2", async () => {
    const { api } = await fleet.startApi();
    let err = "";
    const write = (s: string) => {
      err += s;
      return true;
    };
    const stream = { write } as unknown as NodeJS.WritableStream;
    for (const rotate of [false, true]) {
      err = "";
      expect(
        await webhookSecretCommand({ api: api.url, io: { stdout: stream, stderr: stream }, rotate }),
      ).toBe(2);
      // It read "a webhook secret of this tenant's own (FLEET_WEBHOOK_SECRET_PER_TENANT is off:
      // ask the operator for the fleet's) not found".
      expect(err).toBe(
        "fleet webhook-secret: this fleet has no webhook secret per tenant (FLEET_WEBHOOK_SECRET_PER_TENANT is off): " +
          "every webhook is signed with the fleet's FLEET_WEBHOOK_SECRET, which the operator holds\n",
      );
    }
  }, 60_000);
});
