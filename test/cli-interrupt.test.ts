/**
 * A client command stopped by Ctrl-C (SIGINT) or SIGTERM part-way, as a user stops a long
 * `fleet batch submit`, `fleet session export` or `fleet session import`: it leaves no private copy of its stdin under
 * $TMPDIR and no partial file beside --out, exits 130 or 143, and its last line says what was
 * left and how to go on. Each command is held at a known point by a proxy in front of the API
 * (a request that gets no answer until the signal has been sent), so the signal always comes
 * mid-command. Before, Node's default ended each at once: the copy and `FILE.PID.partial`
 * stayed, and a submit ended on `submitted 1000/3000` with its batch open for ever and the
 * prefix of its parts' Idempotency-Keys, the one way to send the rest, never said; an import
 * ended on `created session ID with messages 1–10000 of 10004`, the session's key never said.
 */
import { spawn } from "node:child_process";
import { mkdir, readdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type ApiProxy, startApiProxy } from "./support/api-proxy.js";
import { exitedWithOutput } from "./support/child-exit.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT } from "./support/fleet-env.js";
import { storedHistory } from "./support/histories.js";

const line = (i: number) =>
  JSON.stringify({ customId: `c-${i}`, agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } } });
const input = `${Array.from({ length: 3_000 }, (_, i) => line(i)).join("\n")}\n`;

/**
 * `fleet ARGS` through `proxy`, sent `signal` once the proxy holds the request it waits for;
 * resolves with its exit code and output.
 */
async function interrupted(
  args: string[],
  env: Record<string, string>,
  held: Promise<void>,
  signal: NodeJS.Signals,
  stdin?: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [FLEET_BIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: [stdin === undefined ? "ignore" : "pipe", "pipe", "pipe"],
  });
  child.stdin?.on("error", () => {});
  if (stdin !== undefined) child.stdin?.end(stdin);
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d) => {
    stdout += d;
  });
  child.stderr?.on("data", (d) => {
    stderr += d;
  });
  const exited = exitedWithOutput(child);
  await held;
  child.kill(signal);
  return { code: await exited, stdout, stderr };
}

