/**
 * A text from elsewhere full of invisible characters, in the console (contracts §14). Each
 * one is shown as its code point (`‹U+200B›`, invisible.ts) in a marked box of its own: a tool
 * result of 100,000 zero-width spaces (300 KB; a tool result may hold 1,000,000 characters)
 * was 100,000 boxes in one line of a <pre>, and the session page took 45 s to show the
 * message after it, on a loaded 2-core machine (14.5 s in MAX_MARKED boxes: what is left is
 * Chromium laying out 800,000 characters that are not Latin-1). Past the first MAX_MARKED of a
 * text, the rest are written the same way as plain text: the text still reads as written.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_MARKED, revealed, revealedParts } from "../console/src/invisible.js";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet, sessionWithToolResult } from "./support/console-browser.js";

const ZWSP = "\u200B";

describe("revealedParts with many invisible characters", () => {
  it("marks the first MAX_MARKED and writes the rest as plain text, the whole reading as written", () => {
    const text = `a${ZWSP}`.repeat(MAX_MARKED + 10);
    const parts = revealedParts(text);
    expect(parts.filter((part) => typeof part !== "string")).toHaveLength(MAX_MARKED);
    expect(parts.map((part) => (typeof part === "string" ? part : part.mark)).join("")).toBe(revealed(text));
    // Fewer than that: every one marked, as before.
    expect(revealedParts(`a${ZWSP}b${ZWSP}`)).toEqual(["a", { mark: "‹U+200B›" }, "b", { mark: "‹U+200B›" }]);
  });
});

describe("the console with 20,000 invisible characters in a result", () => {
  let opened: ConsoleFleet;
  let base: string;
  let client: FleetClient;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolemanyinvisible");
    ({ base, client } = opened);
  }, 90_000);

  afterAll(async () => {
    await opened?.close();
  });

  it("shows the result written as code points, in MAX_MARKED boxes, not one a character", async () => {
    const id = await sessionWithToolResult(client, ZWSP.repeat(20_000), "after the invisible result");
    const { page } = opened;
    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator(".transcript").getByText("after the invisible result").waitFor();
    const shown = await page.locator("#seq-3 pre").evaluate((pre) => pre.textContent ?? "");
    expect(shown === "‹U+200B›".repeat(20_000)).toBe(true);
    expect(await page.locator("#seq-3 .invisible-char").count()).toBe(MAX_MARKED);
  }, 60_000);
});
