/**
 * Why a webhook's delivery failed (`webhook.lastError` in GET /v1/batches/:id, additive):
 * before, a webhook given up showed only `failedAt`, and the reason (the receiver's status,
 * no answer in time, a refused address, its sweepers' deaths) was in a sweeper's log at best.
 * Now each failed attempt stores its reason (one line, at most WEBHOOK_ERROR_MAX characters,
 * no response body), the give-up says why it gave up, and the delivered body is unchanged.
 */
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { openWebhookQueue, QUEUES } from "../src/shared/queues.js";
import { attemptErrorText, WEBHOOK_ERROR_MAX, webhookErrorText } from "../src/shared/webhook-errors.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

describe("a failed attempt's reason, as stored (pure)", () => {
  it("is one bounded line naming the attempt, with the give-up's reason first", () => {
    expect(webhookErrorText({ attempt: 3, message: "the receiver answered HTTP 500" })).toBe(
      "attempt 3: the receiver answered HTTP 500",
    );
    expect(
      webhookErrorText({
        attempt: 40,
        message: "the receiver answered HTTP 503",
        givenUp: "its 40 attempts are spent",
      }),
    ).toBe("given up: its 40 attempts are spent; attempt 40: the receiver answered HTTP 503");
    const long = webhookErrorText({ attempt: 1, message: `x\n\ty${"z".repeat(5_000)}` });
    expect(long.length).toBeLessThanOrEqual(WEBHOOK_ERROR_MAX);
    expect(long).toMatch(/^attempt 1: x yz+…$/);
    // A secret it is given never appears, even if a message quoted it.
    expect(
      webhookErrorText({ attempt: 1, message: "signed with whsec-abcdefgh" }, ["whsec-abcdefgh"]),
    ).not.toMatch(/whsec-abcdefgh/);
  });
});

describe("an attempt's error as its tenant reads it (pure)", () => {
  it("names the URL's host where the error named the address it resolved to", () => {
    const refused = (address: string, port: number) =>
      Object.assign(new Error(`connect ECONNREFUSED ${address}:${port}`), { address, port });
    expect(attemptErrorText(refused("10.3.4.5", 8080), "http://hooks.corp.internal:8080/x")).toBe(
      "connect ECONNREFUSED hooks.corp.internal:8080",
    );
    // Node's attempt at each address of the name: an AggregateError with no message of its own.
    const both = new AggregateError([refused("::1", 443), refused("10.3.4.5", 443)], "");
    expect(attemptErrorText(both, "https://hooks.corp.internal/")).toBe(
      "connect ECONNREFUSED hooks.corp.internal:443; connect ECONNREFUSED hooks.corp.internal:443",
    );
    // Errors with no address, and an address the tenant wrote itself, are as they were.
    expect(attemptErrorText(new Error("no answer within 10000 ms"), "http://a.example/")).toBe(
      "no answer within 10000 ms",
    );
    expect(attemptErrorText(refused("127.0.0.1", 1), "http://127.0.0.1:1/")).toBe(
      "connect ECONNREFUSED 127.0.0.1:1",
    );
  });
});

