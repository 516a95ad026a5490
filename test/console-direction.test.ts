/**
 * Right-to-left text in the console (contracts §14), in a real browser: where each piece of
 * text from elsewhere is drawn. Without direction isolation a Hebrew JSON key drew its value
 * on its left (`5 :"עברית"`), a right-to-left endpoint drew the model's name on its left, a
 * Hebrew parked reason read left to right, and a Hebrew paragraph of a message read left to
 * right with its final "." on the wrong side. The positions are measured on the page (a
 * Range's box around the characters), which is what a reader sees; the page's text (what
 * copying and `innerText` give) is unchanged. No worker: histories are imported.
 */
import type { Locator, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hasRightToLeft, JSON_BLOCK_LINES, jsonLineBlocks, jsonPieces } from "../console/src/direction.js";
import { formatJson } from "../console/src/json-format.js";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet, sessionWithToolResult } from "./support/console-browser.js";
import type { FleetEnv } from "./support/fleet-env.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, tools: [] };

/**
 * The left edge, in px, of the `nth` occurrence of `text` in `locator`'s text, as drawn (its
 * characters may lie in several text nodes' worth of elements: searched node by node).
 */
async function leftOf(locator: Locator, text: string, nth = 0): Promise<number> {
  return locator.evaluate(
    (element, [wanted, which]) => {
      const walker = element.ownerDocument.createTreeWalker(element, 4 /* NodeFilter.SHOW_TEXT */);
      let seen = 0;
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const data = node.textContent ?? "";
        for (let at = data.indexOf(wanted); at >= 0; at = data.indexOf(wanted, at + 1)) {
          if (seen++ < which) continue;
          const range = element.ownerDocument.createRange();
          range.setStart(node, at);
          range.setEnd(node, at + wanted.length);
          return range.getBoundingClientRect().left;
        }
      }
      throw new Error(`no ${JSON.stringify(wanted)} (#${which}) in ${JSON.stringify(element.textContent)}`);
    },
    [text, nth] as const,
  );
}

/** The text a person sees in an element. */
// biome-ignore lint/performance/useDomNodeTextContent: the rendered text is what is asserted
const shownText = (locator: Locator) => locator.innerText();

describe("which JSON strings are isolated", () => {
  it("cuts out the insides of the strings with right-to-left letters, quotes and escapes kept", () => {
    const json = JSON.stringify({ 'a"ש': "x", b: ["مرحبا 1", "plain"], c: "\u200F." }, null, 2);
    const pieces = jsonPieces(json);
    expect(pieces.map((piece) => (typeof piece === "string" ? piece : piece.isolate)).join("")).toBe(json);
    expect(pieces.filter((piece) => typeof piece !== "string")).toEqual([
      { isolate: 'a\\"ש' },
      { isolate: "مرحبا 1" },
      { isolate: "\u200F." },
    ]);
    expect(jsonPieces('{"big": "ascii only"}')).toEqual(['{"big": "ascii only"}']);
    expect(["abc", "123", "١٢", "ﷺ", "𐤀"].map(hasRightToLeft)).toEqual([false, false, true, true, true]);
  });
});

describe("formatted JSON in blocks of lines", () => {
  it("cuts it between lines, JSON_BLOCK_LINES a block, the blocks joined by newlines its text", () => {
    const json = formatJson(JSON.stringify(Array.from({ length: 250 }, (_, i) => `שלום ${i}`)))!;
    const blocks = jsonLineBlocks(json);
    expect(blocks.join("\n")).toBe(json);
    expect(blocks.map((block) => block.split("\n").length)).toEqual([JSON_BLOCK_LINES, JSON_BLOCK_LINES, 52]);
    expect(jsonLineBlocks('{"a": 1}')).toEqual(['{"a": 1}']);
  });
});

