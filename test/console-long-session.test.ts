/**
 * The console's session page (contracts §14) on a long session, in a real browser: while a
 * run goes on, the page reads again the session's runs, status and resume point (at most
 * every 300 ms). It used to read the whole session each time, every message of a history of
 * thousands (2.2 MB and 160 ms of the API for 10,000 messages, about three times a second
 * per open tab), and the resume point read the whole history again in the API. The page now
 * asks only for the messages after the last one it has, and the resume point of a session
 * with a run on its way is answered without reading the history. Likewise, a session of
 * hundreds of runs is not read with every run again: the page's later reads ask for the
 * latest runs only (`runsLimit`), and keep the ended runs it has.
 *
 * And the page holds every message of a long session in its text (contracts §14); it used to
 * show the last 200, with a button for earlier ones. It reads the messages a page at a time
 * (`?limit=`), renders them a slice at a time, and still shows live appends.
 */
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import type { Message } from "../src/shared/messages.js";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";
import type { FleetEnv } from "./support/fleet-env.js";

const IMPORTED = 4_000;
const STEPS = 30;
const EARLIER_RUNS = 400;
/** Three pages of the page's reads (500, then 5,000 at a time): a few seconds to render here. */
const LONG = 5_600;

/** The text a person sees in the page's main part (what a copy of it holds). */
// biome-ignore lint/performance/useDomNodeTextContent: the rendered text is what is asserted
const shownText = (page: Page) => page.locator("main").innerText();

/** The content of message `seq` of the long session: found nowhere else on the page. */
const longContent = (seq: number) => `long-message-${String(seq).padStart(5, "0")} ${"x".repeat(120)}`;

/** A finished conversation of `n` messages: question, answer, … */
function history(n: number): Message[] {
  const out: Message[] = [];
  for (let i = 0; out.length < n; i++) {
    out.push({ role: "user", content: `question ${i} ${"q".repeat(200)}` });
    out.push({ role: "assistant", content: `answer ${i} ${"a".repeat(300)}`, stopReason: "end_turn" });
  }
  return out;
}

