/**
 * Runs an ES module script (tsx: it may import the sources) in a child process whose files may
 * grow to `limitKiB` KiB at most (`ulimit -f`, which counts 1024-byte blocks in bash): a real
 * file system refusal (EFBIG after a short write) for tests of what a cut write leaves. Its
 * last line of output, parsed as JSON.
 */
import { execFileSync } from "node:child_process";
import { ROOT } from "./fleet-env.js";

export function underFileSizeLimit<T>(limitKiB: number, script: string): T {
  const out = execFileSync(
    "bash",
    [
      "-c",
      `ulimit -f ${limitKiB} && exec "$0" --import tsx/esm --input-type=module -e "$1"`,
      process.execPath,
      script,
    ],
    { cwd: ROOT, encoding: "utf8" },
  );
  return JSON.parse(out.trim().split("\n").at(-1)!) as T;
}
