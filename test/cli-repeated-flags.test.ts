/**
 * A flag that takes one value, given twice, is a usage error naming it (exit 2), before the
 * command does anything. Before, commander kept the last value without a word:
 * `fleet keys create --tenant acme --tenant globex` (a script that appended its own --tenant
 * to a shared command line) made a key for globex, and `fleet batch status ID --api A --api B`
 * asked B. The flags meant to repeat (`--tools`, `--extensions` of `fleet worker` and `fleet up`)
 * still do; on/off flags given twice say the same thing twice and stay accepted.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { usageLine } from "./support/usage-line.js";

/** An address nothing listens on: a command line accepted by mistake fails there, not here. */
const NOWHERE = "http://127.0.0.1:1";
const ID = "00000000-0000-4000-8000-000000000000";

describe("a single-value flag given twice", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("cli-repeated-flags");
  }, 60_000);
  afterAll(() => fleet?.close());

  it("`fleet keys create --tenant a --tenant b` makes no key and names the flag (exit 2)", async () => {
    const result = await runFleetCli(["keys", "create", "--tenant", "acme", "--tenant", "globex"], fleet.env);
    expect(result.stderr.trim()).toBe(
      "fleet keys create: option '--tenant <NAME>' was given more than once, and it takes one value; see `fleet keys create --help`",
    );
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    const keys = await fleet.database.sql`select tenant from api_keys`;
    expect(keys).toEqual([]);
  }, 60_000);

  // Each line ends in `--help`: one accepted by mistake shows its help (exit 0) and runs nothing.
  it.each([
    [
      ["batch", "status", ID, "--api", NOWHERE, "--api", "http://127.0.0.1:2"],
      "fleet batch status",
      "--api <URL>",
    ],
    [["api", "--port", "0", "--port", "1"], "fleet api", "--port <N>"],
    [["up", "--workers", "1", "--workers", "2"], "fleet up", "--workers <N>"],
    [["demo", "--sessions", "1", "--sessions=2"], "fleet demo", "--sessions <N>"],
    [["resume-point", "-f", "a.json", "--file", "b.json"], "fleet resume-point", "-f, --file <HISTORY.json>"],
    [["watch", ID, "--after", "1-0", "--after", "2-0"], "fleet watch", "--after <ID>"],
    [["session", "export", ID, "--out", "a", "--out=b"], "fleet session export", "--out <FILE>"],
    [
      ["batch", "submit", "f.jsonl", "--webhook", "http://a", "--webhook", "http://b"],
      "fleet batch submit",
      "--webhook <URL>",
    ],
  ])("%j is a usage error naming the flag", async (args, command, flags) => {
    const { line, code } = await usageLine([...args, "--help"]);
    expect(line).toMatch(
      new RegExp(
        `^${command}: option '${flags.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}' was given more than once`,
      ),
    );
    expect(line).toContain(`; see \`${command} --help\``);
    expect(code).toBe(2);
  });

  it("the flags meant to repeat, and on/off flags, are still accepted (help shown: nothing refused first)", async () => {
    for (const args of [
      [
        "worker",
        "--tools",
        "a.js",
        "--tools",
        "b.js",
        "--extensions",
        "c.js",
        "--extensions",
        "d.js",
        "--help",
      ],
      ["up", "--tools", "a.js", "--tools", "b.js", "--help"],
      ["batch", "submit", "f.jsonl", "--wait", "--wait", "--help"],
      ["keys", "create", "--tenant", "acme", "--admin", "--admin", "--help"],
    ]) {
      const { line, code } = await usageLine(args);
      expect({ args, line, code }).toEqual({ args, line: undefined, code: 0 });
    }
  });
});