describe("the console on a long session", () => {
  let fleet: FleetEnv;
  let base: string;
  let client: FleetClient;
  let page: Page;
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolelong", { worker: true });
    ({ fleet, base, client, page } = opened);
  }, 90_000);

  afterAll(async () => {
    await opened?.close();
  });

  it("follows a run of many steps without reading the whole history again and again", async () => {
    const imported = history(IMPORTED);
    const steps: { text?: string; toolCalls?: unknown[]; delayMs?: number }[] = imported
      .filter((m) => m.role === "assistant")
      .map(() => ({ text: "earlier" }));
    for (let i = 0; i < STEPS; i++)
      steps.push({ toolCalls: [{ name: "sleep", arguments: { ms: 30 } }], delayMs: 30 });
    steps.push({ text: "All steps done." });
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: steps as never },
        tools: ["sleep"],
        maxTurns: STEPS + 5,
      },
      messages: imported,
    });
    const full = JSON.stringify(await client.getSession(id)).length;

    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator('[data-live-mode="stream"]').waitFor();
    // The first read goes a page at a time: once it has every message, what the run adds.
    await page.getByText(`Transcript (${IMPORTED} messages)`).waitFor();
    // What each read of the session brought: its size, and how many messages it held.
    const reads: Promise<{ bytes: number; messages: number }>[] = [];
    page.on("response", (response) => {
      if (new URL(response.url()).pathname !== `/v1/sessions/${id}`) return;
      reads.push(
        response.body().then((body) => ({
          bytes: body.length,
          messages: (JSON.parse(body.toString()) as { messages: unknown[] }).messages.length,
        })),
      );
    });
    const { runId } = await client.send(id, "Take many small steps.");
    await client.waitForRun(runId, { timeoutMs: 60_000 });
    await page.locator(".transcript").getByText("All steps done.").waitFor();
    await page.locator("dd .badge", { hasText: /^completed$/ }).waitFor();
    await new Promise((r) => setTimeout(r, 1_000));

    const session = await client.getSession(id);
    expect(session.messages).toHaveLength(IMPORTED + 2 + 2 * STEPS);
    // The page has every message: its count, and the run's last answer.
    await page.getByText(`Transcript (${session.messages.length} messages)`).waitFor();
    const got = await Promise.all(reads);
    const bytes = got.reduce((sum, read) => sum + read.bytes, 0);
    const messages = got.reduce((sum, read) => sum + read.messages, 0);
    console.log(
      `${got.length} reads while it ran: ${messages} messages, ${bytes} bytes (the whole: ${full})`,
    );
    expect(got.length).toBeGreaterThan(0);
    // Before: every read of the session held all of it, thousands of messages each time; now
    // the messages each read brings are those the run added, and none of the earlier ones.
    expect(messages).toBeLessThan(2 + 2 * STEPS + 10);

    // The API's side: only the messages after `afterSeq`, the usage still the session's whole.
    const tail = await client.getSession(id, { afterSeq: IMPORTED });
    expect(tail.messages.map((m) => m.seq)).toEqual(session.messages.slice(IMPORTED).map((m) => m.seq));
    expect(tail.usage).toEqual(session.usage);
    expect(tail.runs).toEqual(session.runs);
    const bad = await fetch(`${base}/v1/sessions/${id}?afterSeq=-1`);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { field: "afterSeq" } });
  }, 90_000);

  it("follows new runs of a session of many runs without reading every run again", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "Another reply." }] }, tools: [] },
    });
    const { sql } = fleet.database;
    await sql`
      insert into runs (id, session_id, kind, trigger, status, ended_reason, created_at, started_at, ended_at)
      select ${id} || '-' || n, ${id}, 'run', 'api', 'ended', 'completed',
             now() - (${EARLIER_RUNS} + 1 - n) * interval '1 second', now(), now()
      from generate_series(1, ${EARLIER_RUNS}) n`;
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByText(`Runs (${EARLIER_RUNS})`).waitFor();
    await page.locator('[data-live-mode="stream"]').waitFor();
    // How many runs each later read of the session brought.
    const reads: Promise<number>[] = [];
    page.on("response", (response) => {
      if (new URL(response.url()).pathname !== `/v1/sessions/${id}`) return;
      reads.push(
        response.body().then((body) => (JSON.parse(body.toString()) as { runs: unknown[] }).runs.length),
      );
    });
    for (let i = 0; i < 3; i++) {
      const { runId } = await client.send(id, `Message ${i}.`);
      await client.waitForRun(runId, { timeoutMs: 20_000 });
    }
    // Every run is on the page, the new ones ended, in the order the API gives them.
    await page.getByText(`Runs (${EARLIER_RUNS + 3})`).waitFor();
    await page.locator("dd .badge", { hasText: /^completed$/ }).waitFor();
    await new Promise((r) => setTimeout(r, 1_000));
    const session = await client.getSession(id);
    const shown = await page
      .locator("table.runs tbody tr td:first-child")
      .evaluateAll((cells) => cells.map((cell) => cell.getAttribute("title")));
    expect(shown.map((title) => title?.split(" ")[0])).toEqual(session.runs.map((run) => run.id));
    expect(session.runs.slice(-3).map((run) => run.endedReason)).toEqual([
      "completed",
      "completed",
      "completed",
    ]);
    const got = await Promise.all(reads);
    expect(got.length).toBeGreaterThan(0);
    // Before: each read held every run (hundreds); now only the latest few.
    expect(Math.max(...got)).toBeLessThanOrEqual(50);
  }, 60_000);

  it("holds every message of a long session in its text, read a page at a time, and shows live appends", async () => {
    // Each assistant message of the history uses a scripted step (contracts §11): one more for the run.
    const assistants = LONG / 2;
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            ...Array.from({ length: assistants }, () => ({ text: "earlier" })),
            { text: "Live answer." },
          ],
        },
        tools: [],
      },
    });
    const { sql } = fleet.database;
    await sql`
      insert into messages (session_id, seq, role, content, stop_reason)
      select ${id}, g, case when g % 2 = 1 then 'user' else 'assistant' end,
             'long-message-' || lpad(g::text, 5, '0') || ' ' || repeat('x', 120),
             case when g % 2 = 0 then 'end_turn' end
      from generate_series(1, ${LONG}) g`;
    await sql`update sessions set last_seq = ${LONG}, tail_state = 'completed' where id = ${id}`;
    // How many messages each read of the session brought, in order.
    const reads: Promise<number>[] = [];
    page.on("response", (response) => {
      if (new URL(response.url()).pathname !== `/v1/sessions/${id}`) return;
      reads.push(
        response
          .body()
          .then((body) => (JSON.parse(body.toString()) as { messages: unknown[] }).messages.length),
      );
    });
    const started = Date.now();
    await page.goto(`${base}/console/sessions/${id}`);
    await page.getByText(`Transcript (${LONG} messages)`).waitFor({ timeout: 60_000 });
    const wanted = [1, LONG / 2, LONG].map(longContent);
    // Before: the last 200 messages only; the first and the middle one were not on the page.
    let text = "";
    for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
      text = await shownText(page);
      if (wanted.every((content) => text.includes(content))) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    console.log(`${LONG} messages on the page in ${Date.now() - started} ms`);
    for (const content of wanted) expect(text).toContain(content);
    expect(await page.locator(".transcript .msg").count()).toBe(LONG);
    expect(await page.getByText(/hidden\)$/).count()).toBe(0);
    // Read a page at a time: a first small one, then larger ones, none of them whole.
    const got = await Promise.all(reads);
    expect(got.slice(0, 3)).toEqual([500, 5_000, LONG - 5_500]);

    // Live: a sent message and the answer appear, after every earlier one.
    await page.locator('[data-live-mode="stream"]').waitFor();
    const { runId } = await client.send(id, "A live question.");
    await client.waitForRun(runId, { timeoutMs: 20_000 });
    await page.locator(".transcript").getByText("Live answer.").waitFor();
    await page.getByText(`Transcript (${LONG + 2} messages)`).waitFor();
    const seqs = await page
      .locator(".transcript .msg")
      .evaluateAll((items) => items.map((item) => Number(item.id.replace("seq-", ""))));
    expect(seqs).toEqual(Array.from({ length: LONG + 2 }, (_, i) => i + 1));
    expect(await page.locator(`#seq-${LONG + 1}`).textContent()).toContain("A live question.");
  }, 120_000);
});
