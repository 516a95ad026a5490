/**
 * The `fleet` command line (contracts.md §3) as a commander program: every command and
 * flag here or, for those that act through the HTTP API, in api-commands.ts; `--help` on
 * each (which does nothing else), and usage errors that end in one line and exit 2. Each
 * command loads only what it needs, so `fleet resume-point --file` and every `--help` start
 * fast and touch no server.
 */
import { Command } from "commander";
import { packageVersion } from "../shared/package-version.js";
import { addApiCommands } from "./api-commands.js";
import {
  collect,
  demoSessions,
  MAX_DEMO_SESSIONS,
  MAX_LOCAL_WORKERS,
  port,
  workerCount,
} from "./flag-values.js";
import { finish, helpTopicChecked, repeatable, rootHelp } from "./program-help.js";

export { CommandLineExit } from "./command-line-exit.js";
export { MAX_LOCAL_WORKERS } from "./flag-values.js";

export type Program = {
  program: Command;
  /** The arguments to give `program.parseAsync` (program-help.ts helpTopicChecked). */
  argsOf: (argv: string[]) => string[];
  /** The exit code the command that ran asked for. */
  exitCode: () => number;
  /**
   * The command that ran, as typed ("fleet batch status"): what its failures' lines start
   * with, as its usage errors do; "fleet" until one has begun.
   */
  commandName: () => string;
};

/** A command's name as typed: "fleet keys create". */
function pathOf(command: Command): string {
  const names: string[] = [];
  for (let c: Command | null = command; c; c = c.parent) names.unshift(c.name());
  return names.join(" ");
}

/** The whole `fleet` program. Nothing runs until `parseAsync`. */
export function buildProgram(): Program {
  let exitCode = 0;
  let commandName = "fleet";
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
    .configureOutput({ outputError: () => {} })
    // Called for every subcommand's action too: the one about to run.
    .hook("preAction", (_program, action) => {
      commandName = pathOf(action);
    });

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
      "Run the HTTP API on HOST:PORT until SIGTERM, SIGINT or SIGHUP. Without any API key it serves only on a loopback HOST (docs/contracts.md §10).",
    )
    .option("--port <N>", "listen on port N instead of PORT (default 3000; 0 picks a free port)", port)
    .action(run(async (options: { port?: number }) => (await import("./serve.js")).apiCommand(options)));

  const toolsHelp = "load more tools from FILE (its default export: a tool or an array of tools); repeatable";
  const extensionsHelp =
    "load extensions from FILE (its default export: defineExtension({...}) or an array of them): hooks around every run; repeatable";
  const worker = program
    .command("worker")
    .summary("run a worker: it claims sessions from the queue and runs them")
    .description(
      "Run a worker until SIGTERM, SIGINT or SIGHUP, which let running work finish for SHUTDOWN_GRACE_MS.",
    )
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
    .description("Run the sweeper until SIGTERM, SIGINT or SIGHUP.")
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
      "Migrate, then run the API, the sweeper and the workers, each as a child process that is restarted when it dies (after 1 s, doubling with each crash in a row up to 30 s). SIGTERM, SIGINT or SIGHUP stops them all.",
    )
    .option("--workers <N>", `worker processes (at most ${MAX_LOCAL_WORKERS})`, workerCount, 2)
    .option("--tools <FILE>", `${toolsHelp}; given to every worker`, collect)
    .option("--extensions <FILE>", `${extensionsHelp}; given to every worker`, collect)
    .option(
      "--metrics-port-base <N>",
      "worker i (from 0) serves /metrics on port N+i, the sweeper on N+workers " +
        "(0, and the default when METRICS_PORT is not set: free ports)",
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
    .argument("<KEY_ID|KEY>", "the id `fleet keys list` shows, `fk_<id>_…` as it lists it, or the key itself")
    .action(run(async (id: string) => (await import("./keys.js")).revokeKeyCommand(id)));

  addApiCommands(program, run);

  program
    .command("demo")
    .summary("start a fleet, run a batch of scripted sessions, kill a worker mid-batch, print a report")
    .description(
      "The main job on defaults: migrates its database, starts an API, a sweeper and worker processes, runs a batch of scripted sessions that use tools, SIGKILLs a worker mid-batch and reports.",
    )
    .option("--sessions <N>", `sessions in the batch (at most ${MAX_DEMO_SESSIONS})`, demoSessions, 20)
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
  return {
    program,
    argsOf: (argv) => helpTopicChecked(program, argv),
    exitCode: () => exitCode,
    commandName: () => commandName,
  };
}
