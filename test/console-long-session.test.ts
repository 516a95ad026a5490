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
});
