/**
 * The console's key form (contracts §14) with what a careless operator pastes: a key copied
 * along with a character no request header can carry (a zero-width space from a chat or a
 * document, a word joiner) or with spaces inside. Such a key is said to be malformed at once,
 * naming the character, and is not kept. Before, the page kept it, and every read failed in
 * the browser (fetch refuses such a header) as if the network were down: "trying again in
 * 30 s", for ever, with the key never asked for again. A key the API refuses (mistyped,
 * revoked) brings the form back saying so, with the API's reason; it said "This API needs a
 * key." as if none had been entered.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

describe("the console's key form", () => {
  let opened: ConsoleFleet;
  let key = "";

  beforeAll(async () => {
    opened = await openConsoleFleet("consolekeyform");
    key = (await new ApiKeys(opened.fleet.database).create("ops")).key;
  }, 90_000);

  afterAll(async () => {
    await opened?.close();
  });

  const stored = () =>
    opened.page.evaluate<string | null>('sessionStorage.getItem("agent-fleet.console.key")');

  it("refuses a key holding a character no header carries or a space, and takes the key alone", async () => {
    const { page, base } = opened;
    await page.goto(`${base}/console`);
    const field = page.getByLabel("Key", { exact: true });
    const use = page.getByRole("button", { name: "Use key" });
    const said = page.locator(".key-form [role=alert]");

    await field.fill(`${key}\u200B`);
    await use.click();
    await said.waitFor();
    expect(await said.textContent()).toContain("‹U+200B›");
    expect(await stored()).toBeNull();
    expect(await page.getByRole("heading", { name: "API key" }).count()).toBe(1);

    await field.fill(`${key.slice(0, 6)} ${key.slice(6)}`);
    await use.click();
    await said.filter({ hasText: "space" }).waitFor();
    expect(await stored()).toBeNull();

    // The key alone (with spaces around it, as pasted) is taken.
    await field.fill(` ${key} `);
    await use.click();
    await page.getByRole("heading", { name: "Sessions" }).waitFor();
    expect(await stored()).toBe(key);
  }, 60_000);

  it("says the API refused the key when it answers 401 to it, with the API's reason", async () => {
    const { page, base } = opened;
    await page.goto(`${base}/console`);
    await page.evaluate("sessionStorage.clear()");
    await page.goto(`${base}/console`);
    const asked = page.locator(".key-form p").first();
    expect(await asked.textContent()).toContain("This API needs a key.");
    await page.getByLabel("Key", { exact: true }).fill("fk_000000000000_revoked-or-mistyped");
    await page.getByRole("button", { name: "Use key" }).click();
    // The form comes back saying why, not as if no key had been entered.
    const refused = page.locator(".key-form [role=alert]", { hasText: "refused" });
    await refused.waitFor();
    expect(await refused.textContent()).toContain("not valid (unknown or revoked)");
    expect(await asked.textContent()).not.toContain("This API needs a key.");
  }, 60_000);
});
