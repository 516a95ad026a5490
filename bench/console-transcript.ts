/**
 * `npm run bench:console -- --messages 50000 --rtl 100000`: how long the console's session
 * page takes to show a long transcript, and a tool result of many right-to-left strings, in
 * headless Chromium (test/support/console-browser.ts; the console as built in dist/console).
 *
 * The session is a real one of the fleet's API; its reads are answered in the browser with
 * `--messages` made-up messages (user, assistant, tool result of JSON, …; pages as the page
 * asks for them), so that no database holds 50,000 messages for it. Printed: the time from
 * the page's load to its last message shown (`#seq-N` in the page), and the longest task
 * (PerformanceObserver `longtask`) on the way. Then, with `--rtl` > 0, a session whose one
 * tool result is a JSON array of that many Hebrew strings: the time until the answer after it
 * is shown.
 */
import type { Page, Route } from "playwright-core";
import {
  type ConsoleFleet,
  openConsoleFleet,
  sessionWithToolResult,
} from "../test/support/console-browser.js";
import { benchOptions, fmt, wholeNumber } from "./support.js";

const values = benchOptions({
  messages: { type: "string", default: "50000" },
  rtl: { type: "string", default: "100000" },
});
const MESSAGES = wholeNumber("messages", values.messages, 0);
const RTL = wholeNumber("rtl", values.rtl, 0);

/** Message `seq` of the made-up transcript: a question, an answer asking a tool, its result (JSON). */
function message(seq: number) {
  const createdAt = new Date(Date.UTC(2025, 0, 1) + seq * 1_000).toISOString();
  const text = `message ${seq} ${"lorem ipsum ".repeat(10)}`;
  switch (seq % 3) {
    case 1:
      return { seq, createdAt, role: "user", content: text };
    case 2:
      return {
        seq,
        createdAt,
        role: "assistant",
        content: text,
        stopReason: "tool_use",
        toolCalls: [{ id: `c${seq}`, name: "fetch", arguments: { url: `https://example.test/${seq}` } }],
      };
    default:
      return {
        seq,
        createdAt,
        role: "tool",
        toolCallId: `c${seq - 1}`,
        name: "fetch",
        success: true,
        content: JSON.stringify({ status: 200, body: text }),
      };
  }
}

/** Answers the page's reads of session `id` with `total` made-up messages, a page at a time. */
async function fakeTranscript(page: Page, id: string, total: number): Promise<void> {
  await page.route(
    (url) => url.pathname === `/v1/sessions/${id}`,
    async (route: Route) => {
      const answer = await route.fetch();
      const session = await answer.json();
      const url = new URL(route.request().url());
      const after = Number(url.searchParams.get("afterSeq") ?? 0);
      const limit = Number(url.searchParams.get("limit") ?? total);
      const last = Math.min(total, after + limit);
      const messages = [];
      for (let seq = after + 1; seq <= last; seq++) messages.push(message(seq));
      const body = { ...session, messages, nextAfterSeq: last < total ? last : null };
      return route.fulfill({ response: answer, body: JSON.stringify(body) });
    },
  );
}

/** Loads `path`; resolves with ms until `selector` is in the page, and the longest task meanwhile. */
async function timeToShow(
  page: Page,
  url: string,
  selector: string,
): Promise<{ ms: number; longest: number }> {
  await page.addInitScript(() => {
    const tasks: number[] = [];
    (globalThis as unknown as { benchTasks: number[] }).benchTasks = tasks;
    new PerformanceObserver((list) => {
      for (const entry of list.getEntries()) tasks.push(entry.duration);
      // Node's types know no "longtask" (Chromium's).
    }).observe({ type: "longtask", buffered: true } as unknown as { type: "mark" });
  });
  const started = Date.now();
  await page.goto(url);
  await page.locator(selector).waitFor({ timeout: 600_000 });
  const ms = Date.now() - started;
  const tasks = await page.evaluate(() => (globalThis as unknown as { benchTasks: number[] }).benchTasks);
  return { ms, longest: Math.max(0, ...tasks) };
}

let opened: ConsoleFleet | undefined;
try {
  opened = await openConsoleFleet("benchconsole", { viewport: { width: 1280, height: 900 } });
  const { client, base, browser } = opened;
  if (MESSAGES > 0) {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "ok" }] }, tools: [] },
      messages: [{ role: "user", content: "hi" }],
    });
    const page = await browser.context.newPage();
    await fakeTranscript(page, id, MESSAGES);
    const { ms, longest } = await timeToShow(page, `${base}/console/sessions/${id}`, `#seq-${MESSAGES}`);
    console.log(
      `${MESSAGES} messages: last shown after ${fmt(ms / 1000)} s, longest task ${fmt(longest)} ms`,
    );
    await page.close();
  }
  if (RTL > 0) {
    const result = JSON.stringify(Array.from({ length: RTL }, (_, i) => `שלום עולם ${i}`));
    const id = await sessionWithToolResult(client, result, "after the Hebrew");
    const page = await browser.context.newPage();
    const { ms, longest } = await timeToShow(page, `${base}/console/sessions/${id}`, "text=after the Hebrew");
    console.log(
      `${RTL} Hebrew strings in a result: shown after ${fmt(ms / 1000)} s, longest task ${fmt(longest)} ms`,
    );
    await page.close();
  }
} finally {
  await opened?.close();
}
