/**
 * JSON that nests deep, in the console's session page (contracts §14). A tool result is
 * whatever the tool read (a web page, a file, an upstream's answer: up to 1,000,000
 * characters), and laid out with two spaces a level, `[` nested 5,000 deep (10 KB) was 50 MB
 * of indentation, and 20,000 deep (40 KB) more than a string can hold: the RangeError, at
 * each render of the transcript, left the page with no message shown. Such JSON is shown as it was written; JSON that lays out to a reasonable
 * size still is laid out.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatJson } from "../console/src/json-format.js";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet, sessionWithToolResult } from "./support/console-browser.js";

const nested = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;

describe("formatJson on deep JSON", () => {
  it("gives up (null: shown as written) where the layout would be far bigger than the text", () => {
    // Its length, not the text: a failure would print 50 MB.
    expect(formatJson(nested(5_000))?.length ?? null).toBeNull();
    let laidOut: string | null = "";
    expect(() => {
      laidOut = formatJson(nested(20_000));
    }).not.toThrow();
    expect(laidOut).toBeNull();
    // Ordinary nesting is still laid out.
    expect(formatJson(nested(3))).toBe("[\n  [\n    []\n  ]\n]");
    const wide = JSON.stringify({
      rows: Array.from({ length: 20_000 }, (_, i) => ({ id: i, tags: ["a", "b"] })),
    });
    expect(formatJson(wide)).toBe(JSON.stringify(JSON.parse(wide), null, 2));
  });
});

describe("the console with deeply nested JSON", () => {
  let opened: ConsoleFleet;
  let base: string;
  let client: FleetClient;

  beforeAll(async () => {
    opened = await openConsoleFleet("consoledeepjson");
    ({ base, client } = opened);
  }, 90_000);

  afterAll(async () => {
    await opened?.close();
  });

  it("shows a session whose tool read 20,000 nested brackets, and what came after it", async () => {
    const deep = nested(20_000);
    const id = await sessionWithToolResult(client, deep, "after the deep result", { url: "x" });
    const { page } = opened;
    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator(".transcript").getByText("after the deep result").waitFor();
    // The result is in the page's text, as written (not 800 MB of indentation).
    const shown = await page.locator("#seq-3 pre").evaluate((pre) => pre.textContent ?? "");
    expect(shown.length).toBe(deep.length);
    expect(shown === deep).toBe(true);
  }, 60_000);

  it("shows a call's arguments 93 levels deep around 1,000,000 numbers as one line, not 200 MB", async () => {
    // As deep as a body may nest them (100 levels from the body's root): each number laid out
    // on a line of its own, indented 188 spaces.
    const numbers = JSON.parse(`${"[".repeat(91)}[${Array(1_000_000).fill(0).join(",")}]${"]".repeat(91)}`);
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "ok" }] }, tools: [] },
      messages: [
        { role: "user", content: "sum them" },
        {
          role: "assistant",
          content: "",
          toolCalls: [{ id: "c1", name: "sum", arguments: { numbers } }],
          stopReason: "tool_use",
        },
        { role: "tool", toolCallId: "c1", name: "sum", content: "0", success: true },
        { role: "assistant", content: "after the wide arguments", stopReason: "end_turn" },
      ],
    });
    const { page } = opened;
    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator(".transcript").getByText("after the wide arguments").waitFor();
    const shown = await page.locator("#seq-2 pre.json").evaluate((pre) => pre.textContent?.length ?? 0);
    expect(shown).toBe(JSON.stringify({ numbers }).length);
  }, 60_000);
});
