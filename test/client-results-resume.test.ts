/**
 * `batchResults()` across a connection that breaks part-way (the API restarted, a proxy cut
 * it): the client goes on after the last session it read (`GET …/results?after=SESSION_ID`),
 * so every line comes once, in order. Before, the iteration rejected with a FleetNetworkError
 * after some lines, and the caller could only read all of them again. Against an API of the
 * last release, which ignores `after`, the lines read before are passed over.
 */
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BatchResult, FleetApiError, FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };

describe("batchResults() across broken connections", () => {
  let fleet: FleetEnv;
  let proxy: Server;
  let direct: FleetClient;
  let client: FleetClient;
  let batchId: string;
  let apiUrl: string;
  /** Each answer of the results is cut after this many bytes (0: not cut)… */
  let cutAfter = 0;
  /** …this many times. */
  let cuts = 0;
  /** The proxy drops `?after=` (an API of the last release ignores it). */
  let dropAfter = false;
  const asked: string[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("client-results-resume");
    const started = await fleet.startApi();
    direct = started.client;
    apiUrl = started.api.url;
    const api = new URL(apiUrl);
    proxy = createServer((incoming, outgoing) => {
      const path = dropAfter ? (incoming.url ?? "").replace(/\?after=.*$/, "") : incoming.url;
      asked.push(incoming.url ?? "");
      const forward = request(
        { host: api.hostname, port: api.port, path, method: incoming.method, headers: incoming.headers },
        (answer) => {
          outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
          if (!cutAfter || cuts <= 0 || !incoming.url?.includes("/results"))
            return void answer.pipe(outgoing);
          cuts--;
          let sent = 0;
          answer.on("data", (chunk: Buffer) => {
            if (sent >= cutAfter) return;
            if (sent + chunk.length >= cutAfter) {
              answer.destroy();
              outgoing.write(chunk.subarray(0, cutAfter - sent), () => outgoing.socket?.destroy());
              sent = cutAfter;
              return;
            }
            sent += chunk.length;
            outgoing.write(chunk);
          });
          answer.on("end", () => outgoing.end());
        },
      );
      incoming.pipe(forward);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    client = new FleetClient({ baseUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}` });
    // 1,000 sessions without input: each has a results line at once (two pages of the API's).
    const created = await direct.createBatch(
      Array.from({ length: 1_000 }, (_, i) => ({ agent: AGENT, customId: `c${i}` })),
    );
    batchId = created.id;
  }, 60_000);
  afterAll(async () => {
    await new Promise((resolve) => proxy?.close(resolve));
    await fleet?.close();
  });

  const readAll = async (from: FleetClient) => {
    const lines: BatchResult[] = [];
    for await (const line of from.batchResults(batchId)) lines.push(line);
    return lines;
  };

  it("every line once, in order, when each answer is cut part-way", async () => {
    const whole = await readAll(direct);
    expect(whole).toHaveLength(1_000);
    for (const drop of [false, true]) {
      dropAfter = drop;
      // A cut in the middle of a line, about 200 lines into each answer; an API that ignores
      // `after` starts again at the first line, so it is cut once only.
      cutAfter = 40_000;
      cuts = drop ? 1 : 100;
      asked.length = 0;
      const lines = await readAll(client);
      expect(lines.map((l) => l.sessionId)).toEqual(whole.map((l) => l.sessionId));
      expect(lines).toEqual(whole);
      expect(asked.length).toBeGreaterThan(drop ? 1 : 3);
      expect(asked.slice(1).every((url) => url.includes("/results?after="))).toBe(true);
    }
    cutAfter = 0;
    dropAfter = false;
  });

  it("after reads 400 for a malformed value, and a cut before the first line is said", async () => {
    const error = await fetch(`${apiUrl}/v1/batches/${batchId}/results?after=a&after=b`);
    expect(error.status).toBe(400);
    cutAfter = 5;
    cuts = 1;
    const failed = await readAll(client).catch((e: unknown) => e);
    cutAfter = 0;
    expect(failed).toMatchObject({ name: "FleetNetworkError" });
    expect(failed).not.toBeInstanceOf(FleetApiError);
  });
});
