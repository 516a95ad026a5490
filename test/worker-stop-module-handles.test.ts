/**
 * `fleet worker` exits once its stop has ended (`fleet worker stopped`), whatever its `--tools`
 * and `--extensions` modules hold open: an audit extension's flush timer, a tool's connection
 * pool or server. Before, the worker said `fleet worker stopped` and then stayed alive for as
 * long as such a handle lived — for ever for a `setInterval` — until a supervisor killed it
 * (`fleet up`: "did not stop within …; killing it"; systemd or Kubernetes: SIGKILL after their
 * timeout; a shell: never). Real `fleet worker` processes on Postgres and Redis.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

let fleet: FleetEnv;
let dir: string;

beforeAll(async () => {
  fleet = await createFleetEnv("worker-stop-module-handles");
  dir = await mkdtemp(join(tmpdir(), "fleet-module-handles-"));
}, 60_000);
afterAll(async () => {
  await fleet?.close();
  await rm(dir, { recursive: true, force: true });
});

describe("a worker whose modules keep handles open", () => {
  it("exits 0 once its stop has ended", async () => {
    const extension = join(dir, "audit.mjs");
    await writeFile(
      extension,
      'setInterval(() => {}, 1_000);\nexport default { name: "audit", afterRun() {} };\n',
    );
    const tools = join(dir, "tools.mjs");
    await writeFile(
      tools,
      [
        'import { createServer } from "node:net";',
        "createServer().listen(0);",
        'export default { name: "ping", description: "d", parameters: { type: "object" }, async run() { return "pong"; } };',
      ].join("\n"),
    );
    const worker = await fleet.spawnWorker({}, ["--extensions", extension, "--tools", tools]);
    worker.child.kill("SIGTERM");
    const exit = await Promise.race([
      worker.exited,
      new Promise<string>((resolve) => setTimeout(() => resolve("alive 15 s after SIGTERM"), 15_000)),
    ]);
    expect(worker.output()).toContain("fleet worker stopped");
    expect(exit).toBe(0);
  }, 60_000);
});
