/**
 * What a command writes aside while it runs — `fleet session import`'s private copy of stdin,
 * the `FILE.PID.partial` an export to FILE fills — removed when a signal stops it (Ctrl-C, a
 * `timeout`, a closed terminal), not only when it ends by itself: before, each stopped import
 * left a copy of its conversation under $TMPDIR, each stopped export a partial file by FILE.
 */
import { rmSync } from "node:fs";

const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * Removes `path` (a file, or a folder with what it holds) if one of SIGNALS arrives before
 * the returned function is called; the signal then ends the process as it would have.
 */
export function removedOnSignal(path: string): () => void {
  const release = () => {
    for (const signal of SIGNALS) process.off(signal, stop);
  };
  function stop(signal: NodeJS.Signals) {
    release();
    rmSync(path, { recursive: true, force: true });
    // No listener left: the signal's own action, so the shell sees the command killed by it.
    process.kill(process.pid, signal);
  }
  for (const signal of SIGNALS) process.on(signal, stop);
  return release;
}
