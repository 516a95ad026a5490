/**
 * What a client command must not leave behind when SIGINT (Ctrl-C) or SIGTERM stops it: the
 * private copy of its stdin (read-twice.ts), an export's partial file (session-export.ts), a
 * batch left open with nothing said of it (batch-submit.ts). Node's default for these signals
 * ends the process at once, running no `finally`: the copy of a piped batch file (its agents'
 * prompts) stayed under $TMPDIR, `FILE.PID.partial` beside an export's FILE, and a submit
 * stopped between two parts ended on `submitted 1000/3000` with its batch open for ever and
 * the random prefix of its parts' Idempotency-Keys, the one way to send the rest, never said.
 *
 * While a command has something registered here, the first SIGINT, SIGTERM or SIGHUP (a
 * closed terminal) runs each registered step at once (synchronously: the process exits right
 * after), newest first, writes the lines they return on stderr (what was left, and how to go
 * on), and exits 130, 143 or 129, as a shell reports the signal. A command with nothing registered keeps Node's default (or
 * its own handler, as `fleet watch` has).
 */
import { writeSync } from "node:fs";

/** Undoes what the command leaves; returns a line to say (without its newline), if any. */
type Step = () => string | undefined;

const steps = new Set<Step>();

function interrupted(signal: NodeJS.Signals): void {
  for (const step of [...steps].reverse()) {
    try {
      const line = step();
      // Written at once: the process exits next, before a stream's queued write would go out.
      if (line !== undefined) writeSync(process.stderr.fd, `${line}\n`);
    } catch {
      // A step that fails (a file already gone) must not keep the others from running.
    }
  }
  process.exit(exitCodeOf(signal));
}

const onSighup = () => interrupted("SIGHUP");
const onSigint = () => interrupted("SIGINT");
const onSigterm = () => interrupted("SIGTERM");

/**
 * Runs `step` if a signal stops the command before the returned function is called (once the
 * work it undoes is done, or undone by the command itself). `step` must be synchronous.
 */
export function onInterrupt(step: Step): () => void {
  steps.add(step);
  if (steps.size === 1) {
    process.on("SIGHUP", onSighup);
    process.on("SIGINT", onSigint);
    process.on("SIGTERM", onSigterm);
  }
  return () => {
    if (!steps.delete(step) || steps.size > 0) return;
    process.off("SIGHUP", onSighup);
    process.off("SIGINT", onSigint);
    process.off("SIGTERM", onSigterm);
  };
}

/**
 * SIGINT or SIGTERM heard by a command that stops what it started itself (`fleet demo`: its
 * workers, its batch), where Node's default ended it at once. `signalled` resolves with the
 * first; `off()` gives both back to Node's default, so a second Ctrl-C during the stop ends
 * it at once.
 */
export function stopSignal(): {
  readonly signal: NodeJS.Signals | undefined;
  signalled: Promise<NodeJS.Signals>;
  off: () => void;
} {
  let heard: NodeJS.Signals | undefined;
  let resolve!: (signal: NodeJS.Signals) => void;
  const signalled = new Promise<NodeJS.Signals>((r) => {
    resolve = r;
  });
  const off = () => {
    process.off("SIGINT", on);
    process.off("SIGTERM", on);
  };
  const on = (signal: NodeJS.Signals) => {
    heard = signal;
    off();
    resolve(signal);
  };
  process.on("SIGINT", on);
  process.on("SIGTERM", on);
  return {
    get signal() {
      return heard;
    },
    signalled,
    off,
  };
}

/** The exit code of a command a signal stopped: 128 + its number, as a shell reports it. */
export function exitCodeOf(signal: NodeJS.Signals): number {
  return signal === "SIGINT" ? 130 : signal === "SIGHUP" ? 129 : 143;
}
