/**
 * `fleet migrate`, `api`, `worker` and `sweeper` load the code of their own role only when
 * they start it: a role refused at its checks (here a bad port or an unreachable Postgres)
 * has loaded none of fastify, bull-board or BullMQ. Before, src/commands/serve.ts imported all
 * three roles statically, and every start — each worker and sweeper of a test, each `fleet
 * migrate`, each refused role of test/preflight.test.ts — paid ~1 s of CPU for them first.
 * The packages a child loaded are read from require.cache at its exit (all three are
 * CommonJS, which an ES module's import puts there too). A client command (`fleet batch
 * status`) loads no Redis or Postgres client either.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { type AddressInfo, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FLEET_BIN, ROOT } from "./support/fleet-env.js";

const PRELOAD = `import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
process.on("exit", () => {
  const names = new Set();
  for (const path of Object.keys(require.cache)) {
    const match = /node_modules\\/((@[^/]+\\/)?[^/]+)/.exec(path);
    if (match) names.add(match[1]);
  }
  process.stderr.write("loaded packages: " + [...names].sort().join(",") + "\\n");
});
`;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "fleet-role-imports-"));
  await writeFile(join(dir, "preload.mjs"), PRELOAD);
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const loaded = (args: string[], env: Record<string, string>) =>
  new Promise<{ code: number | null; packages: string[]; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      ["--import", join(dir, "preload.mjs"), FLEET_BIN, ...args],
      { cwd: ROOT, env: { ...process.env, ...env }, timeout: 30_000 },
      (error, _stdout, stderr) => {
        const line = /^loaded packages: (.*)$/m.exec(stderr)?.[1] ?? "";
        resolve({ code: error ? (error.code as number) : 0, packages: line.split(","), stderr });
      },
    );
  });

describe("a role refused at its checks", () => {
  it("has loaded none of the API's, the worker's or the sweeper's packages", async () => {
    const unreachable = { DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere" };
    const results = await Promise.all([
      loaded(["migrate"], unreachable),
      loaded(["api"], { PORT: "70000" }),
      loaded(["worker"], { METRICS_PORT: "99999" }),
      loaded(["sweeper"], { METRICS_PORT: "99999" }),
    ]);
    for (const result of results) {
      expect(result.code, result.stderr).toBe(2);
      // The preload's line is there: the check below reads what the child loaded.
      expect(result.packages, result.stderr).toContain("commander");
      for (const heavy of ["fastify", "@bull-board/api", "bullmq"])
        expect(result.packages, result.stderr).not.toContain(heavy);
    }
  });
});

describe("a client command", () => {
  it("loads no Redis or Postgres client: it only talks to the API", async () => {
    // config.ts reads REDIS_URL with redis.ts; ioredis loaded with it (~0.2 s of CPU of the
    // command's ~0.6 s) until cjs-packages.ts required it at its first use.
    const dead = createServer();
    await new Promise<void>((resolve) => dead.listen(0, "127.0.0.1", resolve));
    const { port } = dead.address() as AddressInfo;
    await new Promise((resolve) => dead.close(resolve));
    const id = "00000000-0000-4000-8000-000000000000";
    const result = await loaded(["batch", "status", id], { FLEET_API_URL: `http://127.0.0.1:${port}` });
    // It ran the command as far as the request: its config read, its one line written.
    expect(result.stderr).toContain(`fleet batch status: cannot reach the API at http://127.0.0.1:${port}`);
    expect(result.code, result.stderr).toBe(2);
    expect(result.packages, result.stderr).toContain("commander");
    for (const server of ["ioredis", "postgres", "bullmq", "fastify"])
      expect(result.packages, result.stderr).not.toContain(server);
  });
});
