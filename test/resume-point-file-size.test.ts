/**
 * `fleet resume-point --file` reads its history whole before parsing it. Nothing bounded that
 * read: `--file /dev/zero`, or `--file -` fed by a stream that never ends, took 5.6 GB in 15 s
 * and went on until the machine ran out of memory; a file past what one JavaScript string holds
 * (~512 MiB) was refused as "not valid UTF-8; JSON must be UTF-8", which it was. A history file
 * is now read up to MAX_HISTORY_FILE_BYTES (256 MiB, 8 times the 32 MiB a session's history
 * holds) and one past it is refused saying so, exit 2.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MAX_HISTORY_FILE_BYTES } from "../src/producer/cli-resume-point.js";
import { FLEET_BIN, ROOT } from "./support/fleet-env.js";

/** Resident memory of a live process, in MiB (0 once it is gone). */
function rssMiB(pid: number): number {
  try {
    const line = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return line ? Number(line[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/**
 * `fleet resume-point --file FILE` with stdin from `stdin`; killed, and said so, once it holds
 * more than 1.5 GiB (an unbounded read would otherwise take the machine's memory).
 */
function resumePoint(
  file: string,
  stdin: string,
): Promise<{ code: number | null; stderr: string; tooBig: boolean }> {
  return new Promise((resolve) => {
    const child: ChildProcess = spawn(
      "bash",
      ["-c", `exec "$0" "$1" resume-point --file "$2" < "$3"`, process.execPath, FLEET_BIN, file, stdin],
      { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] },
    );
    let stderr = "";
    let tooBig = false;
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    const watch = setInterval(() => {
      if (child.pid !== undefined && rssMiB(child.pid) > 1536) {
        tooBig = true;
        child.kill("SIGKILL");
      }
    }, 100);
    const limit = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("close", (code) => {
      clearInterval(watch);
      clearTimeout(limit);
      resolve({ code, stderr, tooBig });
    });
  });
}

describe("fleet resume-point --file of a history that never ends", () => {
  it("the bound is 256 MiB, under what one string holds", () => {
    expect(MAX_HISTORY_FILE_BYTES).toBe(256 * 1024 * 1024);
  });

  for (const [what, file, stdin, name] of [
    ["a device", "/dev/zero", "/dev/null", "/dev/zero"],
    ["stdin", "-", "/dev/zero", "stdin"],
  ] as const)
    it(`from ${what}: refused once past the bound, exit 2, its memory bounded`, async () => {
      const run = await resumePoint(file, stdin);
      expect(run.tooBig, "held more than 1.5 GiB").toBe(false);
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr.trim()).toBe(
        `fleet resume-point: ${name} is larger than 256 MiB, more than any history a session holds; a history file is one JSON array of its messages`,
      );
    }, 90_000);
});
