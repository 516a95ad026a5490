/**
 * A DATABASE_URL whose host and port hold something that is not Postgres: a web server (an
 * API's port given by mistake, a proxy), or a TCP proxy with nothing behind it (HAProxy with
 * no backend up, Docker's published port while the container starts), which accepts each
 * connection and closes it. postgres.js took each close during its start-up for a reason to
 * connect again at once, for ever (porsager/postgres#1193): every command that checks
 * Postgres first (`fleet migrate`, the roles, `fleet keys`) hung with no output, one core busy.
 */
import { createServer as createHttpServer } from "node:http";
import { createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CliResult, runFleetCli } from "./support/fleet-cli.js";

/** Listens on a free loopback port; resolves with it. */
async function listening(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as { port: number }).port;
}

describe("a DATABASE_URL at a service that is not Postgres", () => {
  // Answers whatever it gets with `HTTP/1.1 400 Bad Request` and closes the connection.
  const web = createHttpServer((_req, res) => res.end());
  // Ends every connection as soon as it is accepted, reading what comes (a clean close: a
  // socket closed with unread data would reset the connection, which postgres.js reports).
  const closing = createServer((socket) => socket.resume().end());
  const urls: Record<string, string> = {};

  beforeAll(async () => {
    urls.web = `postgres://postgres@127.0.0.1:${await listening(web)}/agent_fleet`;
    urls.closing = `postgres://postgres@127.0.0.1:${await listening(closing)}/agent_fleet`;
  });
  afterAll(async () => {
    for (const server of [web, closing]) {
      server.close();
      (server as { closeAllConnections?: () => void }).closeAllConnections?.();
    }
  });

  /** `fleet ARGS` with DATABASE_URL at `url` and short checks; rejects if it has not exited in 45 s (the hang: for ever). */
  const fleet = (args: string[], url: string): Promise<CliResult> =>
    runFleetCli(
      args,
      { DATABASE_URL: url, FLEET_PREFLIGHT_TIMEOUT_MS: "300", FLEET_DEBUG: undefined },
      45_000,
    );

  const expectOneLine = (result: CliResult, command: string, url: string) => {
    expect(result.code, result.stdout + result.stderr).toBe(2);
    expect(result.stdout).not.toMatch(/ready|migrations applied/);
    const lines = result.stderr.trim().split("\n");
    expect(lines, result.stderr).toHaveLength(1);
    expect(lines[0]).toBe(
      `fleet ${command}: DATABASE_URL: what answered at ${url} is not Postgres (each connection closed without a Postgres answer, for 1.3 s): is DATABASE_URL's port another service's, or a proxy with no Postgres behind it? (Postgres listens on 5432 unless told otherwise)`,
    );
    expect(result.stderr).not.toMatch(/\n\s+at /);
  };

  for (const kind of ["web", "closing"] as const)
    it(`(${kind === "web" ? "a web server" : "a proxy that closes each connection"}): fleet migrate, worker and keys list exit 2 with one line, and do not hang`, async () => {
      const url = urls[kind]!;
      const commands = [["migrate"], ["worker"], ["keys", "list"]];
      const results = await Promise.all(commands.map((args) => fleet(args, url)));
      for (const [i, result] of results.entries()) expectOneLine(result, commands[i]!.join(" "), url);
      console.log(results.map((r) => r.stderr.trim()).join("\n"));
    }, 120_000);
});
