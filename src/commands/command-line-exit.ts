import type { CommanderError } from "commander";

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
