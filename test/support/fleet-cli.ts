/** The `fleet` command as a user runs it: a child process, its exit code and output. */
import { spawn } from "node:child_process";
import { exitedWithOutput } from "./child-exit.js";
import { FLEET_BIN, ROOT } from "./fleet-env.js";

export type CliResult = { code: number | null; stdout: string; stderr: string };

/**
 * Runs `fleet ARGS` with the environment plus `env` (in `cwd`, default the repository);
 * rejects if it has not exited in `timeoutMs`. `onStderr` sees its stderr so far as it comes
 * (a test that acts when the command has reached a point, rather than after a guessed delay).
 */
export function runFleetCli(
  args: string[],
  env: Record<string, string | undefined>,
  timeoutMs = 60_000,
  cwd = ROOT,
  onStderr?: (stderr: string) => void,
  /** Written to its stdin, which is then closed (default: no stdin at all). */
  stdin?: string | Buffer,
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [FLEET_BIN, ...args], {
      cwd,
      env: { ...process.env, ...env },
      stdio: [stdin === undefined ? "ignore" : "pipe", "pipe", "pipe"] as ["pipe", "pipe", "pipe"],
    });
    // A command that exits before reading all of it must not fail the test with EPIPE.
    child.stdin?.on("error", () => {});
    if (stdin !== undefined) child.stdin?.end(stdin);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => {
      stdout += d;
    });
    child.stderr.on("data", (d) => {
      stderr += d;
      onStderr?.(stderr);
    });
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`fleet ${args.join(" ")} did not exit in ${timeoutMs} ms:\n${stdout}\n${stderr}`));
    }, timeoutMs);
    void exitedWithOutput(child).then((code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}
