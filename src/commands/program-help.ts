/** The `fleet` program's usage lines and help text, and its usage errors that name the command. */
import type { EventEmitter } from "node:events";
import type { Command, Option } from "commander";
import { CommandLineExit } from "./command-line-exit.js";

/** Options that may be given more than once; the synopsis shows them with "...". */
export const repeatable = new WeakSet<Option>();

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
  "Exit codes: 0 done, 3 not resumable (resume-point), 2 invalid input or usage (or a service or port that is not there), 1 any other failure, 70 a last-resort stop (also a worker that operator code made exit 0 while it ran); `fleet worker` whose event loop stayed blocked (FLEET_WORKER_BLOCKED_EXIT_MS) ends by SIGALRM (142).";
/**
 * A flag that takes one value, given again on the command line, is a usage error naming it
 * (commander keeps the last value without a word: `fleet keys create --tenant a --tenant b`
 * made a key for b). Asked before commander stores the value, by where the one stored came
 * from; flags meant to repeat (`repeatable`) and on/off flags are left alone.
 */
function refuseRepeated(command: Command, option: Option): void {
  if (repeatable.has(option) || option.variadic || !(option.required || option.optional)) return;
  // A Command is an EventEmitter (its typings declare only `on`): this listener runs first.
  (command as unknown as EventEmitter).prependListener(`option:${option.name()}`, () => {
    if (command.getOptionValueSource(option.attributeName()) === "cli")
      command.error(`error: option '${option.flags}' was given more than once, and it takes one value`, {
        exitCode: 2,
        code: "fleet.repeatedOption",
      });
  });
}

/** Usage lines from the options, errors that name the command, for the whole tree. */
export function finish(command: Command, path: string): void {
  command.exitOverride((error) => {
    throw new CommandLineExit(path, error);
  });
  for (const option of command.options) refuseRepeated(command, option);
  if (command.parent) {
    const custom = command.usage();
    if (custom.startsWith("[options]") || custom.startsWith("[command]")) command.usage(synopsis(command));
    command.helpOption("-h, --help", "show help");
  }
  for (const sub of command.commands) finish(sub, `${path} ${sub.name()}`);
}

export function rootHelp(program: Command): string {
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

/**
 * The arguments to parse: `help NAME` with a NAME that is no command becomes `NAME`, which
 * commander refuses on one line as an unknown command (with its "did you mean"). Its own help
 * command printed the whole help on stderr, exit 2, without a word about NAME. So for a group's
 * (`fleet batch help NAME` becomes `fleet batch NAME`): it printed the group's whole help.
 */
export function helpTopicChecked(program: Command, argv: string[]): string[] {
  const named = (command: Command, name: string | undefined) =>
    command.commands.find(
      (c) => c.name() !== "help" && (c.name() === name || c.aliases().includes(name ?? "")),
    );
  // Down the groups the arguments name (`batch`, `session`, `keys`), to where `help` may stand.
  let command = program;
  let at = 0;
  for (let next = named(command, argv[at]); next; next = named(command, argv[at])) {
    command = next;
    at += 1;
  }
  const topic = argv[at + 1];
  // Only a group has a help command: a command's own `help` is an argument (a FILE so named).
  if (command.commands.length === 0 || argv[at] !== "help" || topic === undefined || topic.startsWith("-"))
    return argv;
  return named(command, topic) ? argv : [...argv.slice(0, at), topic];
}
