/**
 * The console (contracts §14) in a real browser: Debian's Chromium driven by playwright-core,
 * against the real API (in-process), real workers (child processes) and an in-process
 * sweeper. One tab of tenant `ops` (key entered in the page once) watches a session whose
 * worker is SIGKILLed mid-tool come back without a reload, resumes a parked session with
 * another model and cancels a running one; a tab with tenant `other`'s key finds none of it.
 * The console is built first when dist/console is missing or older than console/.
 */
import { statSync } from "node:fs";
import { mkdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import Fastify from "fastify";
import type { BrowserContext, Dialog, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient } from "../src/producer/client.js";
import { consolePages } from "../src/producer/console-route.js";
import { loadConfig } from "../src/shared/config.js";
import { ApiKeys } from "../src/shared/store/api-keys.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { ensureConsoleBuilt, openChromium, type TestBrowser } from "./support/console-browser.js";
import { createFleetEnv, type FleetEnv, ROOT, type WorkerProcess, waitFor } from "./support/fleet-env.js";
import { INTERRUPTED_TEXT } from "./support/sleepy-sessions.js";

/** The README's picture is refreshed only when asked (UPDATE_SCREENSHOTS=1); otherwise a scratch file, so a test run leaves the checkout clean. */
const SCREENSHOT = process.env.UPDATE_SCREENSHOTS
  ? join(ROOT, "docs/console-session.png")
  : join(tmpdir(), `fleet-console-session-${process.pid}.png`);

type Step = {
  text?: string;
  stopReason?: string;
  toolCalls?: { id: string; name: string; arguments: Record<string, unknown> }[];
  delayMs?: number;
};
/** The text a person sees in the page's main part (collapsed details left out). */
// biome-ignore lint/performance/useDomNodeTextContent: the rendered text is what is asserted
const visibleText = (page: Page) => page.locator("main").innerText();

/**
 * Does `act`, answering the one dialog it opens (`confirm()`): the dialog's text, or null
 * when none opened. The dialog is answered as it opens, so `act` (a click, a key) returns.
 */
async function answerDialog(page: Page, answer: "accept" | "dismiss", act: () => Promise<void>) {
  let message: string | null = null;
  const onDialog = (dialog: Dialog) => {
    message = `${dialog.type()}: ${dialog.message()}`;
    void dialog[answer]();
  };
  page.once("dialog", onDialog);
  try {
    await act();
  } finally {
    page.off("dialog", onDialog);
  }
  return message;
}

/** How many cancels the page has sent to `path` since this was called. */
function countCancels(page: Page, path: string): () => number {
  let sent = 0;
  page.on("request", (request) => {
    if (request.method() === "POST" && new URL(request.url()).pathname === path) sent++;
  });
  return () => sent;
}

const scripted = (steps: Step[], tools: string[] = []) => ({
  model: { provider: "scripted" as const, steps },
  tools,
});

describe("the console in a browser", () => {
  let fleet: FleetEnv;
  let base: string;
  let ops: FleetClient;
  const key: Record<string, string> = {};
  let sweeper: RunningSweeper;
  let browser: TestBrowser;
  let context: BrowserContext;
  let page: Page;
  let victim: WorkerProcess;

  beforeAll(async () => {
    const started = Date.now();
    await ensureConsoleBuilt();
    const built = Date.now();
    fleet = await createFleetEnv("console");
    const keys = new ApiKeys(fleet.database);
    key.ops = (await keys.create("ops")).key;
    key.other = (await keys.create("other")).key;
    const { api } = await fleet.startApi();
    base = api.url;
    ops = new FleetClient({ baseUrl: base, apiKey: key.ops });
    [sweeper, victim] = await Promise.all([
      startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false }),
      fleet.spawnWorker(),
    ]);
    browser = await openChromium({ viewport: { width: 1280, height: 900 }, timezoneId: "Europe/Paris" });
    ({ context, page } = browser);
    console.log(`console e2e: build check ${built - started} ms, set-up ${Date.now() - built} ms`);
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    if (!process.env.UPDATE_SCREENSHOTS) await rm(SCREENSHOT, { force: true });
    await sweeper?.stop();
    await fleet?.close();
  });

  it("asks for the key once, lists the sessions, and shows a SIGKILL mid-tool, its recover_tools resume and the answer live", async () => {
    const { id } = await ops.createSession({
      agent: scripted(
        [
          {
            toolCalls: [
              { id: "log", name: "append_file", arguments: { path: "console.txt", line: "ran" } },
              { id: "nap", name: "sleep", arguments: { ms: 4_000 } },
            ],
          },
          { text: "All done after the crash." },
        ],
        ["append_file", "sleep"],
      ),
    });
    await ops.send(id, "Write console.txt, then rest.");

    await page.goto(`${base}/console`);
    await page.getByLabel("Key", { exact: true }).fill(key.ops!);
    await page.getByRole("button", { name: "Use key" }).click();
    await page.getByRole("link", { name: id }).click();
    await page.getByRole("heading", { name: `Session ${id}` }).waitFor();
    await page.locator('[data-live-mode="stream"]').waitFor();
    // A mark that a reload would lose.
    await page.evaluate(() => {
      (globalThis as unknown as { notReloaded: boolean }).notReloaded = true;
    });

    await waitFor(
      async () =>
        (
          await fleet.database.sql`
          select 1 from messages where session_id = ${id} and role = 'tool' and tool_call_id = 'log'`
        ).length === 1,
      20_000,
      "the session inside the sleep tool",
    );
    await page.getByText("Write console.txt, then rest.").waitFor();
    victim.child.kill("SIGKILL");
    await victim.exited;
    await fleet.spawnWorker();

    await page.getByText(INTERRUPTED_TEXT).first().waitFor({ timeout: 30_000 });
    await page.locator(".msg.tool.interrupted").getByText("interrupted").first().waitFor();
    await page.locator("table.runs").getByText("recover_tools").waitFor();
    await page.locator(".transcript").getByText("All done after the crash.").waitFor();
    await page.locator(".msg.assistant").getByText("stop: end_turn").waitFor();
    await page.locator("dd .badge", { hasText: /^completed$/ }).waitFor();
    expect(await page.evaluate(() => (globalThis as unknown as { notReloaded?: boolean }).notReloaded)).toBe(
      true,
    );

    // Every message's content and every run's endedReason are on the page.
    const session = await ops.getSession(id);
    const text = await visibleText(page);
    expect(text).toContain(id);
    for (const message of session.messages) if (message.content) expect(text).toContain(message.content);
    for (const run of session.runs) expect(text).toContain(run.endedReason!);
    expect(session.runs.map((r) => r.resumeKind)).toContain("recover_tools");

    await mkdir(dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(statSync(SCREENSHOT).size).toBeGreaterThan(10_000);
  }, 60_000);

  it("resumes a parked session with another model from the page", async () => {
    const { id } = await ops.createSession({
      // Not continued automatically: parked `max_output` for someone to act on.
      agent: {
        ...scripted([{ text: "A long answer that was cut", stopReason: "max_output" }]),
        continueOnMaxOutput: false,
      },
    });
    await ops.send(id, "Tell me everything.");
    const { sql } = fleet.database;
    await waitFor(
      async () => (await sql`select 1 from sessions where id = ${id} and status = 'parked'`).length === 1,
      20_000,
      "the session parked",
    ).catch(async (error) => {
      console.log(
        await sql`select status, tail_state, parked_reason, run_started from sessions where id = ${id}`,
        await sql`select kind, status, ended_reason, error from runs where session_id = ${id}`,
      );
      throw error;
    });
    await page.goto(`${base}/console?status=parked&parkedReason=max_output`);
    await page.getByRole("heading", { name: "Parked queue" }).waitFor();
    await page.getByRole("link", { name: id }).click();
    await page.getByText("parked: max_output").waitFor();
    await page
      .getByLabel(/Resume — with another model/)
      .fill(JSON.stringify({ provider: "scripted", steps: [{ text: "Finished by the other model." }] }));
    await page.getByRole("button", { name: "Resume", exact: true }).click();
    await page.getByText(/Resume queued \(continue_response\)/).waitFor();
    await page.locator(".transcript").getByText("Finished by the other model.").waitFor();
    await page.locator("dd .badge", { hasText: /^completed$/ }).waitFor();
    // The runs table says which run was asked to use another model (runs[].model).
    await page.locator("table.runs .run-model", { hasText: "on scripted" }).waitFor();
    expect(await page.locator("table.runs .run-model").count()).toBe(1);
  }, 45_000);

  it("cancels a running session from the page", async () => {
    const { id } = await ops.createSession({
      agent: scripted(
        [{ toolCalls: [{ id: "long", name: "sleep", arguments: { ms: 60_000 } }] }, { text: "never" }],
        ["sleep"],
      ),
    });
    await ops.send(id, "Sleep for a minute.");
    await page.goto(`${base}/console/sessions/${id}`);
    await page.locator("table.runs").getByText("running", { exact: true }).waitFor();
    const sent = countCancels(page, `/v1/sessions/${id}/cancel`);
    const cancel = page.getByRole("button", { name: /Cancel session/ });
    await cancel.focus();
    // A misclick: the page asks first, and "Cancel" in the dialog cancels nothing.
    const dismissed = await answerDialog(page, "dismiss", () => page.keyboard.press("Enter"));
    expect(dismissed).toMatch(/^confirm: /);
    expect(dismissed).toContain(`Cancel session ${id} (running)?`);
    expect((await ops.getSession(id)).status).toBe("running");
    // Asked again and confirmed: cancelled.
    const accepted = await answerDialog(page, "accept", () => page.keyboard.press("Enter"));
    expect(accepted).toContain("never resumed automatically");
    await page.getByText("Cancelled.", { exact: true }).waitFor();
    // Only the confirmed click sent a cancel.
    expect(sent()).toBe(1);
    await page.locator(".msg.tool.cancelled").getByText("cancelled", { exact: true }).waitFor();
    await page.locator("dd .badge", { hasText: /^cancelled$/ }).waitFor();
    // The cancel commits before the worker holding the running run has ended it (it aborts
    // the tool, stores its result, then ends the run), so the runs are read once they ended.
    let session = await ops.getSession(id);
    expect(session.status).toBe("cancelled");
    await waitFor(
      async () => {
        session = await ops.getSession(id);
        return session.runs.every((run) => run.endedReason !== null);
      },
      10_000,
      "the worker to end the cancelled session's runs",
    );
    for (const run of session.runs) {
      await page
        .locator("table.runs .outcome")
        .getByText(run.endedReason!, { exact: true })
        .first()
        .waitFor();
    }
  }, 30_000);

  it("polls the session when the API has no events route, and still shows what happens", async () => {
    const { id } = await ops.createSession({ agent: scripted([{ text: "Answered while polled." }]) });
    const tab = await context.newPage();
    let step = "open the page";
    try {
      // As an API without contracts §7 answers: 404 for the route itself.
      await tab.route("**/v1/sessions/*/events", (route) =>
        route.fulfill({
          status: 404,
          contentType: "application/json",
          body: JSON.stringify({
            error: { code: "not_found", message: "no route GET /v1/sessions/x/events" },
          }),
        }),
      );
      await tab.goto(`${base}/console/sessions/${id}`);
      await tab.getByLabel("Key", { exact: true }).fill(key.ops!);
      await tab.keyboard.press("Enter");
      step = "wait for polling";
      await tab.locator('[data-live-mode="polling"]').waitFor();
      step = "send";
      await ops.send(id, "Say something.");
      step = "wait for the answer";
      await tab.locator(".transcript").getByText("Answered while polled.").waitFor();
      step = "wait for completed";
      await tab.locator("dd .badge", { hasText: /^completed$/ }).waitFor();
    } catch (error) {
      // What the page and the store showed when it failed.
      console.log(
        `polling test failed at "${step}"`,
        await tab
          .locator("[data-live-mode]")
          .first()
          .getAttribute("data-live-mode", { timeout: 1_000 })
          .catch(() => "(no live mode)"),
        await fleet.database.sql`select status, tail_state, last_seq from sessions where id = ${id}`,
        await fleet.database.sql`select kind, status, ended_reason, error from runs where session_id = ${id}`,
      );
      throw error;
    } finally {
      await tab.close();
    }
  });

  /** Opens a batch's page in this tab, giving the ops key when it is asked for (unless an earlier test gave it). */
  async function openBatchPage(id: string): Promise<void> {
    await page.goto(`${base}/console/batches/${id}`);
    const heading = page.getByRole("heading", { name: `Batch ${id}` });
    const keyField = page.getByLabel("Key", { exact: true });
    await heading.or(keyField).first().waitFor();
    if (await keyField.isVisible()) {
      await keyField.fill(key.ops!);
      await page.keyboard.press("Enter");
    }
    await heading.waitFor();
  }

  /** Opens `path` in a new tab with the other tenant's key: `heading` shows, `hidden` does not. */
  async function asOtherTenant(path: string, heading: string, hidden: string): Promise<void> {
    const other = await context.newPage();
    try {
      await other.goto(`${base}${path}`);
      await other.getByLabel("Key", { exact: true }).fill(key.other!);
      await other.keyboard.press("Enter");
      await other.getByRole("heading", { name: heading }).waitFor();
      expect(await visibleText(other)).not.toContain(hidden);
    } finally {
      await other.close();
    }
  }

  it("shows another tenant's session as not found", async () => {
    const { id } = await ops.createSession({ agent: scripted([{ text: "hi" }]) });
    await asOtherTenant(`/console/sessions/${id}`, "Session not found", "Transcript");
  });

  it("does not ask for the key again when a read sent before it was entered answers 401 late", async () => {
    const { id } = await ops.createSession({ agent: scripted([{ text: "hi" }]) });
    const tab = await context.newPage();
    // The keyless resume-point read is held until the key has been entered: its 401 then
    // arrives after the page has gone on with the key (as on a slow API).
    let entered!: () => void;
    const keyEntered = new Promise<void>((resolve) => {
      entered = resolve;
    });
    let held = 0;
    await tab.route("**/resume-point", async (route) => {
      if (!route.request().headers().authorization) {
        held++;
        await keyEntered;
      }
      await route.continue();
    });
    try {
      await tab.goto(`${base}/console/sessions/${id}`);
      await tab.getByLabel("Key", { exact: true }).fill(key.ops!);
      await tab.getByRole("button", { name: "Use key" }).click();
      await tab.getByRole("heading", { name: `Session ${id}` }).waitFor();
      expect(held).toBeGreaterThan(0);
      entered();
      // The held read's 401 has come back (the page retried it with the key meanwhile).
      await tab.waitForResponse((r) => r.url().endsWith("/resume-point") && r.status() === 401);
      await tab.waitForTimeout(300);
      expect(await tab.getByLabel("Key", { exact: true }).count()).toBe(0);
      expect(await visibleText(tab)).toContain(`Session ${id}`);
    } finally {
      await tab.close();
    }
  });

  it("shows a batch's progress, downloads its results, lists its sessions and cancels it", async () => {
    const quick = scripted([{ text: "Quick answer.", delayMs: 1_500 }]);
    const slow = scripted(
      [{ toolCalls: [{ id: "long", name: "sleep", arguments: { ms: 60_000 } }] }, { text: "never" }],
      ["sleep"],
    );
    const batch = await ops.createBatch([
      { agent: quick, input: "One.", customId: "one" },
      { agent: quick, input: "Two.", customId: "two" },
      { agent: slow, input: "Sleep.", customId: "slow" },
    ]);
    const slowId = batch.sessions.find((s) => s.customId === "slow")!.id;
    await openBatchPage(batch.id);
    await page.getByText("0 of 3 sessions finished", { exact: true }).waitFor();
    await page.evaluate(() => {
      (globalThis as unknown as { notReloaded: boolean }).notReloaded = true;
    });
    // Read again every 2 s while it runs: the two quick sessions end, the slow one sleeps.
    await page.getByText("2 of 3 sessions finished", { exact: true }).waitFor();
    expect(await page.evaluate(() => (globalThis as unknown as { notReloaded?: boolean }).notReloaded)).toBe(
      true,
    );
    await page.locator(".legend").getByText("completed: 2").waitFor();
    await page.locator(".legend").getByText("running: 1").waitFor();
    expect(await page.locator("progress").getAttribute("value")).toBe("2");

    // The download is fetched with the key (a plain link could not send it).
    const [download] = await Promise.all([
      page.waitForEvent("download"),
      page.getByRole("button", { name: "Download results (NDJSON)" }).click(),
    ]);
    expect(download.suggestedFilename()).toBe(`batch-${batch.id}-results.ndjson`);
    const lines = (await readFile((await download.path())!, "utf8"))
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as { customId: string; status: string; output: string | null });
    expect(lines.map((l) => [l.customId, l.status, l.output]).sort()).toEqual([
      ["one", "completed", "Quick answer."],
      ["slow", "running", null],
      ["two", "completed", "Quick answer."],
    ]);

    // Its sessions, in the list filtered by the batch.
    await page.getByRole("link", { name: "This batch's sessions" }).click();
    for (const { id } of batch.sessions) await page.getByRole("link", { name: id }).waitFor();
    await page.goBack();
    await page.getByRole("heading", { name: `Batch ${batch.id}` }).waitFor();

    const sent = countCancels(page, `/v1/batches/${batch.id}/cancel`);
    const cancel = page.getByRole("button", { name: "Cancel batch" });
    await cancel.focus();
    // A misclick: the page asks first, and "Cancel" in the dialog cancels nothing.
    const dismissed = await answerDialog(page, "dismiss", () => page.keyboard.press("Enter"));
    expect(dismissed).toContain(`Cancel batch ${batch.id}?`);
    expect(dismissed).toContain("Its 1 unfinished session is cancelled");
    expect((await ops.getBatch(batch.id)).status).toBe("running");
    expect((await ops.getSession(slowId)).status).toBe("running");
    await answerDialog(page, "accept", () => page.keyboard.press("Enter"));
    await page.locator(".legend").getByText("cancelled: 1").waitFor();
    await page.getByText("3 of 3 sessions finished", { exact: true }).waitFor();
    await expect
      .poll(async () => (await ops.getSession(slowId)).status, { timeout: 20_000 })
      .toBe("cancelled");
    const after = await ops.getBatch(batch.id);
    expect(after.counts).toMatchObject({ total: 3, completed: 2, cancelled: 1, running: 0, queued: 0 });
    await page.getByRole("button", { name: "Cancel batch" }).waitFor({ state: "detached" });
    expect(sent()).toBe(1);

    // Another tenant's key gets "not found", not the batch.
    await asOtherTenant(`/console/batches/${batch.id}`, "Batch not found", "sessions finished");
  }, 60_000);

  it("resumes a batch's parked sessions from its page, and says what it could not resume", async () => {
    // The provider refuses each session's first request (parked provider_rejected at once), then answers.
    const rejectedOnce = {
      model: {
        provider: "scripted" as const,
        steps: [{ text: "Answer after the fix.", fault: "rejected" as const, faultTimes: 1 }],
      },
    };
    const refusal = scripted([{ text: "I will not.", stopReason: "refusal" }]);
    const batch = await ops.createBatch([
      { agent: rejectedOnce, input: "One.", customId: "one" },
      { agent: rejectedOnce, input: "Two.", customId: "two" },
      { agent: refusal, input: "Three.", customId: "three" },
    ]);
    // The sweeper parks the refusal `refused`; the worker parks the other two at once.
    await expect.poll(async () => (await ops.getBatch(batch.id)).counts.parked, { timeout: 20_000 }).toBe(3);
    await openBatchPage(batch.id);
    await page.locator(".legend").getByText("parked: 3").waitFor();

    const asked = await answerDialog(page, "accept", () =>
      page.getByRole("button", { name: "Resume parked sessions" }).click(),
    );
    expect(asked).toContain(`Resume the 3 parked sessions of batch ${batch.id}?`);
    await page
      .getByRole("status")
      .getByText("Resumed 2 parked sessions; nothing to resume in 1 refused (still parked).", { exact: true })
      .waitFor();
    // The batch runs again, and the page follows it to its end without a reload.
    await page.locator(".legend").getByText("completed: 2").waitFor();
    await page.locator(".legend").getByText("parked: 1").waitFor();
    const sessions = await Promise.all(batch.sessions.map((s) => ops.getSession(s.id)));
    expect(sessions.map((s) => [s.status, s.messages.at(-1)?.content]).sort()).toEqual([
      ["completed", "Answer after the fix."],
      ["completed", "Answer after the fix."],
      ["parked", "I will not."],
    ]);
  }, 60_000);

  it("serves the page without a key but no data, pages the list by cursor and filters by parked reason", async () => {
    const page = await fetch(`${base}/console/sessions/x`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/text\/html/);
    expect(await fetch(`${base}/v1/sessions`).then((r) => r.status)).toBe(401);

    const auth = { authorization: `Bearer ${key.ops}` };
    const list = async (query: string) =>
      (await fetch(`${base}/v1/sessions?${query}`, { headers: auth }).then((r) => r.json())) as {
        sessions: { id: string }[];
        nextCursor: string | null;
      };
    for (let i = 0; i < 3; i++) await ops.createSession({ agent: scripted([{ text: "x" }]) });
    const all = await list("limit=1000");
    expect(all.sessions.length).toBeGreaterThanOrEqual(5);
    expect(all.nextCursor).toBeNull();
    const seen: string[] = [];
    let cursor: string | null = "";
    while (cursor !== null) {
      const next = await list(`limit=3${cursor ? `&before=${cursor}` : ""}`);
      seen.push(...next.sessions.map((s) => s.id));
      cursor = next.nextCursor;
    }
    expect(seen).toEqual(all.sessions.map((s) => s.id));
    expect((await list("parkedReason=max_output")).sessions).toHaveLength(0);
    // Not a cursor, and cursors past any timestamp Postgres holds (they were a 500).
    const forged = (text: string) => Buffer.from(text).toString("base64url");
    for (const before of ["nope", forged("9999999999999999999.x"), forged("9223372036854775807.x")]) {
      const bad = await fetch(`${base}/v1/sessions?before=${before}`, { headers: auth });
      expect(bad.status, before).toBe(400);
      expect(((await bad.json()) as { error: { field: string } }).error.field).toBe("before");
    }
  });
});

describe("the console without a build", () => {
  it("answers /console with a page that says to run npm run build", async () => {
    const app = Fastify();
    app.register(consolePages(join(tmpdir(), "no-console-here")));
    try {
      const answer = await app.inject({ method: "GET", url: "/console/sessions/abc" });
      expect(answer.statusCode).toBe(503);
      expect(answer.headers["content-type"]).toMatch(/text\/html/);
      expect(answer.body).toContain("npm run build");
    } finally {
      await app.close();
    }
  });
});
