/**
 * `fleet … | true`, `fleet --help | less` quit early: a reader that closed its end of the pipe
 * before the command wrote. Help, the version and the client commands stop quietly with exit 0,
 * as `fleet batch results ID | head -1` does (test/batch-cli.test.ts). Before, every help and
 * `--version`, and `fleet webhook-secret`, ended on `fleet --help: uncaught exception: write
 * EPIPE; exiting so that a supervisor restarts it`, exit 70. A role keeps that last resort for
 * its log (cli.ts), but not for its `--help`.
 */
import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { exitedWithOutput } from "./support/child-exit.js";
import { FLEET_BIN, ROOT } from "./support/fleet-env.js";

/** `fleet ARGS` whose stdout's reader is gone before it writes; its exit code and stderr. */
async function toClosedPipe(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [FLEET_BIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  // Closed at once: the command has not started yet, let alone written.
  child.stdout.destroy();
  let stderr = "";
  child.stderr.on("data", (d) => {
    stderr += d;
  });
  const code = await exitedWithOutput(child);
  return { code, stderr };
}

describe("a fleet command whose stdout's reader is gone", () => {
  it.each([
    [["--help"]],
    [["help"]],
    [["--version"]],
    [["up", "--help"]],
    [["worker", "--help"]],
    [["batch", "submit", "--help"]],
    [["help", "api"]],
    [["webhook-secret", "--help"]],
  ])(
    "`fleet %s` stops quietly with exit 0",
    async (args) => {
      const { code, stderr } = await toClosedPipe(args);
      expect(stderr).toBe("");
      expect(code).toBe(0);
    },
    60_000,
  );

  it("`fleet webhook-secret` stops quietly with exit 0, as the other client commands do", async () => {
    // An API that answers the secret: a small server of its own, so the case needs no fleet.
    const { createServer } = await import("node:http");
    const server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ secret: "whsec_test" }));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    try {
      const { code, stderr } = await toClosedPipe(["webhook-secret"], {
        FLEET_API_URL: `http://127.0.0.1:${port}`,
      });
      expect(stderr).toBe("");
      expect(code).toBe(0);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  }, 60_000);
});
