/**
 * `fleet batch submit` and `fleet session import` read their input twice, so stdin, a FIFO or
 * a device is first copied whole into a file under $TMPDIR. Input that never ends, or one line
 * far past what a request holds (`/dev/zero`, a dump of one JSON document piped in by mistake),
 * was copied until the disk was full — 2 GB in 3.5 s here, the machine's Postgres on the same
 * disk included — to be refused afterwards for its first line (`line 1: the line is longer than
 * 16 MiB`). The copy now stops at the first line past that bound, and the command says so at once.
 * Run under `ulimit -f` (64 MiB), where the copy of old failed with the file system's EFBIG.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { untilOverlongLine } from "../src/commands/read-twice.js";
import { FLEET_BIN } from "./support/fleet-env.js";

/** `fleet ARGS` under a 64 MiB file size limit, `stdin` redirected from a path (or none). */
function fleetLimited(
  args: string[],
  env: Record<string, string>,
  stdin?: string,
): Promise<{ code: number | null; stderr: string; ms: number }> {
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      "bash",
      [
        "-c",
        `ulimit -f 65536 && exec "$0" "$@"${stdin === undefined ? " < /dev/null" : ` < ${stdin}`}`,
        process.execPath,
        FLEET_BIN,
        ...args,
      ],
      // No API is reached: the input is refused before anything is sent.
      { env: { ...process.env, ...env }, timeout: 60_000, maxBuffer: 1024 * 1024 },
      (error, _stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : null) : 0;
        resolve({ code, stderr, ms: Date.now() - started });
      },
    );
  });
}

describe("input that never ends, or one line past what a request holds", () => {
  let dir: string;
  let env: Record<string, string>;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "cli-endless-input-"));
    env = { TMPDIR: dir, FLEET_API_URL: "http://127.0.0.1:9", FLEET_API_KEY: "" };
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const copiesLeft = async () => (await readdir(dir)).filter((name) => name.startsWith("fleet-input-"));

  for (const [what, args, stdin, said] of [
    ["batch submit of /dev/zero", ["batch", "submit", "/dev/zero"], undefined, "/dev/zero:1: "],
    ["batch submit of stdin", ["batch", "submit", "-"], "/dev/zero", "stdin:1: "],
    ["session import of /dev/zero", ["session", "import", "/dev/zero"], undefined, "line 1: "],
    ["session import of stdin", ["session", "import", "-"], "/dev/zero", "line 1: "],
  ] as const) {
    it(`${what}: refused for its first line once it passes 16 MiB, its copy removed`, async () => {
      const run = await fleetLimited([...args], env, stdin);
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(`${said}the line is longer than 16 MiB`);
      expect(await copiesLeft()).toEqual([]);
    }, 90_000);
  }
});

describe("untilOverlongLine", () => {
  const copied = async (chunks: string[], max: number) => {
    const out: Buffer[] = [];
    for await (const chunk of untilOverlongLine(
      (async function* () {
        for (const c of chunks) yield Buffer.from(c);
      })(),
      max,
    ))
      out.push(chunk);
    return Buffer.concat(out).toString();
  };

  it("passes lines of up to the bound whole, across chunks, and stops one byte into a longer one", async () => {
    expect(await copied(["abcd\nab", "cd\r", "\nx"], 4)).toBe("abcd\nabcd\r");
    expect(await copied(["abcd\n", "ab", "cd\n"], 4)).toBe("abcd\nabcd\n");
    expect(await copied(["ab", "cdefgh\nnever read"], 4)).toBe("abcde");
    expect(await copied(["ok\n", "0123456789"], 4)).toBe("ok\n01234");
  });
});
