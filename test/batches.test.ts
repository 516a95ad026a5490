/**
 * Batches as a product (contracts §9), end to end: 1,000 scripted sessions (some inside
 * tools) with a worker SIGKILLed in the middle and a sweeper in-process. Counts move only
 * towards the end; results stream one line per session with its customId and output; the
 * signed webhook arrives once the last session ended and is retried after a 500. Also:
 * customId checks, list filters, appending to an open batch, and another tenant's 404.
 */
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetApiError, FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import type { BatchJson } from "../src/shared/store/batches.js";
import { verifyWebhookSignature } from "../src/shared/webhook-signature.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, readyInfo, waitFor } from "./support/fleet-env.js";

const SECRET = "whsec-test-batches";
const N = 1_000;

type Delivery = { at: number; status: number; body: string; headers: Record<string, unknown> };

function webhookReceiver(): Promise<{ server: Server; url: string; deliveries: Delivery[] }> {
  const deliveries: Delivery[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => {
      body += d;
    });
    req.on("end", () => {
      // The first delivery fails: the fleet must try again.
      const status = deliveries.length === 0 ? 500 : 200;
      deliveries.push({ at: Date.now(), status, body, headers: req.headers });
      res.writeHead(status).end();
    });
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const address = server.address() as { port: number };
      resolve({ server, url: `http://127.0.0.1:${address.port}/hook`, deliveries });
    }),
  );
}

const scripted = (i: number) =>
  i % 10 === 0
    ? {
        model: {
          provider: "scripted" as const,
          steps: [
            {
              toolCalls: [
                { id: "log", name: "append_file", arguments: { path: `b-${i}.txt`, line: "ran" } },
                { id: "nap", name: "sleep", arguments: { ms: 400 } },
              ],
            },
            { text: `done ${i}` },
          ],
        },
        tools: ["append_file", "sleep"],
      }
    : { model: { provider: "scripted" as const, steps: [{ text: `out ${i}` }] } };

