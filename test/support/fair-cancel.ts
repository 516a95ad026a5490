/**
 * The fair-dispatch case of a tenant that cancelled its batch: with no worker taking anything,
 * tenants `a` and `b` each queue 30 runs, `a` cancels its batch and queues one more. What the
 * tests check is where that one run stands among the waiting (prioritized) jobs.
 */
import type { Queue } from "bullmq";
import type { FleetClient } from "../../src/producer/client.js";

export async function rankAfterCancel(
  a: FleetClient,
  b: FleetClient,
  queue: Queue,
  agent: Parameters<FleetClient["createSession"]>[0]["agent"],
): Promise<{ waiting: number; rank: number }> {
  const aBatch = await a.createBatch(Array.from({ length: 30 }, (_, i) => ({ agent, input: `a ${i}` })));
  await b.createBatch(Array.from({ length: 30 }, (_, i) => ({ agent, input: `b ${i}` })));
  await a.cancelBatch(aBatch.id);
  const { sessions } = await a.createBatch([{ agent, input: "a again" }]);
  const waiting = await queue.getJobs(["prioritized"], 0, -1, true);
  return { waiting: waiting.length, rank: waiting.findIndex((job) => job.data.runId === sessions[0]!.runId) };
}
