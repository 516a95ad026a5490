/**
 * The `fleet` command line (contracts.md §3) as a commander program: every command and
 * flag in one place, `--help` on each (which does nothing else), and usage errors that end
 * in one line and exit 2. Each command loads only what it needs, so `fleet resume-point
 * --file` and every `--help` start fast and touch no server.
 */
import { Command, type CommanderError, InvalidArgumentError, type Option } from "commander";
import { packageVersion } from "../shared/package-version.js";
import { BATCH_LINE_SHAPE } from "./batch-line.js";

/** A usage error (unknown flag, missing argument, bad number), or help that was asked for. */
export class CommandLineExit extends Error {
  override name = "CommandLineExit";
  constructor(
    /** The command it happened in, as typed: "fleet keys create". */
    readonly command: string,
    readonly error: CommanderError,
  ) {
    super(error.message);
  }

  /** Help or the version: shown, on stdout (0) or, for a missing command, on stderr. */
  private get shown(): boolean {
    return ["commander.helpDisplayed", "commander.help", "commander.version"].includes(this.error.code);
  }

  /** 0 for help or the version that was asked for; 2 for everything else. */
  get exitCode(): number {
    return this.shown && this.error.exitCode === 0 ? 0 : 2;
  }

  /** The one line to print on stderr; undefined when commander printed help or the version. */
  get line(): string | undefined {
    if (this.shown) return undefined;
    const message = this.error.message
      .replace(/^error: /, "")
      .replace(/\s*\n\s*/g, " ")
      .replace(/\.$/, "");
    return `${this.command}: ${message}; see \`${this.command} --help\``;
  }
}

/** A parser for a whole-number flag from `min` to `max`. */
function wholeNumber(min: number, max?: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\s*\d+\s*$/.test(value) || !Number.isSafeInteger(n) || n < min || (max !== undefined && n > max))
      throw new InvalidArgumentError(
        max === undefined
          ? `expected a whole number ≥ ${min}`
          : `expected a whole number from ${min} to ${max}`,
      );
    return n;
  };
}
/** `on` or `off`, refused as a usage error naming the command, as a bad number is. */
function onOrOff(value: string): "on" | "off" {
  if (value !== "on" && value !== "off") throw new InvalidArgumentError("expected on or off");
  return value;
}
const count = wholeNumber(1);
const port = wholeNumber(0, 65_535);
/**
 * Worker processes `fleet up` and `fleet demo` start on this machine: each takes ~1 s of CPU and
 * ~100 MB to start, so `--workers 100000` (a typo, a script's wrong variable) forked until the
 * machine stalled (load average 119 on 2 cores). More than this is a fleet of hosts, run with
 * `fleet worker` under the operator's own supervisor.
 */
export const MAX_LOCAL_WORKERS = 64;
const workerCount = wholeNumber(1, MAX_LOCAL_WORKERS);

/** Options that may be given more than once; the synopsis shows them with "...". */
const repeatable = new WeakSet<Option>();
function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** `[--port N]`, `--tenant NAME`, `[--tools FILE ...]`, `KEY_ID`: what the usage lines show. */
function synopsis(command: Command): string {
  const visible = command.commands.filter((c) => c.name() !== "help");
  if (visible.length > 0) {
    const full = visible.map((c) => `${c.name()} ${synopsis(c)}`.trim()).join(" | ");
    // Too long for one line: the subcommands' names; each one's --help has the rest.
    return full.length <= 72 ? full : `${visible.map((c) => c.name()).join(" | ")} ...`;
  }
  const parts = command.options
    .filter((o) => !o.hidden && o.long)
    .map((o) => {
      const value = /[<[]([^>\]]+)[>\]]/.exec(o.flags)?.[1];
      const text = `${o.long}${value ? ` ${value}` : ""}${repeatable.has(o) ? " ..." : ""}`;
      return o.mandatory ? text : `[${text}]`;
    });
  for (const a of command.registeredArguments) parts.push(a.required ? a.name() : `[${a.name()}]`);
  return parts.join(" ");
}

const CONFIGURATION = [
  "Configuration comes from the environment (a .env file in the working directory is honoured):",
  "DATABASE_URL, REDIS_URL, FLEET_PREFIX, PORT, HOST, METRICS_PORT, FLEET_TOOL_DIR, LOG_LEVEL, ...",
].join("\n");

const EXIT_CODES =
  "Exit codes: 0 done, 3 not resumable (resume-point), 2 invalid input or usage (or a service or port that is not there), 1 any other failure, 70 a last-resort stop.";

export type Program = {
  program: Command;
  /** The exit code the command that ran asked for. */
  exitCode: () => number;
};

