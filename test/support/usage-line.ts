/**
 * A `fleet` command line run in this process up to its usage error: the one line it would
 * print and its exit code (CommandLineExit). Throws when the command line was accepted.
 */
import { buildProgram, CommandLineExit } from "../../src/commands/program.js";

export async function usageLine(args: string[]): Promise<{ line: string | undefined; code: number }> {
  const { program } = buildProgram();
  try {
    await program.parseAsync(args, { from: "user" });
  } catch (error) {
    if (error instanceof CommandLineExit) return { line: error.line, code: error.exitCode };
    throw error;
  }
  throw new Error(`${args.join(" ")} was accepted`);
}
