/**
 * Where `fleet batch` commands (batch.ts) write, and their progress on stderr: a bar
 * (cli-progress) on a terminal, plain lines otherwise.
 */
import type { Writable } from "node:stream";
import { write } from "./api-client.js";

export type BatchIo = {
  stdout: Writable;
  stderr: Writable;
  /** Whether stderr is a terminal: a progress bar instead of lines. */
  isTTY: boolean;
};

/**
 * A progress display: a bar on a terminal, a line per change otherwise. A total not known at
 * the start (stdin, a FIFO: read once, as parts are sent) is known at the last update (`ended`):
 * that line says `N/N` as a file's do.
 */
export async function progress(io: BatchIo, label: string, total: number | undefined) {
  if (io.isTTY && total !== undefined) {
    // No type declarations ship with cli-progress: the little used here is typed below.
    const moduleName = "cli-progress";
    const { default: cliProgress } = (await import(moduleName)) as {
      default: {
        SingleBar: new (
          options: Record<string, unknown>,
          preset: unknown,
        ) => {
          start(total: number, value: number, payload?: Record<string, unknown>): void;
          update(value: number, payload?: Record<string, unknown>): void;
          stop(): void;
        };
        Presets: { shades_classic: unknown };
      };
    };
    const bar = new cliProgress.SingleBar(
      { format: `${label} [{bar}] {value}/{total} {note}`, stream: io.stderr, hideCursor: true },
      cliProgress.Presets.shades_classic,
    );
    bar.start(total, 0, { note: "" });
    return {
      update: async (value: number, note = "", _ended = false) => bar.update(value, { note }),
      stop: async () => bar.stop(),
    };
  }
  let last = "";
  return {
    update: async (value: number, note = "", ended = false) => {
      const known = total ?? (ended ? value : undefined);
      const text = `${label} ${value}${known === undefined ? "" : `/${known}`}${note ? ` ${note}` : ""}`;
      if (text !== last) await write(io.stderr, `${text}\n`);
      last = text;
    },
    stop: async () => {},
  };
}