describe("a batch of 1,000 sessions through a worker crash", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let base: string;
  let sweeper: RunningSweeper;
  let receiver: Awaited<ReturnType<typeof webhookReceiver>>;

  beforeAll(async () => {
    fleet = await createFleetEnv("batches", {
      env: { FLEET_WEBHOOK_SECRET: SECRET, FLEET_WEBHOOK_RETRY_MS: "300" },
    });
    let api: Awaited<ReturnType<FleetEnv["startApi"]>>["api"];
    ({ client, api } = await fleet.startApi());
    base = api.url;
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    receiver = await webhookReceiver();
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    receiver?.server.close();
    await fleet?.close();
  });

  it("counts move only towards the end, results hold every session, the webhook arrives signed and is retried", async () => {
    const env = { WORKER_CONCURRENCY: "16" };
    const [victim] = await Promise.all([fleet.spawnWorker(env), fleet.spawnWorker(env)]);
    const victimId = readyInfo(victim!).workerId;
    const started = Date.now();
    const created = await client.createBatch(
      Array.from({ length: N }, (_, i) => ({ agent: scripted(i), input: `go ${i}`, customId: `c-${i}` })),
      { webhook: { url: receiver.url } },
    );
    const submitMs = Date.now() - started;
    expect(created.sessions).toHaveLength(N);
    expect(created.sessions[7]!.customId).toBe("c-7");
    expect(created.webhook).toEqual({ url: receiver.url });

    // Kill one worker once it holds sessions inside a tool, about a third of the way in.
    const { sql } = fleet.database;
    await waitFor(
      async () => {
        const [row] = await sql<{ n: number }[]>`
          select count(*)::int as n from runs r join messages m on m.session_id = r.session_id
           where r.status = 'running' and r.worker_id = ${victimId} and m.tool_call_id = 'log'`;
        return row!.n > 0;
      },
      30_000,
      "the victim inside a tool",
    );
    victim!.child.kill("SIGKILL");
    await victim!.exited;

    const seen: BatchJson[] = [];
    await waitFor(
      async () => {
        const batch = await client.getBatch(created.id);
        seen.push(batch);
        return batch.status !== "running";
      },
      120_000,
      "the batch to end",
    );
    const elapsedMs = Date.now() - started;
    const last = seen.at(-1)!;
    expect(last.status).toBe("ended");
    expect(last.counts.total).toBe(N);
    expect(last.counts.completed + last.counts.parked).toBe(N);
    expect(last.counts.queued + last.counts.running + last.counts.cancelled).toBe(0);
    expect(last.endedAt).toBeDefined();
    // Monotonic: terminal sessions never go back; every poll accounts for every session.
    let terminal = 0;
    for (const batch of seen) {
      const { total, queued, running, completed, parked, cancelled } = batch.counts;
      expect(queued + running + completed + parked + cancelled).toBe(total);
      expect(completed + parked + cancelled).toBeGreaterThanOrEqual(terminal);
      terminal = completed + parked + cancelled;
    }
    const resumed = await sql<{ n: number }[]>`select count(*)::int as n from runs where kind = 'resume'`;
    expect(resumed[0]!.n).toBeGreaterThan(0);

    // Results: one line per session, streamed, with the customId and the final answer.
    const response = await fetch(`${base}/v1/batches/${created.id}/results`);
    expect(response.headers.get("content-type")).toMatch(/^application\/x-ndjson/);
    const lines = (await response.text()).trim().split("\n");
    expect(lines).toHaveLength(N);
    const results = new Map<string, { output: string | null; status: string; usage: unknown }>();
    for await (const result of client.batchResults(created.id)) results.set(result.customId!, result);
    expect(results.size).toBe(N);
    for (let i = 0; i < N; i++) {
      const result = results.get(`c-${i}`)!;
      expect(result.status, `c-${i}`).toBe("completed");
      expect(result.output).toBe(i % 10 === 0 ? `done ${i}` : `out ${i}`);
      expect(result.usage).toMatchObject({
        inputTokens: expect.any(Number),
        outputTokens: expect.any(Number),
      });
    }

    // The webhook: a 500 first, then a retry that is delivered; both signed.
    await waitFor(() => receiver.deliveries.some((d) => d.status === 200), 30_000, "the webhook delivery");
    expect(receiver.deliveries[0]!.status).toBe(500);
    for (const delivery of receiver.deliveries) {
      const signature = String(delivery.headers["fleet-signature"]);
      expect(verifyWebhookSignature(SECRET, delivery.body, signature)).toBe(true);
      expect(verifyWebhookSignature("another secret", delivery.body, signature)).toBe(false);
      expect(delivery.headers["fleet-delivery-id"]).toBe(`webhook-${created.id}`);
      const body = JSON.parse(delivery.body) as BatchJson;
      expect(body).toMatchObject({ id: created.id, status: "ended" });
      expect(body.counts.completed + body.counts.parked).toBe(N);
      expect(new Date(body.endedAt!).getTime()).toBeLessThanOrEqual(delivery.at);
    }
    await waitFor(
      async () => (await client.getBatch(created.id)).webhook?.deliveredAt != null,
      5_000,
      "the delivery recorded",
    );
    console.log(
      `batch of ${N}: submitted in ${submitMs} ms, ended after ${elapsedMs} ms, ` +
        `${resumed[0]!.n} resumes, webhook after ${receiver.deliveries.length} attempts`,
    );
  }, 180_000);

  it("lists a batch's sessions by state, and refuses a repeated customId naming it", async () => {
    const created = await client.createBatch([
      { agent: scripted(1), customId: "x", messages: [{ role: "user", content: "hi" }] },
      { agent: scripted(2), customId: "y" },
    ]);
    const listed = await client.listSessions({ batch: created.id });
    expect(listed.sessions.map((s) => s.customId).sort()).toEqual(["x", "y"]);
    // Given no input, nothing runs them: they count as completed (and the batch as ended).
    expect((await client.listSessions({ batch: created.id, status: "completed" })).sessions).toHaveLength(2);
    expect((await client.listSessions({ batch: created.id, status: "running" })).sessions).toHaveLength(0);
    const error = await client
      .createBatch([
        { agent: scripted(1), customId: "a" },
        { agent: scripted(2), customId: "a" },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FleetApiError);
    expect((error as FleetApiError).status).toBe(400);
    expect((error as FleetApiError).field).toBe("sessions[1].customId");
    const badHook = await client
      .createBatch([{ agent: scripted(1) }], { webhook: { url: "file:///etc/passwd" } })
      .catch((e: unknown) => e);
    expect((badHook as FleetApiError).field).toBe("webhook.url");
  });

  it("an open batch takes more sessions and ends only once closed", async () => {
    const first = await client.createBatch([{ agent: scripted(1), input: "go", customId: "p1" }], {
      open: true,
    });
    await waitFor(
      async () => (await client.getBatch(first.id)).counts.completed === 1,
      15_000,
      "the first part done",
    );
    expect((await client.getBatch(first.id)).status).toBe("running");
    const dup = await client
      .appendToBatch(first.id, [{ agent: scripted(2), customId: "p1" }])
      .catch((e: unknown) => e);
    expect((dup as FleetApiError).field, String(dup)).toBe("sessions[0].customId");
    await client.appendToBatch(first.id, [{ agent: scripted(2), input: "go", customId: "p2" }], {
      close: true,
    });
    await waitFor(
      async () => (await client.getBatch(first.id)).status === "ended",
      15_000,
      "the batch to end",
    );
    expect((await client.getBatch(first.id)).counts).toMatchObject({ total: 2, completed: 2 });
    const closed = await client.appendToBatch(first.id, [{ agent: scripted(3) }]).catch((e: unknown) => e);
    expect((closed as FleetApiError).status).toBe(409);
    expect((closed as FleetApiError).reason).toBe("batch_closed");
  });

  it("another tenant's batch answers 404, like a missing one", async () => {
    const { ApiKeys } = await import("../src/shared/store/api-keys.js");
    const keys = new ApiKeys(fleet.database);
    const a = new FleetClient({ baseUrl: base, apiKey: (await keys.create("tenant-a")).key });
    const b = new FleetClient({ baseUrl: base, apiKey: (await keys.create("tenant-b")).key });
    const created = await a.createBatch([{ agent: scripted(1), customId: "only-a" }]);
    expect((await a.getBatch(created.id)).counts.total).toBe(1);
    for (const call of [
      () => b.getBatch(created.id),
      () => b.cancelBatch(created.id),
      () => b.appendToBatch(created.id, [{ agent: scripted(1) }]),
      async () => {
        for await (const _ of b.batchResults(created.id));
      },
      () => b.cancelSession(created.sessions[0]!.id),
    ]) {
      const error = await call().catch((e: unknown) => e);
      expect((error as FleetApiError).status).toBe(404);
    }
    expect((await b.listSessions({ batch: created.id })).sessions).toEqual([]);
  });
});
