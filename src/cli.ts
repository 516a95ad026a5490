/**
 * `fleet` command-line entry (contracts.md §3). Each command loads only what it needs, so
 * `fleet resume-point --file` works with no server and starts fast.
 *
 * Exit codes: 0 success (or a resumable point), 3 not resumable, 2 invalid input or usage,
 * 1 an unexpected failure (one line on stderr; set FLEET_DEBUG=1 for the stack).
 */
import { NotFoundError, ValidationError } from "./shared/errors.js";

type Command = { summary: string; run: (args: string[]) => Promise<number> };

const commands: Record<string, Command> = {
  "resume-point": {
    summary: "resume-point --file HISTORY.json | SESSION_ID   classify a history (exit 0 resumable, 3 not)",
    run: async (args) => (await import("./producer/cli-resume-point.js")).resumePointCommand(args),
  },
  migrate: {
    summary: "migrate                   apply the database migrations (safe to run concurrently)",
    run: async () => (await import("./commands/serve.js")).migrateCommand(),
  },
  api: {
    summary: "api [--port N]            run the HTTP API",
    run: async (args) => (await import("./commands/serve.js")).apiCommand(args),
  },
  worker: {
    summary: "worker [--tools FILE]     run a worker (FILE's default export: more tools)",
    run: async (args) => (await import("./commands/serve.js")).workerCommand(args),
  },
  sweeper: {
    summary: "sweeper                   find interrupted sessions and resume them (or park them)",
    run: async (args) => (await import("./commands/serve.js")).sweeperCommand(args),
  },
  up: {
    summary: "up [--workers N] [--tools FILE]  run the whole fleet on this machine",
    run: async (args) => (await import("./commands/serve.js")).upCommand(args),
  },
  keys: {
    summary: "keys create --tenant NAME | list | revoke KEY_ID   manage API keys (the key is printed once)",
    run: async (args) => (await import("./commands/keys.js")).keysCommand(args),
  },
  demo: {
    summary: "demo [--sessions N]       start a fleet, run a batch of scripted sessions, print a report",
    run: async (args) => (await import("./commands/demo.js")).demoCommand(args),
  },
};

function usage(): string {
  const lines = Object.entries(commands).map(([, c]) => `  fleet ${c.summary}`);
  return ["usage:", ...lines].join("\n");
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name) {
    console.error(usage());
    return 2;
  }
  if (name === "--help" || name === "-h" || name === "help") {
    console.log(usage());
    return 0;
  }
  const command = commands[name];
  if (!command) throw new ValidationError("", `unknown command "${name}"\n${usage()}`);
  return command.run(rest);
}

/**
 * The last resort: a rejection or exception nothing handled (a library's background work
 * failing when a Postgres connection is killed, say) leaves a process whose state nobody
 * knows. It says so on one line and exits 70, so `fleet up` or the orchestrator starts a
 * fresh one; the fence and the sweeper make the stop as harmless as a crash — never a
 * silent zombie that holds sessions and does nothing.
 */
function exitOnUnhandled(kind: string, error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  console.error(
    `fleet ${process.argv[2] ?? ""}: ${kind}: ${message}; exiting so that a supervisor restarts it`,
  );
  if (process.env.FLEET_DEBUG && error instanceof Error) console.error(error.stack);
  process.exit(70);
}
process.on("unhandledRejection", (error) => exitOnUnhandled("unhandled rejection", error));
process.on("uncaughtException", (error) => exitOnUnhandled("uncaught exception", error));

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof ValidationError || error instanceof NotFoundError) {
      console.error(`fleet: ${error.message}`);
      process.exitCode = 2;
      return;
    }
    const message = error instanceof Error ? error.message : String(error);
    console.error(`fleet: ${message}`);
    if (process.env.FLEET_DEBUG && error instanceof Error) console.error(error.stack);
    process.exitCode = 1;
  },
);
