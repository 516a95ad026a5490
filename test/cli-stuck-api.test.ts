/**
 * The client commands against an API that takes the connection and never answers (its event
 * loop stuck, a proxy or load balancer holding the request with nothing behind it): each
 * request gives up once no answer has begun within a minute, and the command ends with one
 * line saying so. Before, each request waited for undici's own headers timeout, 300 s, so
 * `fleet batch status ID` sat silent for five minutes and then said `failed: Headers Timeout
 * Error`; the commands that ask again (`session export`, `batch submit`) waited 6 × 300 s.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFleetCli } from "./support/fleet-cli.js";

const ID = "00000000-0000-4000-8000-000000000000";

describe("a fleet client command against an API that answers nothing", () => {
  let server: Server;
  const sockets = new Set<Socket>();
  let api: string;
  let cwd: string;

  beforeAll(async () => {
    server = createServer((socket) => {
      sockets.add(socket);
      socket.on("error", () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    api = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    // No .env of the repository's: the commands read only what the test gives.
    cwd = await mkdtemp(join(tmpdir(), "cli-stuck-api-"));
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
    await rm(cwd, { recursive: true, force: true });
  });

  it("`fleet batch status` and `fleet session delete` end after a minute with one line, exit 1", async () => {
    const env = { FLEET_API_URL: api, FLEET_API_KEY: undefined, FLEET_DEBUG: undefined };
    const started = Date.now();
    const [status, deleted] = await Promise.all([
      runFleetCli(["batch", "status", ID], env, 120_000, cwd),
      runFleetCli(["session", "delete", ID], env, 120_000, cwd),
    ]);
    const elapsed = Date.now() - started;
    expect(status.stderr).toBe(
      `fleet batch status: GET ${api}/v1/batches/${ID}: no answer within 60 s, though the connection was taken (is the API stuck, or is this port a proxy's with no API behind it?)\n`,
    );
    expect(status.code).toBe(1);
    expect(deleted.stderr).toBe(
      `fleet session delete: DELETE ${api}/v1/sessions/${ID}: no answer within 60 s, though the connection was taken (is the API stuck, or is this port a proxy's with no API behind it?)\n`,
    );
    expect(deleted.code).toBe(1);
    expect(status.stdout + deleted.stdout).toBe("");
    expect(elapsed).toBeGreaterThanOrEqual(60_000);
    expect(elapsed).toBeLessThan(100_000);
  }, 150_000);
});
