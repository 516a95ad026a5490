/**
 * The console's streaming text (contracts §14: a session page "updates live from the events
 * stream") shows the text of the model call now streaming, and only that. The page added every
 * MESSAGE_DELTA to what it showed until a MESSAGE or a RUN_COMPLETED cleared it. A stream that
 * starts again from a run's RUN_STARTED — after a 410 (the page's place was trimmed, or the
 * stream was lost and rebuilt), which the page answers by reconnecting without an id — sends
 * that run's deltas again, and the page showed them after the ones it had: "Hello world, this
 * Hello world, this is a long answer". Now the text is the current run's (console/src/live-text.ts):
 * RUN_STARTED and a 410 start it afresh, and a delta of a run that has ended (a frozen worker's,
 * late) is not added to the next run's.
 *
 * Real API, worker and Chromium; the page's first connection and its 410 are staged in the
 * browser (page.route): the first answer is the real stream's first events, ended there (a
 * dropped connection), the reconnect with that id is answered 410 as the API answers an id it
 * no longer keeps, and every later connection goes to the API.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

const ANSWER = Array.from({ length: 40 }, (_, i) => `word${i}`).join(" ");

/** The first `deltas` MESSAGE_DELTA events of the stream at `url`, with all before them, as sent. */
async function streamStart(url: string, deltas: number): Promise<string> {
  const controller = new AbortController();
  const response = await fetch(url, { headers: { accept: "text/event-stream" }, signal: controller.signal });
  const decoder = new TextDecoder();
  let text = "";
  try {
    for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      const events = text.split("\n\n");
      const whole = events.slice(0, -1);
      if (whole.filter((e) => e.includes("event: MESSAGE_DELTA")).length >= deltas) {
        let seen = 0;
        const kept: string[] = [];
        for (const event of whole) {
          kept.push(event);
          if (event.includes("event: MESSAGE_DELTA") && ++seen === deltas) break;
        }
        return `${kept.join("\n\n")}\n\n`;
      }
    }
    throw new Error(`the stream ended before ${deltas} deltas: ${text}`);
  } finally {
    controller.abort();
  }
}

describe("the console's streaming text", () => {
  let opened: ConsoleFleet;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolelivetext", { worker: true });
  }, 90_000);
  afterAll(() => opened?.close());

  it("shows each run's text once when the stream starts again from its RUN_STARTED after a 410", async () => {
    const { client, page, base } = opened;
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: ANSWER, delayMs: 8_000 }] } },
    });
    const eventsPath = `/v1/sessions/${id}/events`;
    const asked: (string | null)[] = [];
    await page.route(
      (url) => url.pathname === eventsPath,
      async (route) => {
        const lastId = route.request().headers()["last-event-id"] ?? null;
        asked.push(lastId);
        if (asked.length === 1) {
          // The real stream's start (RUN_STARTED, the question, three deltas), then cut.
          const body = await streamStart(`${base}${eventsPath}`, 3);
          await route.fulfill({ status: 200, headers: { "content-type": "text/event-stream" }, body });
        } else if (asked.length === 2) {
          await route.fulfill({
            status: 410,
            contentType: "application/json",
            body: JSON.stringify({
              error: {
                code: "gone",
                reason: "expired",
                message: `event ${lastId} is older than the events kept`,
              },
            }),
          });
        } else await route.continue();
      },
    );
    const { runId } = await client.send(id, "answer slowly");
    await page.goto(`${base}/console/sessions/${id}`);
    // Every text the streaming message shows, as it changes.
    await page.evaluate(`(() => {
      const shown = [];
      globalThis.shown = shown;
      new MutationObserver(() => {
        const text = document.querySelector(".msg.streaming pre.text")?.textContent;
        if (text && shown.at(-1) !== text) shown.push(text);
      }).observe(document.body, { subtree: true, childList: true, characterData: true });
    })()`);
    expect((await client.waitForRun(runId, { timeoutMs: 30_000 })).endedReason).toBe("completed");
    await page.getByText(ANSWER, { exact: true }).waitFor();
    const shown = (await page.evaluate("globalThis.shown")) as string[];
    // The page went through the staged cut and 410, then read the run again from its start.
    expect(asked.slice(0, 3)).toEqual([null, expect.stringMatching(/^\d+-\d+$/), null]);
    expect(shown.length).toBeGreaterThan(0);
    for (const text of shown) expect(ANSWER.startsWith(text), `the page showed "${text}"`).toBe(true);
  }, 90_000);
});
