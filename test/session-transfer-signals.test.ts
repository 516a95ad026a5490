/**
 * `fleet session import` and `fleet session export` stopped by a signal (Ctrl-C, a `timeout`,
 * a closed terminal) part-way: what they wrote aside — the private copy of stdin under
 * $TMPDIR, the `FILE.PID.partial` an export to FILE fills — goes with them, and they exit as
 * a shell reports that signal (128 + its number). Before, both stayed: a copy of the conversation in
 * $TMPDIR after each stopped import, a partial export beside FILE.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdir, readdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { startApiProxy } from "./support/api-proxy.js";
import { exitedWithOutput } from "./support/child-exit.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT } from "./support/fleet-env.js";

/** As a shell reports a command its signal ended (src/commands/interrupt.ts). */
const EXIT_CODES = { SIGHUP: 129, SIGINT: 130, SIGTERM: 143 } as const;
const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
let fleet: FleetEnv;
let client: FleetClient;
let url: string;

beforeAll(async () => {
  fleet = await createFleetEnv("transfer-signals");
  const started = await fleet.startApi();
  client = started.client;
  url = started.api.url;
}, 60_000);
afterAll(async () => fleet?.close());

/** `fleet ARGS` as a child whose stdin stays open until the test ends it. */
function fleetChild(args: string[], env: Record<string, string>): ChildProcess {
  return spawn(process.execPath, [FLEET_BIN, ...args], {
    cwd: ROOT,
    // TSX_DISABLE_CACHE: run from the sources, tsx keeps its cache out of TMPDIR.
    env: { ...process.env, ...fleet.env, TSX_DISABLE_CACHE: "1", ...env },
    stdio: ["pipe", "pipe", "pipe"],
  });
}

/** Resolves once `check` holds, asked every 20 ms (what the command does is not seen otherwise). */
async function until(what: string, check: () => Promise<boolean>, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await check())) {
    if (child.exitCode !== null) throw new Error(`the command exited (${child.exitCode}) before ${what}`);
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const HEADER = JSON.stringify({
  fleetSessionExport: 1,
  id: "x",
  agent: AGENT,
  metadata: {},
  exportedAt: "2026-01-01T00:00:00.000Z",
});

describe.each(["SIGINT", "SIGTERM", "SIGHUP"] as const)("stopped by %s", (signal) => {
  it("an import reading stdin: its copy under TMPDIR is removed", async () => {
    const tmp = join(fleet.config.toolDir, `import-${signal}`);
    await mkdir(tmp);
    const child = fleetChild(["session", "import", "-"], { FLEET_API_URL: url, TMPDIR: tmp });
    child.stdin!.write(`${HEADER}\n{"role":"user","content":"secret","seq":1}\n`);
    // The copy is made as stdin comes: it holds what was written so far while stdin stays open.
    await until(
      "the copy of stdin",
      async () => {
        const [dir] = await readdir(tmp);
        return dir !== undefined && (await readdir(join(tmp, dir))).length > 0;
      },
      child,
    );
    child.kill(signal);
    await exitedWithOutput(child);
    expect(child.exitCode).toBe(EXIT_CODES[signal]);
    expect(await readdir(tmp)).toEqual([]);
  }, 120_000);

  it("an export to FILE: its partial file is removed, FILE never made", async () => {
    const { id } = await client.createSession({
      agent: AGENT,
      messages: Array.from({ length: 2_001 }, (_, i) => ({ role: "user", content: `m${i}` })),
    });
    // The second page (after seq 2,000) is never answered: the export holds a page written.
    let held!: () => void;
    const secondPage = new Promise<void>((resolve) => {
      held = resolve;
    });
    const proxy = await startApiProxy(url, (req, _res, forward) => {
      if (req.url?.includes("afterSeq=2000")) held();
      else forward();
    });
    try {
      const dir = join(fleet.config.toolDir, `export-${signal}`);
      await mkdir(dir);
      const out = join(dir, "session.jsonl");
      const child = fleetChild(["session", "export", id, "--out", out], { FLEET_API_URL: proxy.url });
      await secondPage;
      expect((await readdir(dir)).filter((f) => f.endsWith(".partial"))).toHaveLength(1);
      child.kill(signal);
      await exitedWithOutput(child);
      expect(child.exitCode).toBe(EXIT_CODES[signal]);
      expect(await readdir(dir)).toEqual([]);
    } finally {
      proxy.server.closeAllConnections();
      await new Promise((resolve) => proxy.server.close(resolve));
    }
  }, 120_000);
});
