/** A child's exit as a test reads it: after its output has been read to the end. */
import type { ChildProcess } from "node:child_process";

/**
 * The child's exit code (null if a signal ended it), once it has exited and its piped stdout
 * and stderr have closed. Node's "exit" can come before the last output is read (seen in CI
 * under load: a one-line stderr read as ""); a grandchild still holding the pipes open is
 * waited for at most `graceMs` after the exit.
 */
export function exitedWithOutput(child: ChildProcess, graceMs = 5_000): Promise<number | null> {
  return new Promise((resolve) => {
    const streams = [child.stdout, child.stderr].filter((s) => s !== null && !s.closed);
    let open = streams.length;
    let code: number | null | undefined;
    let done = false;
    const finish = () => {
      if (done || code === undefined) return;
      done = true;
      resolve(code);
    };
    for (const s of streams) {
      s?.once("close", () => {
        if (--open === 0) finish();
      });
    }
    const exited = (exitCode: number | null) => {
      code = exitCode;
      if (open === 0) finish();
      else setTimeout(finish, graceMs).unref();
    };
    if (child.exitCode !== null || child.signalCode !== null) exited(child.exitCode);
    else child.once("exit", exited);
  });
}
