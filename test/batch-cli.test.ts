/**
 * `fleet batch …` as a user runs it (contracts §9): a JSONL file of 1,200 sessions is
 * submitted in two parts (one batch: created open, closed by the last part), followed with
 * --wait (plain progress lines off a terminal), its results streamed as NDJSON; a bad line
 * is named by file and line; status and cancel print the batch JSON.
 */
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { type AddressInfo, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startApi } from "../src/producer/api-server.js";
import type { FleetClient } from "../src/producer/client.js";
import { startApiProxy } from "./support/api-proxy.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";

const line = (i: number) =>
  JSON.stringify({
    customId: `l-${i}`,
    agent: { model: { provider: "scripted", steps: [{ text: `answer ${i}` }] } },
    input: `question ${i}`,
  });

/** A port nothing listens on (it was free a moment ago). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe("fleet batch", () => {
  let fleet: FleetEnv;
  let url: string;
  let client: FleetClient;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-cli");
    const started = await fleet.startApi();
    url = started.api.url;
    client = started.client;
    await fleet.spawnWorker({ WORKER_CONCURRENCY: "16" });
  }, 60_000);
  afterAll(() => fleet?.close());

  const fleetCli = (args: string[]) => runFleetCli(args, { ...fleet.env, FLEET_API_URL: url });
  /** `fleet ARGS | head -1`, printing the command's own exit code as `fleet exit N`. */
  const pipedToHead = (args: string[]) =>
    new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
      execFile(
        "bash",
        [
          "-c",
          // biome-ignore lint/suspicious/noTemplateCurlyInString: bash's own ${…}, not a template
          '"$0" "$@" | head -1 > /dev/null; echo "fleet exit ${PIPESTATUS[0]}"',
          process.execPath,
          FLEET_BIN,
          ...args,
        ],
        { env: { ...process.env, ...fleet.env, FLEET_API_URL: url }, cwd: ROOT },
        (error, stdout, stderr) => (error ? reject(error) : resolve({ stdout, stderr })),
      );
    });

  it("submits a file in parts as one batch, waits for it, and streams its results", async () => {
    const file = join(fleet.config.toolDir, "in.jsonl");
    await writeFile(file, `${Array.from({ length: 1_200 }, (_, i) => line(i)).join("\n")}\n`);
    const submitted = await fleetCli(["batch", "submit", file, "--wait"]);
    expect(submitted.code, submitted.stderr).toBe(0);
    expect(submitted.stderr).toContain("submitted 1000/1200");
    expect(submitted.stderr).toContain("submitted 1200/1200");
    expect(submitted.stderr).toMatch(/ended 1200\/1200/);
    const batch = JSON.parse(submitted.stdout);
    expect(batch).toMatchObject({ status: "ended", open: false, counts: { total: 1_200, completed: 1_200 } });

    const results = await fleetCli(["batch", "results", batch.id]);
    expect(results.code, results.stderr).toBe(0);
    const lines = results.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(1_200);
    const byId = new Map(lines.map((l) => [l.customId, l.output]));
    expect(byId.get("l-0")).toBe("answer 0");
    expect(byId.get("l-1199")).toBe("answer 1199");

    // A reader that stops early (`| head -1`) ends the command quietly, exit 0, every time.
    for (let i = 0; i < 3; i++) {
      const piped = await pipedToHead(["batch", "results", batch.id]);
      expect(piped.stdout, piped.stderr).toMatch(/^fleet exit 0$/m);
      expect(piped.stderr).not.toMatch(/uncaught|EPIPE/);
    }

    const status = await fleetCli(["batch", "status", batch.id]);
    expect(JSON.parse(status.stdout).counts.total).toBe(1_200);
    const cancelled = await fleetCli(["batch", "cancel", batch.id]);
    expect(cancelled.code).toBe(0);
    // Nothing was left to cancel: it stays ended, every session completed.
    expect(JSON.parse(cancelled.stdout).counts.completed).toBe(1_200);
  }, 90_000);

  /** `fleet batch submit - ARGS` with `text` on its stdin; `tmp`: its TMPDIR. */
  const submitStdin = (text: string, args: string[] = [], tmp?: string) =>
    runFleetCli(
      ["batch", "submit", "-", ...args],
      { ...fleet.env, FLEET_API_URL: url, ...(tmp ? { TMPDIR: tmp } : {}) },
      60_000,
      ROOT,
      undefined,
      text,
    );

  it("from stdin, every progress line says N/total as a file's do: stdin is read whole before the first part is sent", async () => {
    const lines = `${Array.from({ length: 5 }, (_, i) => line(i)).join("\n")}\n`;
    const tmp = join(fleet.config.toolDir, "tmp-stdin-good");
    await mkdir(tmp);
    const one = await submitStdin(lines, [], tmp);
    expect(one.code, one.stderr).toBe(0);
    expect(one.stderr).toMatch(/^submitted 5\/5 \(batch \S+\)$/m);
    // Before, parts were sent as stdin was read: "submitted 2", "submitted 4", then "5/5".
    const parts = await submitStdin(lines, ["--part-size", "2"], tmp);
    expect(parts.code, parts.stderr).toBe(0);
    expect(parts.stderr.split("\n").map((l) => l.replace(/ \(batch \S+\)$/, ""))).toEqual([
      "submitted 2/5",
      "submitted 4/5",
      "submitted 5/5",
      "",
    ]);
    // The copy of stdin is gone once the command has ended.
    expect(await readdir(tmp)).toEqual([]);
  });

  it("from stdin, a bad line at any position creates nothing: its line is named, exit 2, no copy left behind", async () => {
    const batches = async () => (await fleet.database.sql<{ id: string }[]>`select id from batches`).length;
    const sessions = async () =>
      (await fleet.database.sql<{ n: number }[]>`select count(*)::int as n from sessions`)[0]!.n;
    const before = { batches: await batches(), sessions: await sessions() };
    const tmp = join(fleet.config.toolDir, "tmp-stdin");
    await mkdir(tmp);
    const good = [line(100), line(101), line(102)];
    // Parts of two: the first was created (and started) when line 3 was read, then cancelled
    // when line 4 was found not to be JSON.
    const notJson = await submitStdin(`${[...good, "{oops"].join("\n")}\n`, ["--part-size", "2"], tmp);
    expect(await batches(), notJson.stderr).toBe(before.batches);
    expect([notJson.code, notJson.stdout, notJson.stderr]).toEqual([
      2,
      "",
      "fleet batch submit: stdin:4: not valid JSON\n",
    ]);
    // A customId given twice is named too (a file's were; stdin's were found by the API).
    const repeated = await submitStdin(`${[...good, line(100)].join("\n")}\n`, ["--part-size", "2"], tmp);
    expect([repeated.code, repeated.stdout], repeated.stderr).toEqual([2, ""]);
    expect(repeated.stderr).toBe(
      `fleet batch submit: stdin:4: customId "l-100" repeats line 1's; customIds are unique within a batch\n`,
    );
    expect({ batches: await batches(), sessions: await sessions() }).toEqual(before);
    expect(await readdir(tmp)).toEqual([]);
  }, 60_000);

  it("reads FLEET_API_URL from the working directory's .env; no API there is one line and exit 2", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fleet-env-"));
    const env = { ...fleet.env, FLEET_API_URL: undefined, PORT: undefined };
    try {
      const batch = await client.createBatch([
        { agent: { model: { provider: "scripted", steps: [{ text: "x" }] } } },
      ]);
      await writeFile(join(dir, ".env"), `FLEET_API_URL=${url}\n`);
      const found = await runFleetCli(["batch", "status", batch.id], env, 30_000, dir);
      expect(found.code, found.stderr).toBe(0);
      expect(JSON.parse(found.stdout).id).toBe(batch.id);
      const dead = `http://127.0.0.1:${await freePort()}`;
      await writeFile(join(dir, ".env"), `FLEET_API_URL=${dead}\n`);
      for (const args of [
        ["watch", batch.id, "--once"],
        ["batch", "status", batch.id],
      ]) {
        const refused = await runFleetCli(args, env, 30_000, dir);
        expect(refused.code, args.join(" ")).toBe(2);
        expect(refused.stderr).toBe(
          `fleet ${args[0] === "watch" ? "watch" : "batch status"}: cannot reach the API at ${dead}; start it with \`fleet api\` or set FLEET_API_URL\n`,
        );
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it("--wait outlives a restart of the API: it asks again until the batch has ended", async () => {
    // A second API of this fleet on a port of its own, stopped and started again on it.
    const config = { ...fleet.config, logLevel: "silent" as const };
    let api = await startApi(config, { port: 0 });
    const port = Number(new URL(api.url).port);
    const slow = (i: number) =>
      JSON.stringify({
        customId: `w-${i}`,
        agent: {
          model: {
            provider: "scripted",
            steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: 3_000 } }] }, { text: "ok" }],
          },
          tools: ["sleep"],
        },
        input: "go",
      });
    const file = join(fleet.config.toolDir, "slow.jsonl");
    await writeFile(file, `${Array.from({ length: 4 }, (_, i) => slow(i)).join("\n")}\n`);
    let stderr = "";
    const waiting = runFleetCli(
      ["batch", "submit", file, "--wait"],
      { ...fleet.env, FLEET_API_URL: api.url },
      60_000,
      undefined,
      (sofar) => {
        stderr = sofar;
      },
    );
    try {
      // The API goes once the command is waiting for the batch to end, and comes back once the
      // command has said it does not answer (not after guessed delays: a loaded machine starts
      // the command more slowly than the batch ran).
      await waitFor(async () => /ended [0-3]\/4/.test(stderr), 30_000, "the command waits for the batch");
      await api.stop();
      await waitFor(async () => stderr.includes("the API does not answer"), 20_000, "the command notices");
      api = await startApi(config, { port });
      const done = await waiting;
      expect(done.code, done.stderr).toBe(0);
      expect(done.stderr).toContain("the API does not answer");
      expect(JSON.parse(done.stdout)).toMatchObject({ status: "ended", counts: { total: 4, completed: 4 } });
    } finally {
      await api.stop();
    }
  }, 60_000);

  it("names the file's line of a bad session, and a missing batch exits 2", async () => {
    const file = join(fleet.config.toolDir, "bad.jsonl");
    await writeFile(
      file,
      [line(1), "", line(2), JSON.stringify({ agent: { model: { provider: "nope" } } })].join("\n"),
    );
    const bad = await fleetCli(["batch", "submit", file]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`${file}:4:`);
    expect(bad.stderr).toContain("provider");
    const missing = await fleetCli(["batch", "status", "00000000-0000-4000-8000-000000000000"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/not found/);
  }, 30_000);

  it("an empty --webhook is refused and nothing is sent, not a batch submitted without one", async () => {
    const before = await fleet.database.sql`select id from batches`;
    const file = join(fleet.config.toolDir, "webhook.jsonl");
    await writeFile(file, `${line(1)}\n`);
    const bad = await fleetCli(["batch", "submit", "--webhook", "", file]);
    expect([bad.code, bad.stdout], bad.stderr).toEqual([2, ""]);
    expect(bad.stderr).toContain("webhook.url: must be a URL");
    expect(await fleet.database.sql`select id from batches`).toHaveLength(before.length);
  }, 30_000);

  it("an empty --idempotency-key is refused and nothing is sent, not keys every such command shares", async () => {
    const before = await fleet.database.sql`select id from batches`;
    const file = join(fleet.config.toolDir, "empty-key.jsonl");
    await writeFile(file, `${line(1)}\n`);
    const bad = await fleetCli(["batch", "submit", "--idempotency-key", "", file]);
    expect([bad.code, bad.stdout], bad.stderr).toEqual([2, ""]);
    expect(bad.stderr).toContain("--idempotency-key must not be empty");
    expect(await fleet.database.sql`select id from batches`).toHaveLength(before.length);
  }, 30_000);

  it("a line that is not UTF-8 is named and nothing is sent, not submitted with U+FFFD", async () => {
    const before = await fleet.database.sql`select id from batches`;
    // Line 2's input is "café" in Latin-1 (0xE9): read as UTF-8 it became "caf\uFFFD", and the
    // batch was created with that input, exit 0.
    const file = join(fleet.config.toolDir, "latin1.jsonl");
    const latin1 = Buffer.from(
      JSON.stringify({
        agent: { model: { provider: "scripted", steps: [{ text: "ok" }] } },
        input: "caf\u00e9",
      }),
      "latin1",
    );
    await writeFile(file, Buffer.concat([Buffer.from(`${line(1)}\n`), latin1, Buffer.from("\n")]));
    const bad = await fleetCli(["batch", "submit", file]);
    expect(bad.code, bad.stderr).toBe(2);
    expect(bad.stderr).toContain(`${file}:2: not valid UTF-8`);
    expect(await fleet.database.sql`select id from batches`).toHaveLength(before.length);
  }, 30_000);

  it("a bad line past the first part sends nothing; a part the API refuses cancels the open batch", async () => {
    const batches = async () =>
      (await fleet.database.sql<{ id: string }[]>`select id from batches order by created_at`).map(
        (b) => b.id,
      );
    const before = await batches();
    const lines = Array.from({ length: 1_500 }, (_, i) => line(5_000 + i));
    // Not JSON at line 1,200: the first part (1,000) used to be sent as an open batch, left
    // open for ever (its sessions ran; no end, no webhook), and the command exited 2.
    const notJson = join(fleet.config.toolDir, "late-not-json.jsonl");
    await writeFile(notJson, [...lines.slice(0, 1_199), "{oops", ...lines.slice(1_200)].join("\n"));
    const refusedLocally = await fleetCli(["batch", "submit", notJson]);
    expect(refusedLocally.code).toBe(2);
    expect(refusedLocally.stderr).toContain(`${notJson}:1200: not valid JSON`);
    expect(await batches()).toEqual(before);
    // A file that cannot be read: one line naming it, exit 2 (it was `fleet: ENOENT …`, exit 1).
    const missing = await fleetCli(["batch", "submit", join(fleet.config.toolDir, "no-such.jsonl")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^fleet batch submit: .*no-such\.jsonl: cannot be read \(ENOENT/);
    // A folder given for the file: the same (it was `fleet: EISDIR: illegal operation on a
    // directory, read`, exit 1, naming no file).
    const folder = await fleetCli(["batch", "submit", fleet.config.toolDir]);
    expect(folder.code).toBe(2);
    expect(folder.stderr.trim()).toBe(
      `fleet batch submit: ${fleet.config.toolDir}: cannot be read (EISDIR: illegal operation on a directory, read)`,
    );
    expect(await batches()).toEqual(before);

    // JSON the API refuses at line 1,200 (only the API knows its endpoints; a line the API reads
    // as no session at all is named before anything is sent: batch-cli-line-shapes.test.ts): the first part was
    // sent; the batch is cancelled rather than left open, and the command says so. Its sessions
    // have no input, so none runs: what is cancelled is the CLI's to do, not the worker's 1,000
    // runs (test/batch-cancel.test.ts cancels running and queued ones).
    const badAgent = join(fleet.config.toolDir, "late-bad-agent.jsonl");
    const idle = (i: number) =>
      JSON.stringify({
        customId: `idle-${i}`,
        agent: { model: { provider: "scripted", steps: [{ text: "x" }] } },
      });
    const refused = JSON.stringify({
      customId: "bad",
      agent: { model: { provider: "openai", model: "m", endpoint: "nope" } },
      input: "x",
    });
    const idleLines = Array.from({ length: 1_500 }, (_, i) => idle(i));
    await writeFile(badAgent, [...idleLines.slice(0, 1_199), refused, ...idleLines.slice(1_200)].join("\n"));
    const refusedByApi = await fleetCli(["batch", "submit", badAgent]);
    expect(refusedByApi.code).toBe(2);
    expect(refusedByApi.stderr).toContain(`${badAgent}:1200:`);
    const created = (await batches()).filter((id) => !before.includes(id));
    expect(created).toHaveLength(1);
    expect(refusedByApi.stderr).toContain(
      `batch ${created[0]} cancelled with the 1000 sessions sent before this error: an open batch never ends`,
    );
    const batch = await client.getBatch(created[0]!);
    expect({ open: batch.open, status: batch.status, total: batch.counts.total }).toEqual({
      open: false,
      status: "cancelled",
      total: 1_000,
    });
  }, 60_000);

  it("a part that cannot be sent leaves the batch open, and the same command with its key sends the rest once", async () => {
    let failAppends = true;
    let refused = 0;
    const proxy = await startApiProxy(url, (req, res, forward) => {
      if (failAppends && req.method === "POST" && /^\/v1\/batches\/[^/]+\/sessions/.test(req.url ?? "")) {
        // Retry-After: 0, as the case does not depend on how long the CLI waits between its
        // tries (0.1 s each, its floor, instead of the backoff's 15.5 s in all, which
        // test/batch-send.test.ts proves for an answer without one).
        refused++;
        res.writeHead(503, { "content-type": "application/json", "retry-after": "0" });
        res.end(JSON.stringify({ error: { code: "unavailable", message: "down for a deploy" } }));
        return;
      }
      forward();
    });
    try {
      const file = join(fleet.config.toolDir, "deploy.jsonl");
      await writeFile(file, Array.from({ length: 250 }, (_, i) => line(7_000 + i)).join("\n"));
      const args = ["batch", "submit", file, "--part-size", "100", "--idempotency-key", "deploy-7000"];
      const viaProxy = () => runFleetCli(args, { ...fleet.env, FLEET_API_URL: proxy.url });
      const failed = await viaProxy();
      expect(failed.code).not.toBe(0);
      const open =
        /batch (\S+) is open with the 100 sessions sent before this error: run the same command with --idempotency-key deploy-7000 to send the rest/.exec(
          failed.stderr,
        );
      expect(open, failed.stderr).not.toBeNull();
      expect(refused).toBe(6); // the part was tried six times before the command gave up
      const id = open![1]!;
      expect(await client.getBatch(id)).toMatchObject({ open: true, counts: { total: 100 } });
      failAppends = false;
      const rerun = await viaProxy();
      expect(rerun.code, rerun.stderr).toBe(0);
      expect(rerun.stdout.trim()).toBe(id);
      const [row] = await fleet.database.sql<{ n: number; ids: number }[]>`
        select count(*)::int as n, count(distinct custom_id)::int as ids from sessions where batch_id = ${id}`;
      expect(row).toEqual({ n: 250, ids: 250 });
      expect(await client.getBatch(id)).toMatchObject({ open: false, counts: { total: 250 } });
    } finally {
      await new Promise((resolve) => proxy.server.close(resolve));
    }
  }, 90_000);
});
