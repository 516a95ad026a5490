/**
 * `fleet session events ID WORD` with a word other than on or off is a usage error of the
 * command, as a bad number is: one line naming the command and its help, exit 2. Before, it
 * was `fleet: setting: must be on or off, not "maybe"`, naming an internal variable and not
 * the command (checked before any request, so no API is needed here).
 */
import { describe, expect, it } from "vitest";
import { usageLine } from "./support/usage-line.js";

describe("fleet session events ID WORD", () => {
  it("refuses a word other than on or off as a usage error of the command", async () => {
    const { line, code } = await usageLine(["session", "events", "s1", "maybe"]);
    expect(code).toBe(2);
    expect(line).toBe(
      "fleet session events: command-argument value 'maybe' is invalid for argument 'on|off'. expected on or off; see `fleet session events --help`",
    );
  });
});
