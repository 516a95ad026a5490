/**
 * The console (contracts §14) in a real browser, with what reaches it from places nobody
 * controls: model answers, stop reasons, tool names and outputs, callers' ids. HTML in them
 * is text, never run; a stop reason or a parked reason that is one unbroken string thousands
 * of characters long wraps instead of widening the page (it made the session list 29,000 px
 * wide, its other columns off screen); a 1 MB JSON tool result is formatted once, not at
 * every render (the page renders again at every streamed delta), and 1,000 runs are not
 * rendered again at each delta either. And a list page opened from
 * a bookmark has no "Previous page" button that would leave the console. No worker: the
 * histories are imported, and the API is in its open loopback dev mode.
 */
import type { Locator, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { eventStreamKey, eventsNotifyChannel } from "../src/shared/events.js";
import type { Message } from "../src/shared/messages.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";
import type { FleetEnv } from "./support/fleet-env.js";

const HTML = `<img src=x onerror="window.ran=1"><script>window.ran=2</script><a href="javascript:window.ran=3">x</a>`;
const LONG = "S".repeat(3_000);
const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, tools: [] };

/** The text a person sees in an element (as rendered: what bidi controls would rearrange). */
// biome-ignore lint/performance/useDomNodeTextContent: the rendered text is what is asserted
const shownText = (locator: Locator) => locator.innerText();

