/**
 * `fleet batch submit --wait` (batch.ts): the batch polled until it has ended, through an API
 * that may be away meanwhile.
 */
import type { BatchJson, FleetApiError, FleetClient } from "../producer/client.js";
import { write } from "./api-client.js";
import { type BatchIo, progress } from "./batch-progress.js";
import { unreachableOr5xx } from "./batch-send.js";

/** How long `--wait` goes on asking an API that does not answer (a restart, a deploy). */
const WAIT_OUTAGE_MS = 10 * 60_000;

/**
 * The batch, asked again while the API does not answer or answers 5xx/429: the batch runs
 * on without the API, so a restart of it must not end a wait of hours. One line on stderr
 * when the API goes and one when it is back; after WAIT_OUTAGE_MS the error ends the wait.
 */
async function getBatchPatiently(
  client: FleetClient,
  id: string,
  io: BatchIo,
  outageMs = WAIT_OUTAGE_MS,
): Promise<BatchJson> {
  let since: number | undefined;
  for (let delay = 250; ; delay = Math.min(5_000, delay * 2)) {
    try {
      const batch = await client.getBatch(id);
      if (since !== undefined)
        await write(io.stderr, `the API answers again; still waiting for batch ${id}\n`);
      return batch;
    } catch (error) {
      const transient = unreachableOr5xx(error) || (error as FleetApiError).status === 429;
      if (!transient) throw error;
      if (since === undefined) {
        since = Date.now();
        const why = error instanceof Error ? error.message : String(error);
        await write(io.stderr, `the API does not answer (${why}); still waiting for batch ${id}\n`);
      } else if (Date.now() - since > outageMs) throw error;
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}

/** Polls the batch until it has ended, showing how many of its sessions have. */
export async function waitForEnd(client: FleetClient, id: string, io: BatchIo): Promise<BatchJson> {
  let batch = await getBatchPatiently(client, id, io);
  const bar = await progress(io, "ended", batch.counts.total);
  for (;;) {
    const { completed, parked, cancelled } = batch.counts;
    await bar.update(
      completed + parked + cancelled,
      `(completed ${completed}, parked ${parked}, cancelled ${cancelled})`,
    );
    if (batch.status !== "running") break;
    // Counts are a pass over the batch's sessions: big batches are asked less often.
    await new Promise((resolve) => setTimeout(resolve, batch.counts.total > 10_000 ? 5_000 : 1_000));
    batch = await getBatchPatiently(client, id, io);
  }
  await bar.stop();
  return batch;
}
