/**
 * `fleet batch submit` against a tenant's active-session cap (contracts §9, §10), as a user
 * runs it: a file longer than the tenant's room is sent in parts; a part refused with 429
 * (`active_sessions`) is sent again once sessions of the batch have ended and made room —
 * one line on stderr says it waits, at the first 429 — rather than the command failing after
 * the client's 30 s and leaving an open batch behind that never ends (no `--wait`, no webhook),
 * or saying nothing for the client's 30 s of its own waiting.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import type { IncomingHttpHeaders } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { startApiProxy } from "./support/api-proxy.js";
import { runFleetCli } from "./support/fleet-cli.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

const line = (i: number) =>
  JSON.stringify({
    customId: `l-${i}`,
    agent: { model: { provider: "scripted", steps: [{ text: `answer ${i}` }] } },
    input: `question ${i}`,
  });

/**
 * The API's answers with a Retry-After of 1 s instead of its 5 s (ACTIVE_RETRY_AFTER_SECONDS):
 * the command waits what the API says, and what the cases prove (it waits for room, asks
 * again, and then sends the part) does not depend on how long; at 5 s each wait for room was
 * 4 s of a fixed wait more, two to four times a run.
 */
const retryAfterOneSecond = (headers: IncomingHttpHeaders): IncomingHttpHeaders => {
  if (headers["retry-after"] === undefined) return headers;
  shortened++;
  return { ...headers, "retry-after": "1" };
};
/** How many answers said to wait (printed: the seconds of fixed waits saved, 4 each). */
let shortened = 0;
afterAll(() => console.log(`batch-cli-limits: ${shortened} Retry-After waits of 1 s instead of 5 s`));

// The two fleets are independent (a database, a prefix and an API each) and run side by side.
describe.concurrent("fleet batch submit under FLEET_TENANT_MAX_ACTIVE_SESSIONS", () => {
  let fleet: FleetEnv;
  let url: string;
  let client: FleetClient;
  let dir: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-cli-limits", { env: { FLEET_TENANT_MAX_ACTIVE_SESSIONS: "1001" } });
    const started = await fleet.startApi();
    url = started.api.url;
    client = started.client;
    dir = await mkdtemp(join(tmpdir(), "fleet-batch-limits-"));
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("waits for room for a part the cap refuses, then sends it and closes the batch", async ({ expect }) => {
    const file = join(dir, "sessions.jsonl");
    await writeFile(file, `${Array.from({ length: 1_002 }, (_, i) => line(i)).join("\n")}\n`);
    // No worker yet: the first part (1,000) fills the cap, the second (2) does not fit.
    let waiting!: () => void;
    const waitingForRoom = new Promise<void>((resolve) => {
      waiting = resolve;
    });
    // The batch requests the command sent, counted in front of the API.
    let posts = 0;
    let postsWhenSaid: number | undefined;
    const proxy = await startApiProxy(
      url,
      (request, _response, forward) => {
        if (request.method === "POST" && request.url?.startsWith("/v1/batches")) posts++;
        forward();
      },
      retryAfterOneSecond,
    );
    const submitted = runFleetCli(
      ["batch", "submit", file],
      { ...fleet.env, FLEET_API_URL: proxy.url },
      120_000,
      undefined,
      (stderr) => {
        if (/waiting for room/.test(stderr)) {
          postsWhenSaid ??= posts;
          waiting();
        }
      },
    );
    // Once the command says it waits for room (not after a guessed delay): then sessions end
    // and make room.
    await Promise.race([waitingForRoom, submitted]);
    // Said at the first 429: the batch's first part, then the second one refused once. The
    // client used to wait out 429s itself for 30 s first, sending the part again and again
    // with nothing on the terminal.
    expect(postsWhenSaid).toBe(2);
    await fleet.spawnWorker({ WORKER_CONCURRENCY: "16" });
    const result = await submitted;
    expect(result.stderr).toMatch(/active sessions/);
    expect(result.code).toBe(0);
    const id = result.stdout.trim();
    const batch = await client.getBatch(id);
    expect(batch.counts.total).toBe(1_002);
    expect(batch.open).toBe(false);
    proxy.server.closeAllConnections();
    await new Promise((resolve) => proxy.server.close(resolve));
  }, 150_000);
});

describe.concurrent("fleet batch submit with parts larger than FLEET_TENANT_MAX_ACTIVE_SESSIONS", () => {
  let fleet: FleetEnv;
  let url: string;
  let client: FleetClient;
  let dir: string;

  beforeAll(async () => {
    fleet = await createFleetEnv("batch-cli-cap", { env: { FLEET_TENANT_MAX_ACTIVE_SESSIONS: "5" } });
    const started = await fleet.startApi();
    url = started.api.url;
    client = started.client;
    dir = await mkdtemp(join(tmpdir(), "fleet-batch-cap-"));
  }, 60_000);
  afterAll(async () => {
    await fleet?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("says at once that a part can never fit (it waited 10 minutes for room), and --part-size sends it", async ({
    expect,
  }) => {
    const file = join(dir, "sessions.jsonl");
    await writeFile(file, `${Array.from({ length: 12 }, (_, i) => line(i)).join("\n")}\n`);
    const env = { ...fleet.env, FLEET_API_URL: url };
    // The batch requests the command sent, counted in front of the API. A part it sends again
    // is one it waits to fit (every 5 s, for 10 minutes): the proxy refuses it as a bad request
    // instead of passing it on, so the command ends at once and the count says what happened.
    let posts = 0;
    const proxy = await startApiProxy(url, (request, response, forward) => {
      if (request.method === "POST" && request.url?.startsWith("/v1/batches") && ++posts > 1) {
        response.writeHead(400, { "content-type": "application/json" });
        response.end(JSON.stringify({ error: { code: "invalid_request", message: "sent again" } }));
        return;
      }
      forward();
    });
    const refused = await runFleetCli(
      ["batch", "submit", file],
      { ...env, FLEET_API_URL: proxy.url },
      60_000,
    );
    proxy.server.closeAllConnections();
    await new Promise((resolve) => proxy.server.close(resolve));
    // Refused once, said at once: no second request, no wait for room.
    expect(posts).toBe(1);
    expect(refused.stderr).not.toMatch(/waiting for room/);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/send at most 5 at once/);
    expect((await client.listSessions()).sessions).toHaveLength(0);

    await fleet.spawnWorker({ WORKER_CONCURRENCY: "4" });
    // Parts of 5 under a cap of 5: each part after the first waits for the one before to end.
    const shortWaits = await startApiProxy(
      url,
      (_request, _response, forward) => forward(),
      retryAfterOneSecond,
    );
    const result = await runFleetCli(
      ["batch", "submit", "--part-size", "5", "--wait", file],
      { ...env, FLEET_API_URL: shortWaits.url },
      90_000,
    );
    shortWaits.server.closeAllConnections();
    await new Promise((resolve) => shortWaits.server.close(resolve));
    expect(result.code, result.stderr).toBe(0);
    const batch = JSON.parse(result.stdout) as { counts: { total: number }; open: boolean };
    expect(batch.counts.total).toBe(12);
    expect(batch.open).toBe(false);
  }, 150_000);
});
