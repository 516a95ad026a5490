/**
 * A program that embeds a role (test/fixtures/embedded-worker.ts, embedded-sweeper.ts): it
 * prints `started`, stops the role at a line on stdin and prints `stopped`, then should exit
 * by itself. Still alive 10 s after its stop, it prints what keeps it so (JSON); its stop not
 * returned after 40 s, it prints `stop not returned`.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { resolve } from "node:path";
import { exitedWithOutput } from "./child-exit.js";
import { ROOT } from "./fleet-env.js";

/** A started embedding program and its output so far (stdout and stderr). */
export type Embedding = { child: ChildProcess; out: () => string; exited: Promise<number | null> };

/** Starts `fixture` (a path under the repository) with `env` on top of this process's. */
export function startEmbedding(fixture: string, env: Record<string, string>): Embedding {
  const child = spawn(process.execPath, ["--import", "tsx", resolve(ROOT, fixture)], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let out = "";
  child.stdout?.on("data", (chunk) => {
    out += chunk;
  });
  child.stderr?.on("data", (chunk) => {
    out += chunk;
  });
  return { child, out: () => out, exited: exitedWithOutput(child) };
}

/**
 * Asks the program to stop its role; then tells whether it exited by itself, or said it was
 * still alive 10 s after its stop returned, or that its stop had not returned (and on what).
 */
export async function afterStop(program: Embedding): Promise<{ ended: "exited" | "alive"; out: string }> {
  program.child.stdin?.end("stop\n");
  const ended = await Promise.race([
    program.exited.then(() => "exited" as const),
    new Promise<"alive">((resolve) => {
      const check = setInterval(() => {
        if (/stopped\n\[|stop not returned/.test(program.out())) {
          clearInterval(check);
          resolve("alive");
        }
      }, 100);
      void program.exited.then(() => clearInterval(check));
    }),
  ]);
  return { ended, out: program.out() };
}

/** Ends (SIGKILL) each program still running, and waits for it. */
export async function killEmbeddings(programs: Iterable<Embedding>): Promise<void> {
  for (const { child, exited } of programs)
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await exited;
    }
}
