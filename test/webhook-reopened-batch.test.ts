/**
 * A batch's webhook reports its end. A batch that ended while its receiver was down, and then
 * ran again (a new message to one of its sessions, a batch resume) before a retry got through,
 * used to have that retry send the batch as it then was — `status: "running"`, no `endedAt` —
 * and no webhook followed its next end (a webhook is owed once). The delivery now waits while
 * the batch is running, without spending an attempt, and sends the batch once it has ended.
 */
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { openWebhookQueue, QUEUES } from "../src/shared/queues.js";
import { verifyWebhookSignature } from "../src/shared/webhook-signature.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const SECRET = "whsec-reopened-test";

describe("the webhook of a batch that runs again before its delivery got through", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper | undefined;
  let server: Server;
  let url: string;
  let accept = false;
  const received: { body: string; signature: string; answered: number }[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("webhookreopen", {
      env: { FLEET_WEBHOOK_SECRET: SECRET, FLEET_WEBHOOK_RETRY_MS: "100" },
    });
    ({ client } = await fleet.startApi());
    server = createServer((req, res) => {
      let body = "";
      req.on("data", (d) => {
        body += d;
      });
      req.on("end", () => {
        const answered = accept ? 204 : 500;
        received.push({ body, signature: String(req.headers["fleet-signature"]), answered });
        res.writeHead(answered).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`;
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    server?.close();
    await fleet?.close();
  });

  it("waits while the batch runs, spends no attempt, and sends it once it has ended again", async () => {
    // No input: the batch has ended as soon as it exists; its receiver answers 500.
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
    const batch = await client.createBatch([{ agent, customId: "a" }], { webhook: { url } });
    const sessionId = batch.sessions[0]!.id;
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    await waitFor(() => received.length >= 2, 20_000, "two failed attempts");

    // The batch runs again: a message to its session queues a run (no worker takes it here).
    await client.send(sessionId, "one more thing");
    expect((await client.getBatch(batch.id)).status).toBe("running");
    accept = true;
    const queue = openWebhookQueue(fleet.redis, fleet.config.prefix);
    onTestFinished(() => queue.close());
    const job = async () => (await queue.getJob(QUEUES.webhooks.jobId({ batchId: batch.id })))!;
    const before = await job();
    const [processedBefore, attemptsBefore] = [before.processedOn ?? 0, before.attemptsMade];
    // The delivery is taken up again at least twice while the batch runs…
    let seen = processedBefore;
    let takenAgain = 0;
    await waitFor(
      async () => {
        const now = (await job()).processedOn ?? 0;
        if (now > seen) [seen, takenAgain] = [now, takenAgain + 1];
        // (Or it was sent: as it was before, the first retry then.)
        return takenAgain >= 2 || received.some((r) => r.answered === 204);
      },
      20_000,
      "the delivery taken up again",
    );
    // …and sends nothing, spending no attempt. Before, the first of them sent status "running".
    const sentWhileRunning = received.filter((r) => JSON.parse(r.body).status === "running");
    expect(sentWhileRunning).toEqual([]);
    expect((await job()).attemptsMade).toBe(attemptsBefore);
    expect((await client.getBatch(batch.id)).webhook?.deliveredAt ?? null).toBeNull();

    // Its session cancelled, the batch has ended again: the webhook goes out, once, saying so.
    await client.cancelSession(sessionId);
    await waitFor(() => received.some((r) => r.answered === 204), 20_000, "the delivery");
    const delivered = received.filter((r) => r.answered === 204);
    expect(delivered).toHaveLength(1);
    const body = JSON.parse(delivered[0]!.body);
    expect(body.status).not.toBe("running");
    expect(body.endedAt).toEqual(expect.any(String));
    expect(verifyWebhookSignature(SECRET, delivered[0]!.body, delivered[0]!.signature)).toBe(true);
    await waitFor(
      async () => (await client.getBatch(batch.id)).webhook?.deliveredAt != null,
      5_000,
      "the delivery recorded",
    );
    // The wait while it ran is kept on the job, not counted in its day of retries
    // (webhook-backoff.ts, test/webhook-held-span.test.ts): ended, none goes on.
    const { data } = await job();
    expect(data.heldMs).toBeGreaterThan(0);
    expect(data.heldSince).toBeUndefined();
  }, 60_000);
});
