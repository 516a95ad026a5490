/**
 * `fleet worker`'s guard against operator code that ends the process as if its work were
 * done: a tool, an extension hook or a module calling `process.exit()` or `process.exit(0)`
 * ended the worker with 0, a clean stop to its supervisor (systemd's `Restart=on-failure`
 * does not restart it), though no stop was asked and its sessions were left mid-run. Until the
 * worker's own stop begins, an exit with 0 is made 70, cli.ts's last-resort stop, with one
 * line saying so; a non-zero code the operator's code chose stays. The sessions are the
 * sweeper's to resume, as after any crash.
 */
import { writeSync } from "node:fs";

/** The code a worker that was made to exit 0 while it ran exits with instead (cli.ts's last resort). */
export const EXIT_NOT_ASKED = 70;

/** Guards the process's exit code from now; the returned function ends the guard (the stop began). */
export function guardCleanExit(role: string): () => void {
  const onExit = (code: number) => {
    if (code !== 0) return;
    // Node exits with process.exitCode as its 'exit' listeners leave it.
    process.exitCode = EXIT_NOT_ASKED;
    // Straight to fd 2: nothing asynchronous is written once the process exits.
    writeSync(
      2,
      `fleet ${role}: exit code 0 asked for while the worker ran (process.exit by a tool, an extension hook or a module it loaded); exiting ${EXIT_NOT_ASKED} instead so that a supervisor restarts it\n`,
    );
  };
  process.on("exit", onExit);
  return () => process.off("exit", onExit);
}