describe("webhook.lastError", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper | undefined;
  let failing: Server;
  let silent: Server;
  let failingUrl = "";
  const bodies: string[] = [];
  const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

  const listen = async (server: Server) => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
  };

  beforeAll(async () => {
    fleet = await createFleetEnv("webhooklasterror", {
      env: { FLEET_WEBHOOK_SECRET: "whsec-last-error", FLEET_WEBHOOK_RETRY_MS: "100" },
    });
    ({ client } = await fleet.startApi());
    failing = createServer((req, res) => {
      let body = "";
      req.on("data", (d) => {
        body += d;
      });
      req.on("end", () => {
        bodies.push(body);
        res.writeHead(500, { "content-type": "text/plain" }).end("secret stack trace of the receiver");
      });
    });
    // Takes the request and never answers: each attempt runs into its deadline.
    silent = createServer(() => {});
    failingUrl = await listen(failing);
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    for (const s of [failing, silent]) {
      s?.closeAllConnections();
      s?.close();
    }
    await fleet?.close();
  });

  /** A batch that has ended, whose delivery job is queued by hand with `attempts`. */
  async function endedBatch(url: string, attempts: number): Promise<string> {
    const batch = await client.createBatch([{ agent }], { webhook: { url } });
    await client.getBatch(batch.id); // records its end
    const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
    try {
      await queue.add(
        QUEUES.webhooks.job,
        { batchId: batch.id },
        {
          jobId: QUEUES.webhooks.jobId({ batchId: batch.id }),
          attempts,
          backoff: { type: "fixed", delay: 100 },
        },
      );
    } finally {
      await queue.close();
    }
    return batch.id;
  }

  it("a receiver answering 500: each attempt's status, then the give-up; never its body; the body delivered has no lastError", async () => {
    const url = failingUrl;
    const batchId = await endedBatch(url, 2);
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    await waitFor(
      async () => (await client.getBatch(batchId)).webhook?.failedAt !== undefined,
      30_000,
      "the webhook given up",
    );
    const { webhook } = await client.getBatch(batchId);
    expect(webhook).toEqual({
      url,
      deliveredAt: null,
      failedAt: expect.any(String),
      lastError: "given up: its 2 attempts are spent; attempt 2: the receiver answered HTTP 500",
    });
    expect(webhook!.lastError).not.toMatch(/stack trace/);
    // What the receiver got is the batch as before: no lastError of an earlier attempt in it.
    expect(bodies).toHaveLength(2);
    expect(bodies[1]).toBe(bodies[0]);
    expect(JSON.parse(bodies[1]!).webhook).toEqual({ url, deliveredAt: null });
  }, 60_000);

  it("while it is still tried: the last attempt's reason, with no failedAt", async () => {
    const url = failingUrl;
    const batch = await client.createBatch([{ agent }], { webhook: { url } });
    sweeper ??= await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    await waitFor(
      async () => (await client.getBatch(batch.id)).webhook?.lastError !== undefined,
      30_000,
      "an attempt's failure stored",
    );
    const { webhook } = await client.getBatch(batch.id);
    expect(webhook?.failedAt).toBeUndefined();
    expect(webhook?.lastError).toMatch(/^attempt \d+: the receiver answered HTTP 500$/);
  }, 60_000);

  it("a refused connection names the URL's host as the tenant wrote it, not the address it resolved to", async () => {
    // A port nothing listens on: one a server had, closed again.
    const closed = createServer();
    const port = Number(new URL(await listen(closed)).port);
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const url = `http://localhost:${port}/hook`;
    const batchId = await endedBatch(url, 1);
    sweeper ??= await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    await waitFor(
      async () => (await client.getBatch(batchId)).webhook?.failedAt !== undefined,
      30_000,
      "the webhook given up",
    );
    const { lastError } = (await client.getBatch(batchId)).webhook!;
    // Before: "… attempt 1: connect ECONNREFUSED 127.0.0.1:PORT": where the operator's resolver
    // sends the tenant's host name (an internal address, for a name of the operator's network).
    expect(lastError).toBe(
      `given up: its 1 attempts are spent; attempt 1: connect ECONNREFUSED localhost:${port}`,
    );
  }, 60_000);

  it("a receiver that never answers: 'no answer within' its deadline", async () => {
    const url = await listen(silent);
    const batchId = await endedBatch(url, 1);
    sweeper ??= await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    await waitFor(
      async () => (await client.getBatch(batchId)).webhook?.failedAt !== undefined,
      40_000,
      "the webhook given up",
    );
    expect((await client.getBatch(batchId)).webhook?.lastError).toBe(
      "given up: its 1 attempts are spent; attempt 1: no answer within 10000 ms",
    );
  }, 60_000);
});
