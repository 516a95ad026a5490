/**
 * The API's memory while it streams the results of a batch of 5,000 sessions whose outputs
 * are 10 KB each (50 MB in all), to a reader that takes them slowly: a real `fleet api`
 * process, its resident set read from /proc before and during the read.
 */
import { readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { type ApiProcess, spawnApi } from "./support/api-process.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const PARTS = 5;
const PART = 1_000;
const OUTPUT = 10_000;

async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
}

describe("streaming 5,000 results of 10 KB", () => {
  let fleet: FleetEnv;
  let api: ApiProcess;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-results-rss");
    api = await spawnApi(fleet);
  }, 120_000);
  afterAll(async () => {
    if (api && !api.signalled()) api.signal();
    await api?.exited;
    await fleet?.close();
  });

  it("keeps the API's resident set bounded", async () => {
    const client = new FleetClient({ baseUrl: api.url });
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "unused" }] } };
    const session = (i: number) => ({
      agent,
      customId: `r-${i}`,
      messages: [
        { role: "user" as const, content: `q ${i}` },
        { role: "assistant" as const, content: `${i} `.padEnd(OUTPUT, "x"), stopReason: "end_turn" as const },
      ],
    });
    const created = await client.createBatch(
      Array.from({ length: PART }, (_, k) => session(k)),
      { open: true },
    );
    for (let p = 1; p < PARTS; p++)
      await client.appendToBatch(
        created.id,
        Array.from({ length: PART }, (_, k) => session(p * PART + k)),
        { close: p === PARTS - 1 },
      );
    const pid = api.child.pid!;
    const before = await rssMb(pid);
    let peak = before;
    let n = 0;
    let bytes = 0;
    for await (const r of client.batchResults(created.id)) {
      n++;
      bytes += r.output?.length ?? 0;
      if (n % 100 === 0) {
        peak = Math.max(peak, await rssMb(pid));
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
    expect(n).toBe(PARTS * PART);
    expect(bytes).toBe(PARTS * PART * OUTPUT);
    console.log(
      `API RSS ${before.toFixed(0)} → peak ${peak.toFixed(0)} MB streaming ${(bytes / 1e6).toFixed(0)} MB`,
    );
    expect(peak - before).toBeLessThan(60);
  }, 120_000);
});
