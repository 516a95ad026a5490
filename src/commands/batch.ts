/**
 * `fleet batch …` (contracts §9): show a batch's status, stream its results, cancel it, resume
 * its parked sessions; submitting a JSONL file as one batch is batch-submit.ts. Talks to the
 * HTTP API (`--api URL`, or FLEET_API_URL, or http://127.0.0.1:$PORT) with FLEET_API_KEY.
 */
import { FleetApiError } from "../producer/client.js";
import type { ModelConfig } from "../shared/agent-config.js";
import { type ApiOptions, apiClientOf, runGuarded, write } from "./api-client.js";
import { LineError } from "./batch-file.js";
import type { BatchIo } from "./batch-progress.js";
import { sendPart } from "./batch-send.js";

export type { BatchIo } from "./batch-progress.js";

export type BatchCommandOptions = ApiOptions & { io?: BatchIo };

export function ioOf(options: BatchCommandOptions): BatchIo {
  return (
    options.io ?? { stdout: process.stdout, stderr: process.stderr, isTTY: process.stderr.isTTY === true }
  );
}

/** Runs a command body; API errors and bad input end it with one line and an exit code. */
export function guarded(
  io: BatchIo,
  api: { url: string; keySent: boolean },
  what: string,
  body: () => Promise<number>,
): Promise<number> {
  return runGuarded(io.stderr, api, what, body, (error) =>
    error instanceof LineError ? { line: error.message, exitCode: 2 } : null,
  );
}

export async function batchStatusCommand(id: string, options: BatchCommandOptions = {}): Promise<number> {
  const io = ioOf(options);
  const { client, ...api } = apiClientOf(options);
  return guarded(io, api, "fleet batch status", async () => {
    await write(io.stdout, `${JSON.stringify(await client.getBatch(id), null, 2)}\n`);
    return 0;
  });
}

export async function batchResultsCommand(id: string, options: BatchCommandOptions = {}): Promise<number> {
  const io = ioOf(options);
  const { client, ...api } = apiClientOf(options);
  return guarded(io, api, "fleet batch results", async () => {
    for await (const result of client.batchResults(id)) await write(io.stdout, `${JSON.stringify(result)}\n`);
    return 0;
  });
}

export async function batchCancelCommand(id: string, options: BatchCommandOptions = {}): Promise<number> {
  const io = ioOf(options);
  const { client, ...api } = apiClientOf(options);
  return guarded(io, api, "fleet batch cancel", async () => {
    await write(io.stdout, `${JSON.stringify(await client.cancelBatch(id), null, 2)}\n`);
    return 0;
  });
}

/**
 * A 400 about what a flag sent, named by the flag: the API names its body's fields
 * (`parkedReason: must be a parked reason …`), which the command line spells `--reason`.
 */
function asResumeFlag(error: unknown): unknown {
  if (!(error instanceof FleetApiError) || error.status !== 400 || error.field === undefined) return error;
  if (error.field === "parkedReason" && error.message.startsWith("parkedReason: "))
    return new LineError(`--reason: ${error.message.slice("parkedReason: ".length)}`);
  if (error.field === "model" || error.field.startsWith("model."))
    return new LineError(`--model: ${error.message}`);
  return error;
}

/**
 * `fleet batch resume ID [--reason R] [--model JSON]`: resumes the batch's parked sessions
 * (only those parked for R when given) page by page until the pass is over, waiting when a
 * tenant limit asks to (a page's `retryAfterSeconds`, or a 429 for its first session: up to 10
 * minutes, as `submit` waits for a part). Progress on stderr; on stdout `{resumed, refused: {reason: n}}`.
 */
export async function batchResumeCommand(
  id: string,
  options: BatchCommandOptions & { reason?: string; model?: string } = {},
): Promise<number> {
  const io = ioOf(options);
  // A 429 on a page's first session (nothing done) goes to sendPart at once, which says so and
  // waits for room as `submit` does: the client's own wait was 30 s in silence, then the
  // command failed with the pass half done.
  const { client, ...api } = apiClientOf(options, 0);
  return guarded(io, api, "fleet batch resume", async () => {
    let model: ModelConfig | undefined;
    if (options.model !== undefined) {
      try {
        model = JSON.parse(options.model) as ModelConfig;
      } catch {
        throw new LineError(
          '--model must be a MODEL as JSON, e.g. \'{"provider":"openai","model":"gpt-4o"}\'',
        );
      }
    }
    let resumed = 0;
    const refused: Record<string, number> = {};
    let cursor: string | undefined;
    for (;;) {
      const body = {
        // An empty --reason (an unset "$REASON") is sent, and refused, not dropped: dropped,
        // it resumed every parked session of the batch.
        ...(options.reason !== undefined ? { parkedReason: options.reason } : {}),
        ...(model ? { model } : {}),
        ...(cursor ? { cursor } : {}),
      };
      const page = await sendPart(() => client.resumeBatch(id, body), io, undefined, false).catch(
        (error: unknown) => {
          throw asResumeFlag(error);
        },
      );
      resumed += page.resumed.length;
      for (const { reason } of page.refused) refused[reason] = (refused[reason] ?? 0) + 1;
      const left = Object.values(refused).reduce((a, b) => a + b, 0);
      await write(io.stderr, `resumed ${resumed}, nothing to resume in ${left}\n`);
      if (page.nextCursor === null) break;
      cursor = page.nextCursor;
      if (page.retryAfterSeconds !== undefined) {
        await write(io.stderr, `a tenant limit was reached: waiting ${page.retryAfterSeconds} s\n`);
        await new Promise((resolve) => setTimeout(resolve, page.retryAfterSeconds! * 1_000));
      }
    }
    await write(io.stdout, `${JSON.stringify({ resumed, refused })}\n`);
    return 0;
  });
}
