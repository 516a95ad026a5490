/**
 * `fleet help NAME` with a NAME that is no command says so on one line, exit 2, as `fleet NAME`
 * does. Before, it printed the whole help on stderr (exit 2) without a word about NAME, so a
 * typo (`fleet help workers`) looked like a help text that left the command out.
 */
import { describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";

describe("fleet help with an unknown command", () => {
  it("one line naming it, exit 2, as `fleet NAME` says", async () => {
    const [help, direct] = await Promise.all([
      runFleetCli(["help", "workers"], {}),
      runFleetCli(["workers"], {}),
    ]);
    expect(help.stderr).toBe("fleet: unknown command 'workers' (Did you mean worker?); see `fleet --help`\n");
    expect(help.stderr).toBe(direct.stderr);
    expect(help.stdout).toBe("");
    expect(help.code).toBe(2);
  });

  it("`fleet batch help NAME` (a group's help) the same: one line, as `fleet batch NAME` says", async () => {
    // It printed the group's whole help on stderr (38 lines), exit 2, without a word about NAME.
    const [help, direct, keys] = await Promise.all([
      runFleetCli(["batch", "help", "stauts"], {}),
      runFleetCli(["batch", "stauts"], {}),
      runFleetCli(["keys", "help", "remove"], {}),
    ]);
    expect(help.stderr).toBe(direct.stderr);
    expect(help.stderr).toMatch(/^fleet batch: unknown command 'stauts'.*; see `fleet batch --help`\n$/);
    expect(help.code).toBe(2);
    expect(keys.stderr).toMatch(/^fleet keys: unknown command 'remove'.*; see `fleet keys --help`\n$/);
    expect(keys.code).toBe(2);
    const known = await runFleetCli(["session", "help", "export"], {});
    expect(known.stdout).toMatch(/^Usage: fleet session export/);
    expect(known.code).toBe(0);
  });

  it("a command's help still shows, exit 0", async () => {
    const result = await runFleetCli(["help", "migrate"], {});
    expect(result.stdout).toMatch(/^Usage: fleet migrate/);
    expect(result.code).toBe(0);
  });
});
