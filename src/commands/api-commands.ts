/**
 * The `fleet` commands that act through the HTTP API (FLEET_API_URL, FLEET_API_KEY): `batch`,
 * `session` and `watch`. Each loads its module only when it runs.
 */
import type { Command } from "commander";
import { BATCH_LINE_SHAPE } from "./batch-line.js";
import { idempotencyKey, onOrOff, wholeNumber } from "./flag-values.js";

/** How buildProgram wraps an action: the exit code it resolves with is the program's. */
export type Run = <A extends unknown[]>(
  action: (...args: A) => Promise<number>,
) => (...args: A) => Promise<void>;

/** Adds the API's commands to `program`, their actions wrapped by `run`. */
export function addApiCommands(program: Command, run: Run): void {
  const apiHelp =
    "the API's base URL, with or without its /v1 (default FLEET_API_URL, else http://127.0.0.1:$PORT); the key comes from FLEET_API_KEY";
  const batch = program
    .command("batch")
    .summary("submit a JSONL file as a batch, follow it, stream its results, cancel, delete or resume it")
    .description("Batches (docs/contracts.md §9) through the HTTP API (FLEET_API_URL, FLEET_API_KEY).");
  batch
    .command("submit")
    .description(
      `Submit FILE.jsonl (one ${BATCH_LINE_SHAPE} per line; \`-\` reads stdin) as one batch: every line is read first (stdin copied to a private temporary file for it), so a line that is not a JSON object or repeats a customId sends nothing; then it is streamed in parts of at most 1,000 sessions, each with its own Idempotency-Key. Prints the batch id, or with --wait the batch JSON once it has ended. A progress bar on a terminal, plain lines otherwise (stderr).`,
    )
    .argument("<FILE.jsonl>", "the sessions, one JSON object per line")
    .option("--wait", "wait until the batch has ended, showing progress")
    .option("--webhook <URL>", "POST the batch JSON, signed, to URL once it has ended")
    .option(
      "--no-session-events",
      "write no per-session event stream for its sessions (less Redis memory and worker CPU; the batch's progress, events and webhook are unchanged)",
    )
    .option(
      "--idempotency-key <PREFIX>",
      "prefix of the parts' Idempotency-Keys: running the same command again within 24 h acts once",
      idempotencyKey,
    )
    .option(
      "--part-size <N>",
      "sessions per part (at most 1,000, the default): no more than the tenant's FLEET_TENANT_MAX_ACTIVE_SESSIONS",
      wholeNumber(1, 1_000),
    )
    .option("--api <URL>", apiHelp)
    .action(
      run(
        async (
          file: string,
          options: {
            wait?: boolean;
            webhook?: string;
            sessionEvents?: boolean;
            idempotencyKey?: string;
            partSize?: number;
            api?: string;
          },
        ) => (await import("./batch-submit.js")).batchSubmitCommand(file, options),
      ),
    );
  batch
    .command("status")
    .description("Print the batch JSON: status (running, ended, cancelled) and counts.")
    .argument("<ID>", "the batch id")
    .option("--api <URL>", apiHelp)
    .action(
      run(async (id: string, options: { api?: string }) =>
        (await import("./batch.js")).batchStatusCommand(id, options),
      ),
    );
  batch
    .command("results")
    .description("Stream the batch's results as NDJSON on stdout, one line per session.")
    .argument("<ID>", "the batch id")
    .option("--api <URL>", apiHelp)
    .action(
      run(async (id: string, options: { api?: string }) =>
        (await import("./batch.js")).batchResultsCommand(id, options),
      ),
    );
  batch
    .command("cancel")
    .description("Cancel every session of the batch that has not ended; print the batch JSON.")
    .argument("<ID>", "the batch id")
    .option("--api <URL>", apiHelp)
    .action(
      run(async (id: string, options: { api?: string }) =>
        (await import("./batch.js")).batchCancelCommand(id, options),
      ),
    );

  batch
    .command("delete")
    .description(
      "Delete the batch and all its sessions with their messages, runs and events (running ones are stopped); print {id, deleted, sessionsDeleted, complete}.",
    )
    .argument("<ID>", "the batch id")
    .option("--api <URL>", apiHelp)
    .action(
      run(async (id: string, options: { api?: string }) =>
        (await import("./delete.js")).batchDeleteCommand(id, options),
      ),
    );

  const session = program
    .command("session")
    .summary("act on one stored session (export it, import one, turn its event stream on or off, delete it)")
    .description("Act on one stored session through the HTTP API.");
  session
    .command("delete")
    .description(
      "Delete the session with its messages, runs and events, whatever its state (a running run is stopped: it stores nothing more and starts no tool); print {id, deleted}.",
    )
    .argument("<ID>", "the session id")
    .option("--api <URL>", apiHelp)
    .action(
      run(async (id: string, options: { api?: string }) =>
        (await import("./delete.js")).sessionDeleteCommand(id, options),
      ),
    );

  session
    .command("export")
    .description(
      "Write the session's agent, metadata and every message (with seq and createdAt) as JSON Lines: a header line, one line per message, an end line with their count. Read page by page and written as it comes (any length, constant memory); the messages are 1…N with no gap or repeat, also while the session runs.",
    )
    .argument("<ID>", "the session id")
    .option("--out <FILE>", "write FILE (only once the export is whole) instead of stdout (`-`: stdout)")
    .option("--api <URL>", apiHelp)
    .action(
      run(async (id: string, options: { out?: string; api?: string }) =>
        (await import("./session-export.js")).sessionExportCommand(id, options),
      ),
    );

  session
    .command("import")
    .description(
      "Create a new session from a `fleet session export` file and print its id. The whole file is checked first (a malformed one creates nothing); then the first page goes with the session's creation and the rest page by page. A page whose answer was lost is sent again and never stored twice.",
    )
    .argument("[FILE]", "a file `fleet session export` wrote; `-` (or none, with input piped in) reads stdin")
    .option("--metadata <JSON>", "a JSON object merged over the file's metadata (its keys win)")
    .option(
      "--idempotency-key <KEY>",
      "the key of the session's creation: running the same command again within 24 h goes on with the same session",
      idempotencyKey,
    )
    .option("--api <URL>", apiHelp)
    .action(
      run(
        async (
          file: string | undefined,
          options: { metadata?: string; idempotencyKey?: string; api?: string },
        ) => (await import("./session-import.js")).sessionImportCommand(file, options),
      ),
    );

  session
    .command("events")
    .description(
      "Turn the session's event stream on or off (PATCH /v1/sessions/:id). on: its stored messages go into the stream at once, its runs' events from its next run (fleet watch follows it); off: the stream is dropped and its readers end. Prints {id, sessionEvents}.",
    )
    .argument("<ID>", "the session id")
    .argument("<on|off>", "whether its event stream is written", onOrOff)
    .option("--api <URL>", apiHelp)
    .action(
      run(async (id: string, setting: string, options: { api?: string }) =>
        (await import("./session-events.js")).sessionEventsCommand(id, setting, options),
      ),
    );

  batch
    .command("resume")
    .description(
      "Resume the batch's parked sessions (e.g. after fixing the key that parked them provider_rejected), page by page. Sessions with nothing to resume stay parked and are counted by reason. Prints {resumed, refused: {reason: n}}.",
    )
    .argument("<ID>", "the batch id")
    .option(
      "--reason <REASON>",
      "only sessions parked for this reason (e.g. provider_rejected, attempts_exhausted)",
    )
    .option("--model <JSON>", "resume with this MODEL instead of the agent's")
    .option("--api <URL>", apiHelp)
    .action(
      run(async (id: string, options: { reason?: string; model?: string; api?: string }) =>
        (await import("./batch.js")).batchResumeCommand(id, options),
      ),
    );

  program
    .command("webhook-secret")
    .summary("print (or rotate) the secret that signs your tenant's batch webhooks (per-tenant secrets on)")
    .description(
      "Print {secret}: the secret that signs the batch webhooks of this key's tenant, when the operator turned on FLEET_WEBHOOK_SECRET_PER_TENANT (exit 2 when it is off: the fleet's FLEET_WEBHOOK_SECRET signs every webhook). Each key reads its own tenant's only. With --rotate, first rotate it and print {secret, previousValidUntil}: deliveries are signed with the new secret and, until then, with the one it replaced too.",
    )
    .option("--rotate", "rotate this tenant's secret first (POST /v1/webhook-secret/rotate)")
    .option(
      "--idempotency-key <KEY>",
      "with --rotate, the rotation's key: running the same command again within 24 h rotates once",
      idempotencyKey,
    )
    .option("--api <URL>", apiHelp)
    .action(
      run(async (options: { rotate?: boolean; idempotencyKey?: string; api?: string }, command: Command) => {
        // A key without --rotate was ignored: the secret was read and nothing rotated, exit 0.
        if (options.idempotencyKey !== undefined && !options.rotate)
          command.error("option '--idempotency-key <KEY>' goes with --rotate, which was not given", {
            code: "fleet.idempotencyKeyWithoutRotate",
          });
        return (await import("./webhook-secret.js")).webhookSecretCommand(options);
      }),
    );

  program
    .command("watch")
    .summary("follow a session's events live (run starts, messages, tools, run ends)")
    .description(
      "Print a session's events as they happen, one readable line each, until SIGINT (docs/contracts.md §7). Without --after it starts at the RUN_STARTED of the session's latest run; it reconnects by itself with the last event id, and when that place is gone (410: a stream written anew, Redis restarted without its data) reads the session's stream again from its latest run, leaving out what it printed.",
    )
    .argument("<SESSION_ID>", "the session to follow")
    .option("--json", "print the raw events, one JSON object {id, type, data} a line")
    .option("--after <ID>", "start after this event id (as printed by --json)")
    .option("--once", "stop after the next RUN_COMPLETED")
    .option("--api <URL>", apiHelp)
    .action(
      run(async (id: string, options: { json?: boolean; after?: string; once?: boolean; api?: string }) =>
        (await import("./watch.js")).watchCommand(id, options),
      ),
    );
}