/** How far the page is wider than the window (0: no horizontal scrolling). */
const overflow = async (page: Page) =>
  Number(await page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"));

describe("the console with hostile content", () => {
  let fleet: FleetEnv;
  let base: string;
  let client: FleetClient;
  let page: Page;
  let opened: ConsoleFleet;

  /**
   * From a zeroed count of the times `on` formatted a time, a model streams "Streaming an answer"
   * to run `runId` of session `id` in four deltas, as a worker writes them; the count once `on`
   * shows the text.
   */
  async function timesFormattedWhileStreaming(on: Page, id: string, runId: string): Promise<number> {
    await on.evaluate(() => {
      (globalThis as unknown as { timesFormatted: number }).timesFormatted = 0;
    });
    const key = eventStreamKey(fleet.config.prefix, id);
    for (const text of ["Stream", "ing ", "an ", "answer"]) {
      const data = JSON.stringify({ sessionId: id, type: "MESSAGE_DELTA", runId, text });
      await fleet.redis.xadd(key, "*", "type", "MESSAGE_DELTA", "data", data);
      await fleet.redis.publish(eventsNotifyChannel(fleet.config.prefix), key);
    }
    await on.locator(".streaming").getByText("Streaming an answer").waitFor();
    return on.evaluate(() => (globalThis as unknown as { timesFormatted: number }).timesFormatted);
  }

  beforeAll(async () => {
    opened = await openConsoleFleet("consolehostile", { viewport: { width: 1280, height: 900 } });
    ({ fleet, base, client, page } = opened);
  }, 90_000);

  afterAll(async () => {
    await opened?.close();
  });

  it("shows HTML as text and wraps unbroken stop and parked reasons and ids", async () => {
    const { id } = await client.createSession({
      agent,
      messages: [
        { role: "user", content: HTML },
        {
          role: "assistant",
          content: `${HTML} ${LONG}`,
          stopReason: `stop${LONG}`,
          toolCalls: [{ id: "c1", name: `tool${"T".repeat(200)}`, arguments: { [HTML]: LONG } }],
        },
        { role: "tool", toolCallId: "c1", name: `tool${"T".repeat(200)}`, content: HTML, success: false },
      ],
    });
    const inBatch = (await client.createBatch([{ agent, customId: `C${"c".repeat(255)}` }])).sessions[0]!.id;
    // Parked as a run would park it on that stop reason (`unknown_stop: <the reason>`).
    await fleet.database.sql`
      update sessions set status = 'parked', parked_reason = ${`unknown_stop: stop${LONG}`}
      where id in ${fleet.database.sql([id, inBatch])}`;

    await page.goto(`${base}/console?status=parked`);
    await page.getByRole("link", { name: id }).waitFor();
    await page.getByText(`C${"c".repeat(255)}`).waitFor();
    expect(await overflow(page)).toBe(0);
    // The other columns are still on screen.
    const time = await page.locator("table.list tbody tr").first().locator("time").boundingBox();
    expect(time!.x + time!.width).toBeLessThanOrEqual(1280);

    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator(".transcript").getByText(HTML).first().waitFor();
    await page.locator("#seq-2 .badge", { hasText: "stop: stopSSS" }).waitFor();
    expect(await overflow(page)).toBe(0);
    expect(await page.evaluate(() => (globalThis as unknown as { ran?: number }).ran)).toBeUndefined();
    expect(await page.locator("main img, main script, main a[href^='javascript']").count()).toBe(0);
  }, 60_000);

  it("wraps a run's unbroken error and model name instead of pushing the runs table's other columns away", async () => {
    const { id } = await client.createSession({ agent, messages: [{ role: "user", content: "hi" }] });
    const { sql } = fleet.database;
    // A provider's error that echoes a blob, on a run asked to use a model of a long name.
    await sql`insert into runs (id, session_id, tenant, kind, trigger, status, ended_reason, error, model, started_at, ended_at)
              select ${`${id}-r`}, id, tenant, 'resume', 'api', 'ended', 'failed', ${`provider said: ${LONG}`},
                     ${JSON.stringify({ provider: "openai", model: `m${LONG}` })}::jsonb, now(), now()
              from sessions where id = ${id}`;
    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator("table.runs .outcome + div").getByText(`provider said: ${LONG}`).waitFor();
    // The table fits its box (it was 65,910 px wide, scrolled within it), its last column on screen.
    const widths = await page
      .locator("table.runs")
      .evaluate((table) => [table.scrollWidth, table.parentElement!.clientWidth]);
    expect(widths[0]).toBeLessThanOrEqual(widths[1]!);
    const usage = await page.locator("table.runs tbody tr").first().locator("td").last().boundingBox();
    expect(usage!.x + usage!.width).toBeLessThanOrEqual(1280);
    expect(await overflow(page)).toBe(0);
  }, 60_000);

  it("shows bidi overrides and invisible characters as their code points, so text reads as written", async () => {
    const RLO = "\u202E";
    // Shown as it is, this name reads "invoiceexe.pdf".
    const file = `invoice${RLO}fdp.exe`;
    const shownFile = "invoice‹U+202E›fdp.exe";
    const others = "\u202A\u202B\u202C\u202D\u2067\u2068\uFEFF\u{E0041}";
    const othersShown = "‹U+202A›‹U+202B›‹U+202C›‹U+202D›‹U+2067›‹U+2068›‹U+FEFF›‹U+E0041›";
    // Text needs these as they are: an emoji's joiner, a Persian word's non-joiner, an RLM.
    const needed = "👩\u200D💻 می\u200Cخواهم \u05E9\u05DC\u05D5\u05DD\u200F.";
    const tool = `read${RLO}_file`;
    const { id } = await client.createSession({
      agent,
      metadata: { [`owner${RLO}`]: `ops${RLO}cba` },
      messages: [
        { role: "user", content: `Open ${file}\tplease\nnow` },
        {
          role: "assistant",
          content: `rm\u200B -rf\u2066 /\u2069 ${others} ${needed}`,
          stopReason: `end${RLO}turn`,
          toolCalls: [
            { id: `c${RLO}1`, name: tool, arguments: { path: file } },
            { id: "c2", name: tool, arguments: {} },
          ],
        },
        { role: "tool", toolCallId: `c${RLO}1`, name: tool, content: `saved ${file}`, success: true },
        {
          role: "tool",
          toolCallId: "c2",
          name: tool,
          content: JSON.stringify({ path: file }),
          success: true,
        },
      ],
    });
    const inBatch = (await client.createBatch([{ agent, customId: `batch${RLO}fdp.exe` }])).sessions[0]!.id;
    const { sql } = fleet.database;
    await sql`update sessions set status = 'parked', parked_reason = ${`unknown_stop: end${RLO}turn`}
              where id in ${sql([id, inBatch])}`;
    await sql`insert into runs (id, session_id, tenant, kind, trigger, status, ended_reason, error, started_at, ended_at)
              select ${`${id}-r`}, id, tenant, 'run', 'api', 'ended', ${`done${RLO}fdp`}, ${`failed on ${file}`}, now(), now()
              from sessions where id = ${id}`;

    const inner = async (selector: string) => shownText(page.locator(selector).first());
    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator("#seq-4").waitFor();
    expect(await inner("#seq-1 pre.text")).toBe(`Open ${shownFile}\tplease\nnow`);
    expect(await inner("#seq-2 pre.text")).toBe(`rm‹U+200B› -rf‹U+2066› /‹U+2069› ${othersShown} ${needed}`);
    expect(await inner("#seq-2 .badge")).toBe("stop: end‹U+202E›turn");
    expect(await inner("#seq-2 .calls li")).toContain(`read‹U+202E›_file call c‹U+202E›1`);
    expect(await inner("#seq-2 .calls li")).toContain(`"path": "${shownFile}"`);
    expect(await inner("#seq-3 .msg-head .mono")).toBe("read‹U+202E›_file");
    expect(await inner("#seq-3 .msg-head .muted")).toBe("← call c‹U+202E›1");
    expect(await inner("#seq-3 pre.text")).toBe(`saved ${shownFile}`);
    expect(await inner("#seq-4 pre.json")).toContain(`"path": "${shownFile}"`);
    expect(await inner(".parked-reason")).toBe(" parked: unknown_stop: end‹U+202E›turn");
    expect(await inner("table.runs .outcome")).toBe("done‹U+202E›fdp");
    expect(await inner("table.runs .outcome + div")).toBe(`failed on ${shownFile}`);
    await page.getByText("Agent and metadata").click();
    expect(await inner("details pre.json")).toContain(`"owner‹U+202E›": "ops‹U+202E›cba"`);
    // Marked apart from the text around it, and none left as it was.
    expect(await shownText(page.locator("#seq-1 .invisible-char"))).toBe("‹U+202E›");
    const invisible = /[\u200B\u202A-\u202E\u2066-\u2069\uFEFF\u{E0000}-\u{E007F}]/u;
    expect(await shownText(page.locator("main"))).not.toMatch(invisible);

    // The list: custom ids and parked reasons.
    await page.goto(`${base}/console?status=parked`);
    const row = page.locator("table.list tbody tr", { has: page.getByRole("link", { name: inBatch }) });
    expect(await shownText(row)).toContain("batch‹U+202E›fdp.exe");
    expect(await shownText(row)).toContain("unknown_stop: end‹U+202E›turn");
    expect(await shownText(page.locator("main"))).not.toMatch(invisible);

    // Ids from a link: a page that names what it was asked for names it as written.
    await page.goto(`${base}/console/sessions/${encodeURIComponent(`abc${RLO}fdp`)}`);
    await page.getByRole("heading", { name: "Session not found" }).waitFor();
    expect(await inner("main p")).toContain("No session abc‹U+202E›fdp for this API key");
    await page.goto(`${base}/console/batches/${encodeURIComponent(`abc${RLO}fdp`)}`);
    await page.getByRole("heading", { name: "Batch not found" }).waitFor();
    expect(await inner("main p")).toContain("No batch abc‹U+202E›fdp for this API key");
  }, 60_000);

  it("shows a JSON tool result as the tool wrote it: big numbers and repeated keys kept", async () => {
    const content = '{"id": 12345678901234567890, "cmd": "rm -rf /", "cmd": "ls", "big": 1e999}';
    const { id } = await client.createSession({
      agent,
      messages: [
        { role: "user", content: "go" },
        {
          role: "assistant",
          content: "",
          stopReason: "tool_use",
          toolCalls: [{ id: "j", name: "t", arguments: {} }],
        },
        { role: "tool", toolCallId: "j", name: "t", content, success: true },
      ],
    });
    await page.goto(`${base}/console/sessions/${id}`);
    // Parsed and printed again it read 12345678901234567000, "cmd": "ls" alone, and null.
    expect(await shownText(page.locator("#seq-3 pre.json"))).toBe(
      '{\n  "id": 12345678901234567890,\n  "cmd": "rm -rf /",\n  "cmd": "ls",\n  "big": 1e999\n}',
    );
  }, 30_000);

  it("breaks lines at a lone CR and after U+2028 / U+2029, not only at \\n", async () => {
    const { id } = await client.createSession({
      agent,
      messages: [
        { role: "user", content: "one\rtwo\r\nthree\nfour\u2028five\u2029six" },
        { role: "assistant", content: "progress 10%\rprogress 100%", stopReason: "end_turn" },
      ],
    });
    await page.goto(`${base}/console/sessions/${id}`);
    const user = page.locator("#seq-1 pre.text");
    await user.waitFor();
    const shown = await shownText(user);
    console.log("shown:", JSON.stringify(shown));
    // A lone CR showed as a space: "one two\nthree…", the CR-only answer on one line.
    expect(shown).toBe("one\ntwo\nthree\nfour‹U+2028›\nfive‹U+2029›\nsix");
    expect(await shownText(page.locator("#seq-2 pre.text"))).toBe("progress 10%\nprogress 100%");
  }, 30_000);

  it("marks a result interrupted or cancelled only when it failed, not for a tool's own text", async () => {
    const interrupted = `The process stopped while this tool was running, so it may or may not have completed.`;
    const calls = ["a", "b", "c", "d"].map((id) => ({ id, name: "t", arguments: {} }));
    const { id } = await client.createSession({
      agent,
      messages: [
        { role: "user", content: "go" },
        { role: "assistant", content: "", toolCalls: calls, stopReason: "tool_use" },
        // A tool that succeeded and printed the texts the runtime writes for cut-short calls.
        { role: "tool", toolCallId: "a", name: "t", content: interrupted, success: true },
        { role: "tool", toolCallId: "b", name: "t", content: "Cancelled: it did not run.", success: true },
        // What the runtime writes: failed results.
        { role: "tool", toolCallId: "c", name: "t", content: interrupted, success: false },
        { role: "tool", toolCallId: "d", name: "t", content: "Cancelled: it did not run.", success: false },
      ],
    });
    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator("#seq-6").waitFor();
    const marked = async (seq: number) => page.locator(`#seq-${seq}`).getAttribute("class");
    expect(await marked(3)).toBe("msg tool");
    expect(await marked(4)).toBe("msg tool");
    expect(await marked(5)).toBe("msg tool interrupted");
    expect(await marked(6)).toBe("msg tool cancelled");
  }, 30_000);

  it("lists a running session and one waiting for its resume by their status, not one tail state", async () => {
    const history = [{ role: "user" as const, content: "hi" }];
    const running = (await client.createSession({ agent, messages: history })).id;
    const interrupted = (await client.createSession({ agent, messages: history })).id;
    const { sql } = fleet.database;
    // Both wait for the model's answer: one with its run going, one whose worker died.
    await sql`update sessions set tail_state = 'awaiting_model', run_started = true
               where id in ${sql([running, interrupted])}`;
    await sql`insert into runs (id, session_id, tenant, kind, trigger, status, started_at)
              select ${`${running}-r`}, id, tenant, 'run', 'api', 'running', now() from sessions where id = ${running}`;
    await page.goto(`${base}/console`);
    const row = (id: string) =>
      page.locator("table.list tbody tr", { has: page.getByRole("link", { name: id }) });
    await row(running)
      .locator(".badge", { hasText: /^running$/ })
      .waitFor();
    await row(interrupted)
      .locator(".badge", { hasText: /^interrupted$/ })
      .waitFor();
    // The tail state is still there, beside it.
    await row(interrupted).getByText("awaiting_model").waitFor();
  }, 30_000);

  it("formats a 1 MB JSON tool result once, not at each render", async () => {
    const big = JSON.stringify({ rows: Array.from({ length: 9_000 }, (_, i) => ({ i, v: "x".repeat(90) })) });
    const messages: Message[] = [];
    for (let i = 0; messages.length < 440; i++)
      messages.push(
        { role: "user", content: `q${i}` },
        { role: "assistant", content: `a${i}`, stopReason: "end_turn" },
      );
    messages.push(
      { role: "user", content: "big" },
      {
        role: "assistant",
        content: "",
        stopReason: "tool_use",
        toolCalls: [{ id: "b", name: "t", arguments: {} }],
      },
      { role: "tool", toolCallId: "b", name: "t", content: big, success: true },
    );
    const { id } = await client.createSession({ agent, messages });
    await page.addInitScript(() => {
      const parse = JSON.parse;
      const counted = globalThis as unknown as { bigParses: number };
      counted.bigParses = 0;
      JSON.parse = (text: string, reviver?: Parameters<typeof parse>[1]) => {
        if (typeof text === "string" && text.length > 500_000) counted.bigParses += 1;
        return parse(text, reviver);
      };
    });
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByText('"rows": [').first().waitFor();
    await expect.poll(() => page.locator(".transcript .msg").count()).toBe(443);
    await page.locator('[data-live-mode="stream"]').waitFor();
    // Each live message renders the transcript's last block again, the big result with it.
    const key = eventStreamKey(fleet.config.prefix, id);
    for (const seq of [444, 445]) {
      const message = { seq, role: "user", content: `live ${seq}`, createdAt: new Date().toISOString() };
      await fleet.redis.xadd(
        key,
        "*",
        "type",
        "MESSAGE",
        "data",
        JSON.stringify({ sessionId: id, type: "MESSAGE", message }),
      );
      await fleet.redis.publish(eventsNotifyChannel(fleet.config.prefix), key);
      await page.locator(".transcript").getByText(`live ${seq}`).waitFor();
    }
    expect(await page.evaluate(() => (globalThis as unknown as { bigParses: number }).bigParses)).toBe(1);
  }, 60_000);

  it("offers Previous page only when going back stays in the console", async () => {
    await Promise.all(Array.from({ length: 55 }, () => client.createSession({ agent })));
    await page.goto(`${base}/console`);
    await page.getByRole("link", { name: "Next page →" }).click();
    await page.getByText("Page 2").waitFor();
    await page.getByRole("button", { name: "← Previous page" }).click();
    await page.getByText("Page 1").waitFor();
    await page.goForward();
    await page.getByText("Page 2").waitFor();

    // The same page opened from a bookmark: going back would leave the console.
    const bookmarked = await opened.browser.context.newPage();
    await bookmarked.goto(page.url());
    await bookmarked.getByText("Page 2").waitFor();
    await bookmarked.locator("table.list").waitFor();
    expect(await bookmarked.getByRole("button", { name: "← Previous page" }).count()).toBe(0);
    await bookmarked.getByRole("link", { name: "Newest" }).click();
    await bookmarked.getByText("Page 1").waitFor();
    await bookmarked.close();
  }, 60_000);
  it("does not render 1,000 runs again at each streamed delta", async () => {
    const { id } = await client.createSession({ agent, messages: [{ role: "user", content: "hi" }] });
    const { sql } = fleet.database;
    await sql`
      insert into runs (id, session_id, kind, trigger, status, ended_reason, started_at, ended_at)
      select ${id} || '-' || n, ${id}, 'run', 'api', 'ended', 'completed', now(), now()
      from generate_series(1, 1000) n`;
    await page.addInitScript(() => {
      const counted = globalThis as unknown as { timesFormatted: number };
      counted.timesFormatted = 0;
      const format = Object.getOwnPropertyDescriptor(Intl.DateTimeFormat.prototype, "format")!.get!;
      Object.defineProperty(Intl.DateTimeFormat.prototype, "format", {
        get() {
          counted.timesFormatted += 1;
          return format.call(this);
        },
      });
      const dateText = Date.prototype.toLocaleString;
      Date.prototype.toLocaleString = function (this: Date, ...args: Parameters<typeof dateText>) {
        counted.timesFormatted += 1;
        return dateText.apply(this, args);
      };
    });
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByText("Runs (1000)").waitFor();
    await page.locator('[data-live-mode="stream"]').waitFor();
    // The message's time and such; not 2,000 run times at each of the four deltas.
    expect(await timesFormattedWhileStreaming(page, id, `${id}-1000`)).toBeLessThan(50);
  }, 60_000);

  it("does not render the transcript's messages again at each streamed delta", async () => {
    // Tool results full of Hebrew JSON strings: each string is isolated, thousands of elements.
    const messages: Message[] = [{ role: "user", content: "go" }];
    for (let i = 0; messages.length < 300; i++)
      messages.push(
        {
          role: "assistant",
          content: "",
          stopReason: "tool_use",
          toolCalls: [{ id: `c${i}`, name: "t", arguments: { שם: i } }],
        },
        {
          role: "tool",
          toolCallId: `c${i}`,
          name: "t",
          success: true,
          content: JSON.stringify(Array.from({ length: 50 }, (_, k) => ({ שם: `ערך ${k}` }))),
        },
      );
    const { id } = await client.createSession({ agent, messages });
    const watched = await opened.browser.context.newPage();
    await watched.addInitScript(() => {
      const counted = globalThis as unknown as { timesFormatted: number };
      counted.timesFormatted = 0;
      const format = Object.getOwnPropertyDescriptor(Intl.DateTimeFormat.prototype, "format")!.get!;
      Object.defineProperty(Intl.DateTimeFormat.prototype, "format", {
        get() {
          counted.timesFormatted += 1;
          return format.call(this);
        },
      });
    });
    await watched.goto(`${base}/console/sessions/${id}`);
    await watched.locator(`#seq-${messages.length}`).waitFor();
    await watched.locator('[data-live-mode="stream"]').waitFor();
    // Each message shows its time: the 200 shown messages rendered again for the deltas
    // formatted 202 times (and their isolated strings with them: 20 deltas on 60 such results
    // blocked the page for 1.3 s in all).
    expect(await timesFormattedWhileStreaming(watched, id, `${id}-1`)).toBeLessThan(50);
    await watched.close();
  }, 60_000);
});
