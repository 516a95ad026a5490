/**
 * The list's filters (contracts §14) with invisible characters, in a real browser. A value
 * pasted with a zero-width space (from a copied id, say) looked like a clean one in its box
 * but matched nothing. Now a filter box shows such a character as its code point
 * (`‹U+200B›`), as the rest of the page does, says so beside the form with a button that
 * removes them, and sends what it shows: each such code point as its character, so that a
 * parked reason copied from the list (where its characters are shown so) finds its sessions.
 * The requests the page sends to `/v1/sessions` are recorded. No worker: the API is in its
 * open loopback dev mode.
 */
import type { Locator, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { unrevealed } from "../console/src/invisible.js";
import type { FleetClient } from "../src/producer/client.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";
import type { FleetEnv } from "./support/fleet-env.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, tools: [] };
const ZWSP = "\u200B";
const RLO = "\u202E";

/** The text a person sees in an element. */
// biome-ignore lint/performance/useDomNodeTextContent: the rendered text is what is asserted
const shownText = (locator: Locator) => locator.first().innerText();

describe("code points written in a filter", () => {
  it("turn back into the invisible characters they stand for, and only those", () => {
    expect(unrevealed("end‹U+202E›turn ‹U+200B›")).toBe(`end${RLO}turn ${ZWSP}`);
    expect(unrevealed("‹U+E0041›‹U+0041›‹U+110000›‹U+200b›")).toBe("\u{E0041}‹U+0041›‹U+110000›‹U+200b›");
  });
});

describe("the console's filters with invisible characters", () => {
  let fleet: FleetEnv;
  let base: string;
  let client: FleetClient;
  let page: Page;
  let opened: ConsoleFleet;
  /** The filters of each list read the page sent. */
  const sent: { parkedReason: string | null; batch: string | null }[] = [];

  beforeAll(async () => {
    opened = await openConsoleFleet("consolefilters", { viewport: { width: 1280, height: 900 } });
    ({ fleet, base, client, page } = opened);
    page.on("request", (request) => {
      const url = new URL(request.url());
      if (url.pathname !== "/v1/sessions") return;
      sent.push({ parkedReason: url.searchParams.get("parkedReason"), batch: url.searchParams.get("batch") });
    });
  }, 90_000);

  afterAll(async () => {
    await opened?.close();
  });

  const row = (id: string) =>
    page.locator("table.list tbody tr", { has: page.getByRole("link", { name: id }) });

  it("shows a pasted invisible character, sends what it shows, and removes it on request", async () => {
    const { id } = await client.createSession({ agent });
    const marked = (await client.createSession({ agent })).id;
    const { sql } = fleet.database;
    await sql`update sessions set status = 'parked', parked_reason = 'provider_rejected' where id = ${id}`;
    await sql`update sessions set status = 'parked', parked_reason = ${`unknown_stop: end${RLO}turn`}
              where id = ${marked}`;

    await page.goto(`${base}/console`);
    await row(id).waitFor();
    const reason = page.getByLabel("Parked reason");
    await reason.fill(`provider${ZWSP}_rejected`);
    // Shown as it is, not as a clean value.
    expect(await reason.inputValue()).toBe("provider‹U+200B›_rejected");
    expect(await shownText(page.locator(".hint"))).toContain(
      "The parked reason filter holds invisible characters",
    );
    sent.length = 0;
    await page.getByRole("button", { name: "Apply" }).click();
    // No parked reason's code holds one: the API says so, and the page shows its words (with
    // the character shown), not an empty list.
    await page.locator("p.error").waitFor();
    expect(await shownText(page.locator("p.error"))).toContain('"provider‹U+200B›_rejected" is none');
    expect(sent.at(-1)).toEqual({ parkedReason: `provider${ZWSP}_rejected`, batch: null });
    expect(await reason.inputValue()).toBe("provider‹U+200B›_rejected");

    await page.getByRole("button", { name: "Remove them" }).click();
    await row(id).waitFor();
    expect(await reason.inputValue()).toBe("provider_rejected");
    expect(sent.at(-1)).toEqual({ parkedReason: "provider_rejected", batch: null });
    expect(await page.locator(".hint").count()).toBe(0);

    // A parked reason copied from the list, its override shown as ‹U+202E›, finds its session.
    await page.goto(`${base}/console?status=parked`);
    const copied = await shownText(row(marked).locator("td").nth(2));
    expect(copied).toBe("unknown_stop: end‹U+202E›turn");
    await reason.fill(copied);
    await page.getByRole("button", { name: "Apply" }).click();
    // Only it: the list before had the other parked session too.
    await expect.poll(() => page.locator("table.list tbody tr").count()).toBe(1);
    await row(marked).waitFor();
    expect(sent.at(-1)).toEqual({ parkedReason: `unknown_stop: end${RLO}turn`, batch: null });
  }, 60_000);

  it("shows the invisible characters of a filter that came with a link", async () => {
    const created = await client.createBatch([{ agent, customId: "one" }]);
    const batchId = created.id;
    const inBatch = created.sessions[0]!.id;
    await page.goto(`${base}/console?batch=${encodeURIComponent(`${batchId}${ZWSP}`)}`);
    await page.getByText("No session matches these filters.").waitFor();
    const box = page.getByLabel("Batch");
    expect(await box.inputValue()).toBe(`${batchId}‹U+200B›`);
    expect(await shownText(page.locator(".hint"))).toContain("The batch filter holds invisible characters");
    expect(sent.at(-1)).toEqual({ parkedReason: null, batch: `${batchId}${ZWSP}` });

    await page.getByRole("button", { name: "Remove them" }).click();
    await row(inBatch).waitFor();
    expect(await box.inputValue()).toBe(batchId);
    expect(sent.at(-1)).toEqual({ parkedReason: null, batch: batchId });
  }, 60_000);
});
