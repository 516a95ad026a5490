/**
 * `fleet` command-line entry (contracts.md §3); the commands are in commands/program.ts.
 *
 * Exit codes: 0 success (or a resumable point), 3 not resumable, 2 invalid input or usage
 * (and a service or port a role needs that is not there), 1 an unexpected failure (one line
 * on stderr; set FLEET_DEBUG=1 for the stack), 70 a last-resort stop (below); a `fleet worker`
 * whose event loop stayed blocked ends by SIGALRM, a signal (worker/loop-watchdog.ts). A client
 * command whose reader closed its stdout (`| head`) stops quietly with 0; one whose stdout
 * cannot be written otherwise (a full disk) stops with one line and 1.
 */
import { buildProgram, CommandLineExit } from "./commands/program.js";
import { NotFoundError, ValidationError } from "./shared/errors.js";

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

/**
 * Commands whose output is read by someone who may stop early (`fleet batch results ID |
 * head -1`, `fleet --help | less` quit at once): a reader that went away ends them quietly,
 * exit 0, and a stdout that cannot be written (ENOSPC) with one line, exit 1. That is every
 * command but the roles, and a role's help and version too. The roles keep the last resort
 * above: their stdout is their log, and a log that can no longer be written is a fault for the
 * supervisor to see. (Help, `--version` and `fleet webhook-secret` were left out: a reader gone
 * early made them say `uncaught exception: write EPIPE; exiting so that a supervisor restarts
 * it`, exit 70.)
 */
const ROLES = new Set(["api", "worker", "sweeper", "up"]);
const HELP_FLAGS = new Set(["-h", "--help", "-V", "--version"]);
function readByPeople(args: string[]): boolean {
  const [command] = args;
  return command === undefined || !ROLES.has(command) || args.some((arg) => HELP_FLAGS.has(arg));
}
if (readByPeople(process.argv.slice(2))) {
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") process.exit(0);
    // A full disk, say: a failure of the command (exit 1), not an unknown state to restart.
    console.error(`fleet ${process.argv[2] ?? ""}: cannot write stdout: ${error.message}`);
    process.exit(1);
  });
}

/** Whether the command is a role that runs operator code (`fleet worker`, not its help). */
function exitsWhenDone(args: string[]): boolean {
  return args[0] === "worker" && !args.some((arg) => HELP_FLAGS.has(arg));
}

/** Runs the command; resolves with its exit code, or with 2 or 1 and one line on stderr. */
async function main(argv: string[]): Promise<{ code: number; failed: boolean }> {
  const { program, argsOf, exitCode, commandName } = buildProgram();
  try {
    await program.parseAsync(argsOf(argv), { from: "user" });
    return { code: exitCode(), failed: false };
  } catch (error) {
    if (error instanceof CommandLineExit) {
      if (error.line) console.error(error.line);
      return { code: error.exitCode, failed: false };
    }
    // Named by the command that failed, as its usage errors are: `fleet resume-point: …`, not `fleet: …`.
    if (error instanceof ValidationError || error instanceof NotFoundError) {
      console.error(`${commandName()}: ${error.message}`);
      return { code: 2, failed: true };
    }
    const message = error instanceof Error ? error.message : String(error);
    console.error(`${commandName()}: ${message}`);
    if (process.env.FLEET_DEBUG && error instanceof Error) console.error(error.stack);
    return { code: 1, failed: true };
  }
}

const { code, failed } = await main(process.argv.slice(2));
// A command that failed part-way (a role that could not start, say) may leave connections
// or timers behind that would keep the process alive: it exits now, its one line written.
// So does a worker whose stop has ended (`fleet worker stopped`): its --tools and --extensions
// modules are operator code, whose handles (an audit extension's flush timer, a tool's pool or
// server) kept it alive after that line, for ever for a setInterval, until a supervisor killed it.
if (failed || exitsWhenDone(process.argv.slice(2))) process.exit(code);
process.exitCode = code;
