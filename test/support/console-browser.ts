/**
 * What the console's browser tests (contracts §14) share: the built console, rebuilt when
 * older than its sources, and a headless Chromium of their own (a scratch profile, removed
 * on close), with the flags this closed network needs.
 */
import { execFile } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { type BrowserContext, chromium, type Page } from "playwright-core";
import type { FleetClient } from "../../src/producer/client.js";
import { createFleetEnv, type FleetEnv, ROOT } from "./fleet-env.js";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const BUILT_INDEX = join(ROOT, "dist/console/index.html");

function newestUnder(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true }))
    if (entry.isFile()) newest = Math.max(newest, statSync(join(entry.parentPath, entry.name)).mtimeMs);
  return newest;
}

/** `npm run build:console` when the build is missing or older than its sources (~1 s). */
export async function ensureConsoleBuilt(): Promise<void> {
  if (existsSync(BUILT_INDEX) && statSync(BUILT_INDEX).mtimeMs >= newestUnder(join(ROOT, "console"))) return;
  await promisify(execFile)(
    process.execPath,
    [join(ROOT, "node_modules/vite/bin/vite.js"), "build", "--config", "console/vite.config.ts"],
    { cwd: ROOT, timeout: 60_000 },
  );
}

export type TestBrowser = { context: BrowserContext; page: Page; close(): Promise<void> };

/** A headless Chromium with its first tab; every wait fails after 20 s, naming what it waited for. */
export async function openChromium(
  options: {
    viewport?: { width: number; height: number };
    timezoneId?: string;
    /** What the browser answers an HTTP Basic challenge with (as a person typing it in the prompt). */
    httpCredentials?: { username: string; password: string };
  } = {},
): Promise<TestBrowser> {
  const profile = await mkdtemp(join(tmpdir(), "fleet-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    ...options,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  context.setDefaultTimeout(20_000);
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    context,
    page,
    close: async () => {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

export type ConsoleFleet = {
  fleet: FleetEnv;
  /** The API's (and console's) base URL. */
  base: string;
  client: FleetClient;
  browser: TestBrowser;
  page: Page;
  /** Closes the browser, then the fleet. */
  close(): Promise<void>;
};

/**
 * What a console test's `beforeAll` sets up: the console built, a fleet named `name` with its
 * API (and one worker when asked), and a Chromium of its own.
 */
export async function openConsoleFleet(
  name: string,
  options: { viewport?: { width: number; height: number }; worker?: boolean } = {},
): Promise<ConsoleFleet> {
  await ensureConsoleBuilt();
  const fleet = await createFleetEnv(name);
  try {
    const { client, api } = await fleet.startApi();
    if (options.worker) await fleet.spawnWorker();
    const browser = await openChromium(options.viewport ? { viewport: options.viewport } : {});
    return {
      fleet,
      base: api.url,
      client,
      browser,
      page: browser.page,
      close: async () => {
        await browser.close();
        await fleet.close();
      },
    };
  } catch (error) {
    await fleet.close();
    throw error;
  }
}

/**
 * A stored session whose one tool call `c1` (`fetch`, with `args`) read `result`, then the model
 * answered `after`: the transcript a console test opens, its result at `#seq-3`.
 */
export async function sessionWithToolResult(
  client: FleetClient,
  result: string,
  after: string,
  args: Record<string, unknown> = {},
): Promise<string> {
  const { id } = await client.createSession({
    agent: { model: { provider: "scripted", steps: [{ text: "ok" }] }, tools: [] },
    messages: [
      { role: "user", content: "fetch the page" },
      {
        role: "assistant",
        content: "",
        toolCalls: [{ id: "c1", name: "fetch", arguments: args }],
        stopReason: "tool_use",
      },
      { role: "tool", toolCallId: "c1", name: "fetch", content: result, success: true },
      { role: "assistant", content: after, stopReason: "end_turn" },
    ],
  });
  return id;
}