/** The whole `fleet` program. Nothing runs until `parseAsync`. */
export function buildProgram(): Program {
  let exitCode = 0;
  const run =
    <A extends unknown[]>(action: (...args: A) => Promise<number>) =>
    async (...args: A) => {
      exitCode = await action(...args);
    };

  const program = new Command("fleet")
    .description("Runs LLM agent sessions as queued jobs on stateless workers.")
    .version(packageVersion(), "-V, --version", "print the version")
    .helpOption("-h, --help", "show help")
    .helpCommand("help [command]", "show help for a command")
    .configureOutput({ outputError: () => {} });

  program
    .command("resume-point")
    .summary("classify a history without any server (exit 0 resumable, 3 not, 2 invalid input)")
    .description(
      "Classify a history (a JSON array of messages) or a stored session and print its resume point as JSON. Exit 0 if it is resumable, 3 if not, 2 on invalid input.",
    )
    .usage("--file HISTORY.json | SESSION_ID")
    .option("-f, --file <HISTORY.json>", "the history to classify; `-` reads it from standard input")
    .argument("[SESSION_ID]", "a stored session instead (reads DATABASE_URL)")
    .action(
      run(async (sessionId: string | undefined, options: { file?: string }) => {
        const { resumePointCommand } = await import("../producer/cli-resume-point.js");
        const args = [
          ...(options.file !== undefined ? ["--file", options.file] : []),
          ...(sessionId ? [sessionId] : []),
        ];
        return resumePointCommand(args);
      }),
    );

  program
    .command("migrate")
    .summary("apply the database migrations (safe to run concurrently and repeatedly)")
    .description(
      "Create the database of DATABASE_URL if it is missing and apply the migrations, under a lock: safe to run concurrently and repeatedly.",
    )
    .action(run(async () => (await import("./serve.js")).migrateCommand()));

  program
    .command("api")
    .summary("run the HTTP API")
    .description(
      "Run the HTTP API on HOST:PORT until SIGTERM or SIGINT. Without any API key it serves only on a loopback HOST (docs/contracts.md §10).",
    )
    .option("--port <N>", "listen on port N instead of PORT (default 3000; 0 picks a free port)", port)
    .action(run(async (options: { port?: number }) => (await import("./serve.js")).apiCommand(options)));

  const toolsHelp = "load more tools from FILE (its default export: a tool or an array of tools); repeatable";
  const extensionsHelp =
    "load extensions from FILE (its default export: defineExtension({...}) or an array of them): hooks around every run; repeatable";
  const worker = program
    .command("worker")
    .summary("run a worker: it claims sessions from the queue and runs them")
    .description("Run a worker until SIGTERM or SIGINT, which let running work finish for SHUTDOWN_GRACE_MS.")
    .option("--tools <FILE>", toolsHelp, collect)
    .option("--extensions <FILE>", extensionsHelp, collect)
    .option(
      "--metrics-port <N>",
      "serve /metrics and /healthz on port N instead of METRICS_PORT (0 picks a free port)",
      port,
    )
    .action(
      run(async (options: { tools?: string[]; extensions?: string[]; metricsPort?: number }) =>
        (await import("./serve.js")).workerCommand(options),
      ),
    );

  program
    .command("sweeper")
    .summary("find interrupted sessions and resume them (or park them)")
    .description("Run the sweeper until SIGTERM or SIGINT.")
    .option(
      "--metrics-port <N>",
      "serve /metrics and /healthz on port N instead of METRICS_PORT (0 picks a free port)",
      port,
    )
    .action(
      run(async (options: { metricsPort?: number }) => (await import("./serve.js")).sweeperCommand(options)),
    );

  const up = program
    .command("up")
    .summary("run the whole fleet on this machine: API, sweeper and workers, each a process of its own")
    .description(
      "Migrate, then run the API, the sweeper and the workers, each as a child process that is restarted when it dies (after 1 s, doubling with each crash in a row up to 30 s). SIGTERM or SIGINT stops them all.",
    )
    .option("--workers <N>", `worker processes (at most ${MAX_LOCAL_WORKERS})`, workerCount, 2)
    .option("--tools <FILE>", `${toolsHelp}; given to every worker`, collect)
    .option("--extensions <FILE>", `${extensionsHelp}; given to every worker`, collect)
    .option(
      "--metrics-port-base <N>",
      "worker i (from 0) serves /metrics on port N+i, the sweeper on N+workers " +
        "(default: METRICS_PORT when it is set, otherwise free ports)",
      port,
    )
    .action(
      run(
        async (options: {
          workers: number;
          tools?: string[];
          extensions?: string[];
          metricsPortBase?: number;
        }) => (await import("./up.js")).upCommand(options),
      ),
    );

  const keys = program
    .command("keys")
    .summary("manage API keys (a new key is printed once)")
    .description("Manage the API keys (docs/contracts.md §10; reads DATABASE_URL).");
  keys
    .command("create")
    .description("Create an API key for a tenant; print the key once (only its hash is stored).")
    .requiredOption("--tenant <NAME>", "the tenant the key acts for")
    .option("--admin", "the key may open admin routes such as Bull Board")
    .action(
      run(async (options: { tenant: string; admin?: boolean }) =>
        (await import("./keys.js")).createKeyCommand({
          tenant: options.tenant,
          admin: options.admin === true,
        }),
      ),
    );
  keys
    .command("list")
    .description("List every key: id, tenant, admin, prefix, created, revoked.")
    .action(run(async () => (await import("./keys.js")).listKeysCommand()));
  keys
    .command("revoke")
    .description("Revoke a key: the API stops accepting it within 5 s.")
    .argument("<KEY_ID>", "the id `fleet keys list` shows")
    .action(run(async (id: string) => (await import("./keys.js")).revokeKeyCommand(id)));

  const apiHelp =
    "the API's base URL (default FLEET_API_URL, else http://127.0.0.1:$PORT); the key comes from FLEET_API_KEY";
  const batch = program
    .command("batch")
    .summary("submit a JSONL file as a batch, follow it, stream its results, cancel, delete or resume it")
    .description("Batches (docs/contracts.md §9) through the HTTP API (FLEET_API_URL, FLEET_API_KEY).");
  batch
    .command("submit")
    .description(
      `Submit FILE.jsonl (one ${BATCH_LINE_SHAPE} per line; \`-\` reads stdin) as one batch, streamed in parts of at most 1,000 sessions, each with its own Idempotency-Key. Prints the batch id, or with --wait the batch JSON once it has ended. A progress bar on a terminal, plain lines otherwise (stderr).`,
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
        ) => (await import("./batch.js")).batchSubmitCommand(file, options),
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
    .option("--out <FILE>", "write FILE (only once the export is whole) instead of stdout")
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
    .command("watch")
    .summary("follow a session's events live (run starts, messages, tools, run ends)")
    .description(
      "Print a session's events as they happen, one readable line each, until SIGINT (docs/contracts.md §7). Without --after it starts at the RUN_STARTED of the session's latest run; it reconnects by itself with the last event id.",
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

  program
    .command("demo")
    .summary("start a fleet, run a batch of scripted sessions, kill a worker mid-batch, print a report")
    .description(
      "The main job on defaults: migrates its database, starts an API, a sweeper and worker processes, runs a batch of scripted sessions that use tools, SIGKILLs a worker mid-batch and reports.",
    )
    .option("--sessions <N>", "sessions in the batch", count, 20)
    .option("--workers <N>", `worker processes (at most ${MAX_LOCAL_WORKERS})`, workerCount, 2)
    .option("--no-kill", "do not SIGKILL a worker mid-batch")
    .action(
      run(async (options: { sessions: number; workers: number; kill: boolean }) =>
        (await import("./demo.js")).demoCommand(options),
      ),
    );

  for (const command of [worker, up]) {
    for (const long of ["--tools", "--extensions"]) {
      const option = command.options.find((o) => o.long === long);
      if (option) repeatable.add(option);
    }
  }
  finish(program, "fleet");
  program.configureHelp({ formatHelp: (command) => rootHelp(command) });
  return { program, exitCode: () => exitCode };
}

/** Usage lines from the options, errors that name the command, for the whole tree. */
function finish(command: Command, path: string): void {
  command.exitOverride((error) => {
    throw new CommandLineExit(path, error);
  });
  if (command.parent) {
    const custom = command.usage();
    if (custom.startsWith("[options]") || custom.startsWith("[command]")) command.usage(synopsis(command));
    command.helpOption("-h, --help", "show help");
  }
  for (const sub of command.commands) finish(sub, `${path} ${sub.name()}`);
}

function rootHelp(program: Command): string {
  const commands = program.commands
    .filter((c) => c.name() !== "help")
    .map((c) => {
      const usage = c.usage() === "[options]" ? "" : ` ${c.usage()}`;
      return `  fleet ${c.name()}${usage}\n      ${c.summary() || c.description()}`;
    });
  return [
    "usage: fleet <command> [options]",
    "",
    program.description(),
    "",
    ...commands,
    "",
    "`fleet <command> --help` lists a command's options; `fleet --version` prints the version.",
    CONFIGURATION,
    EXIT_CODES,
    "",
  ].join("\n");
}
