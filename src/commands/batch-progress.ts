/**
 * Where `fleet batch` commands (batch.ts) write, and their progress on stderr: a bar
 * (cli-progress) on a terminal, plain lines otherwise.
 */
import type { Writable } from "node:stream";
import { write } from "./api-client.js";
import { onInterrupt } from "./interrupt.js";

export type BatchIo = {
  stdout: Writable;
  stderr: Writable;
  /** Whether stderr is a terminal: a progress bar instead of lines. */
  isTTY: boolean;
};

/**
 * A progress display, `value/total`: a bar on a terminal, a line per change otherwise. The
 * total is known at the start: `submit` counts the file's sessions (stdin's too, copied first)
 * before it sends any.
 */
export async function progress(io: BatchIo, label: string, total: number) {
  if (io.isTTY) {
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
    // Ctrl-C or SIGTERM: the bar's line ended and the cursor it hid shown again (it stayed
    // hidden in the terminal after the command).
    const forget = onInterrupt(() => {
      bar.stop();
      return undefined;
    });
    return {
      update: async (value: number, note = "") => bar.update(value, { note }),
      stop: async () => {
        forget();
        bar.stop();
      },
    };
  }
  let last = "";
  return {
    update: async (value: number, note = "") => {
      const text = `${label} ${value}/${total}${note ? ` ${note}` : ""}`;
      if (text !== last) await write(io.stderr, `${text}\n`);
      last = text;
    },
    stop: async () => {},
  };
}