describe("right-to-left text in the console", () => {
  let fleet: FleetEnv;
  let base: string;
  let client: FleetClient;
  let page: Page;
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consoledirection", { viewport: { width: 1280, height: 900 } });
    ({ fleet, base, client, page } = opened);
  }, 90_000);

  afterAll(async () => {
    await opened?.close();
  });

  it("keeps JSON keys, model names and reasons in Hebrew or Arabic where they are written", async () => {
    const { id } = await client.createSession({
      agent,
      metadata: { עברית: 5, owner: "ops" },
      messages: [
        { role: "user", content: "Hello there.\nשלום עולם." },
        {
          role: "assistant",
          content: "",
          stopReason: "tool_use",
          toolCalls: [{ id: "c1", name: "write_file", arguments: { שם: 42 } }],
        },
        { role: "tool", toolCallId: "c1", name: "write_file", content: '{"קובץ": 17}', success: true },
      ],
    });
    const { sql } = fleet.database;
    await sql`update sessions set status = 'parked', parked_reason = ${"עברית 123 → next"} where id = ${id}`;
    await sql`insert into runs (id, session_id, tenant, kind, trigger, status, ended_reason, model, started_at, ended_at)
              select ${`${id}-r`}, id, tenant, 'resume', 'api', 'ended', 'completed',
                     ${JSON.stringify({ endpoint: "ملف", model: "7" })}::jsonb, now(), now()
              from sessions where id = ${id}`;

    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator("#seq-3").waitFor();

    // A JSON key in Hebrew: its value stays on its right (it was drawn on its left).
    const args = page.locator("#seq-2 .calls pre.json");
    expect(await leftOf(args, "42")).toBeGreaterThan(await leftOf(args, "שם"));
    const result = page.locator("#seq-3 pre.json");
    expect(await leftOf(result, "17")).toBeGreaterThan(await leftOf(result, "קובץ"));
    await page.getByText("Agent and metadata").click();
    const metadata = page.locator("details pre.json");
    expect(await leftOf(metadata, "5")).toBeGreaterThan(await leftOf(metadata, "עברית"));
    expect(await shownText(metadata)).toContain('"עברית": 5');

    // A run on another model: endpoint, then its model (was "7:ملف").
    const model = page.locator("table.runs .run-model");
    expect(await shownText(model)).toBe("on ملف:7");
    expect(await leftOf(model, "7")).toBeGreaterThan(await leftOf(model, "ملف"));

    // A message: the English paragraph left to right from the left edge, the Hebrew one right
    // to left, its final "." on its left and the paragraph against the right edge.
    const message = page.locator("#seq-1 pre.text");
    const box = (await message.boundingBox())!;
    expect(await leftOf(message, "Hello")).toBeLessThan(box.x + 20);
    expect(await leftOf(message, ".", 1)).toBeLessThan(await leftOf(message, "שלום"));
    expect(await leftOf(message, "שלום")).toBeGreaterThan(box.x + box.width / 2);
    expect(await shownText(message)).toBe("Hello there.\nשלום עולם.");

    // A parked reason in Hebrew reads right to left as a whole, on the session page and in
    // the list: its "next" on the left of its number, not after it as in English.
    const reason = page.locator(".parked-reason");
    expect(await leftOf(reason, "next")).toBeLessThan(await leftOf(reason, "123"));
    expect(await leftOf(reason, "parked:")).toBeLessThan(await leftOf(reason, "next"));
    await page.goto(`${base}/console?status=parked`);
    const row = page.locator("table.list tbody tr", { has: page.getByRole("link", { name: id }) });
    const cell = row.locator("td").nth(2);
    expect(await leftOf(cell, "next")).toBeLessThan(await leftOf(cell, "123"));
    expect(await shownText(cell)).toBe("עברית 123 → next");
  }, 60_000);

  it("isolates each right-to-left string of a big JSON result, laid out a block of lines at a time", async () => {
    // 100,000 such strings in one <pre> took 24 s to show (190 s on a loaded machine): one
    // layout of every line at once. In blocks of lines, each its own box, it is linear.
    const keys = 2_000;
    const result = JSON.stringify(
      Object.fromEntries(Array.from({ length: keys }, (_, i) => [`קובץ ${i}`, i])),
    );
    const id = await sessionWithToolResult(client, result, "after the files");
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByText("after the files").waitFor();
    const pre = page.locator("#seq-3 pre.json");
    const blocks = pre.locator(":scope > .json-lines");
    expect(await blocks.count()).toBe(Math.ceil((keys + 2) / JSON_BLOCK_LINES));
    expect(
      await blocks
        .first()
        .evaluate((block) => block.ownerDocument.defaultView!.getComputedStyle(block).display),
    ).toBe("block");
    // The text is the formatted JSON, line for line; each key still isolated: its value on its right.
    expect(await shownText(pre)).toBe(formatJson(result));
    const last = blocks.last();
    expect(await leftOf(last, `${keys - 1}`, 1)).toBeGreaterThan(await leftOf(last, `קובץ ${keys - 1}`));
    expect(await pre.locator("bdi").count()).toBe(keys);
  }, 60_000);
});
