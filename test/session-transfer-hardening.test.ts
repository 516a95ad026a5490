/**
 * `fleet session export` / `fleet session import` against a real API and Postgres, as an
 * attacker and a demanding user use them: an API URL fetch refuses, a file on stdin, crafted
 * files. Each bad input is one line and exit 2 with nothing created; what is accepted behaves
 * per resume-semantics.md.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const AGENT = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] }, maxTurns: 3 };
let fleet: FleetEnv;
let url: string;

beforeAll(async () => {
  fleet = await createFleetEnv("transfer-hardening");
  url = (await fleet.startApi()).api.url;
}, 60_000);
afterAll(async () => fleet?.close());

const cli = (args: string[], options: { api?: string; stdin?: string | Buffer } = {}) =>
  runFleetCli(
    args,
    { ...fleet.env, FLEET_API_URL: options.api ?? url },
    120_000,
    undefined,
    undefined,
    options.stdin,
  );

/** An export file's text: its header, `messages` (seq added), its end line. */
function exportText(messages: Record<string, unknown>[], header: Record<string, unknown> = {}): string {
  const lines = [
    JSON.stringify({
      fleetSessionExport: 1,
      id: "00000000-0000-4000-8000-000000000001",
      agent: AGENT,
      metadata: { from: "test" },
      exportedAt: "2026-01-01T00:00:00.000Z",
      ...header,
    }),
    ...messages.map((m, i) => JSON.stringify({ ...m, seq: i + 1 })),
    JSON.stringify({ fleetSessionExportEnd: { messages: messages.length } }),
  ];
  return `${lines.join("\n")}\n`;
}

async function fileOf(name: string, text: string | Buffer): Promise<string> {
  const file = join(fleet.config.toolDir, name);
  await writeFile(file, text);
  return file;
}

describe("an API URL that fetch refuses itself", () => {
  it("ends the first request at once: one line, exit 2, no retries", async () => {
    const file = await fileOf("bad-port.jsonl", exportText([{ role: "user", content: "hi" }]));
    // Port 1 is one fetch never connects to ("bad port"): every try would be refused alike.
    const started = Date.now();
    const imported = await cli(["session", "import", file], { api: "http://127.0.0.1:1" });
    const exported = await cli(["session", "export", "abc"], { api: "http://127.0.0.1:1" });
    console.log(`import and export against port 1 took ${Date.now() - started} ms together`);
    expect(imported.stderr).toBe(
      "fleet session import: POST http://127.0.0.1:1/v1/sessions failed: bad port (fetch sends nothing to this URL: check --api or FLEET_API_URL)\n",
    );
    expect(imported.code).toBe(2);
    expect(exported.stderr).toBe(
      "fleet session export: GET http://127.0.0.1:1/v1/sessions/abc?limit=2000&runsLimit=0 failed: bad port (fetch sends nothing to this URL: check --api or FLEET_API_URL)\n",
    );
    expect(exported.code).toBe(2);
  }, 60_000);

  it("a port where nothing listens: the first request says so at once", async () => {
    const file = await fileOf("refused.jsonl", exportText([{ role: "user", content: "hi" }]));
    const imported = await cli(["session", "import", file], { api: "http://127.0.0.1:7599" });
    expect(imported.stderr).toBe(
      "fleet session import: cannot reach the API at http://127.0.0.1:7599; start it with `fleet api` or set FLEET_API_URL\n",
    );
    expect(imported.code).toBe(2);
  }, 60_000);
});
