/**
 * The console's transcript is rendered in blocks of 50 messages, each laid out on its own
 * (`contain: content`: transcript.tsx TRANSCRIPT_BLOCK). Each block used to be an `<ol>`, so
 * a screen reader announced a list of 50 items, then another, and another. Now the
 * accessibility tree holds one list with every message as its item, the blocks still boxes
 * that contain their layout. Read with Playwright's ARIA snapshot, as assistive technology
 * gets it from Chromium.
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";
import { questionsAndAnswers } from "./support/histories.js";

/** Three blocks: two of 50, one of 20. */
const TOTAL = 120;

describe("the console's transcript to assistive technology", () => {
  let base: string;
  let client: FleetClient;
  let page: Page;
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolelist");
    ({ base, client, page } = opened);
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
  });

  it("is one list with every message as an item, in blocks that contain their layout", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "x" }] } },
      messages: questionsAndAnswers(TOTAL),
    });
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByText(`Transcript (${TOTAL} messages)`).waitFor();
    await page.locator(`#seq-${TOTAL}`).waitFor();
    const section = page.locator('section[aria-labelledby="transcript-title"]');

    const snapshot = await section.ariaSnapshot();
    const lines = snapshot.split("\n");
    // One list, at one depth, whose items are the messages in order.
    const lists = lines.filter((line) => /^\s*- list\b/.test(line));
    expect(lists).toHaveLength(1);
    const listIndent = lists[0]!.indexOf("-");
    const items = lines.filter((line) => /^\s*- listitem\b/.test(line));
    expect(items).toHaveLength(TOTAL);
    expect(new Set(items.map((line) => line.indexOf("-")))).toEqual(new Set([listIndent + 2]));
    // Each item starts with its message's "#seq": every message, in order.
    const seqs = lines
      .filter((line) => /^\s*- text: "#\d+"$/.test(line))
      .map((line) => Number(/#(\d+)/.exec(line)![1]));
    expect(seqs).toEqual(Array.from({ length: TOTAL }, (_, i) => i + 1));
    expect(await section.getByRole("list").count()).toBe(1);
    expect(await section.getByRole("list").getByRole("listitem").count()).toBe(TOTAL);

    // The rendering gain stays: the messages sit in blocks of 50, each containing its layout.
    const blocks = await page
      .locator(".transcript-block")
      .evaluateAll((found) =>
        found.map(
          (block) =>
            [
              block.children.length,
              block.ownerDocument.defaultView!.getComputedStyle(block).contain,
            ] as const,
        ),
      );
    expect(blocks).toEqual([
      [50, "content"],
      [50, "content"],
      [20, "content"],
    ]);
  }, 60_000);
});