describe("a client command stopped by a signal", () => {
  let fleet: FleetEnv;
  let url: string;
  let client: FleetClient;
  const proxies: ApiProxy[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("cli-interrupt");
    const started = await fleet.startApi();
    url = started.api.url;
    client = started.client;
  }, 60_000);
  afterAll(async () => {
    for (const proxy of proxies) proxy.server.closeAllConnections();
    for (const proxy of proxies) await new Promise((resolve) => proxy.server.close(resolve));
    await fleet?.close();
  });

  /** A proxy to the API that holds, unanswered, the first request `matches` picks. */
  const holding = async (matches: (method: string, path: string) => boolean) => {
    let reached!: () => void;
    const held = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let holds = true;
    const proxy = await startApiProxy(url, (req, _res, forward) => {
      if (holds && matches(req.method ?? "", req.url ?? "")) {
        holds = false;
        req.resume();
        reached();
        return;
      }
      forward();
    });
    proxies.push(proxy);
    return { proxyUrl: proxy.url, held };
  };

  it("`batch submit -` stopped between parts removes its copy of stdin and names the open batch and the key that sends the rest", async () => {
    const tmp = join(fleet.config.toolDir, "tmp-submit");
    await mkdir(tmp, { recursive: true });
    // The second part (the first append to the batch the first part created) is held.
    const { proxyUrl, held } = await holding((method, path) => method === "POST" && /\/sessions$/.test(path));
    const stopped = await interrupted(
      ["batch", "submit", "-", "--part-size", "1000"],
      { ...fleet.env, FLEET_API_URL: proxyUrl, TMPDIR: tmp },
      held,
      "SIGINT",
      input,
    );
    expect(stopped.code, stopped.stderr).toBe(130);
    // (tsx, which runs a checkout's sources, keeps a cache of its own there.)
    expect((await readdir(tmp)).filter((name) => name.startsWith("fleet-input-"))).toEqual([]);
    const last = stopped.stderr.trimEnd().split("\n").at(-1) ?? "";
    const said =
      /^fleet batch submit: stopped; batch (\S+) is open with the 1000 sessions sent, and never ends: run the same command with --idempotency-key (\S+) to send the rest/.exec(
        last,
      );
    expect(said, stopped.stderr).not.toBeNull();
    const [, batchId, key] = said!;

    // What the line says works: the same command with that key sends the rest, and the batch ends.
    const rest = await runFleetCli(
      ["batch", "submit", "-", "--part-size", "1000", "--idempotency-key", key!],
      { ...fleet.env, FLEET_API_URL: url, TMPDIR: tmp },
      60_000,
      ROOT,
      undefined,
      input,
    );
    expect(rest.code, rest.stderr).toBe(0);
    expect(rest.stdout.trim()).toBe(batchId);
    expect(await client.getBatch(batchId!)).toMatchObject({ open: false, counts: { total: 3_000 } });
  }, 120_000);

  it("`session import` stopped between pages names the session, what it holds and the key that goes on", async () => {
    const messages = storedHistory(10_004, 0, { varied: true });
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
    const { id: source } = await client.createSession({ agent, messages: messages.slice(0, 10_000) });
    await client.importMessages(source, messages.slice(10_000), { afterSeq: 10_000 });
    const file = join(fleet.config.toolDir, "import.jsonl");
    const exported = await runFleetCli(["session", "export", source, "--out", file], {
      ...fleet.env,
      FLEET_API_URL: url,
    });
    expect(exported.code, exported.stderr).toBe(0);
    // The first page (10,000 messages) goes with the creation; the second is held.
    const { proxyUrl, held } = await holding(
      (method, path) => method === "POST" && path.endsWith("/history"),
    );
    const stopped = await interrupted(
      ["session", "import", file],
      { ...fleet.env, FLEET_API_URL: proxyUrl },
      held,
      "SIGINT",
    );
    expect(stopped.code, stopped.stderr).toBe(130);
    const said =
      /^fleet session import: stopped; session (\S+) holds messages 1–10000 of the file's 10004 \(and perhaps the page being sent\) \(it runs nothing: delete it with `fleet session delete \1`, or run this command again with --idempotency-key (\S+) to go on\)$/.exec(
        stopped.stderr.trimEnd().split("\n").at(-1) ?? "",
      );
    expect(said, stopped.stderr).not.toBeNull();
    const [, id, key] = said!;
    const again = await runFleetCli(["session", "import", file, "--idempotency-key", key!], {
      ...fleet.env,
      FLEET_API_URL: url,
    });
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout.trim()).toBe(id);
    const [row] = await fleet.database.sql<{ n: number }[]>`
      select count(*)::int as n from messages where session_id = ${id!}`;
    expect(row!.n).toBe(10_004);
  }, 120_000);

  it("`session export --out FILE` stopped mid-export leaves no partial file and says FILE was not written", async () => {
    const { id } = await client.createSession({
      agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } },
    });
    const dir = join(fleet.config.toolDir, "export");
    await mkdir(dir, { recursive: true });
    const { proxyUrl, held } = await holding((method, path) => method === "GET" && path.includes(id));
    const out = join(dir, "session.jsonl");
    const stopped = await interrupted(
      ["session", "export", id, "--out", out],
      { ...fleet.env, FLEET_API_URL: proxyUrl },
      held,
      "SIGTERM",
    );
    expect(stopped.code, stopped.stderr).toBe(143);
    expect(await readdir(dir)).toEqual([]);
    expect(stopped.stderr.trimEnd().split("\n").at(-1)).toBe(
      `fleet session export: stopped; ${out} was not written`,
    );
  }, 60_000);
});
