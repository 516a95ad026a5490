/** When Postgres or Redis cannot be reached, a command says which one and how to start it. */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { FLEET_BIN, ROOT } from "./support/fleet-env.js";

const run = promisify(execFile);

async function fleet(args: string[], env: Record<string, string>) {
  try {
    const { stdout, stderr } = await run(process.execPath, [FLEET_BIN, ...args], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      timeout: 30_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe("unreachable services", () => {
  it("names Postgres, the address and how to start it, in one line with no stack", async () => {
    const [demo, migrate] = await Promise.all([
      fleet(["demo"], { DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere" }),
      fleet(["migrate"], { DATABASE_URL: "postgres://postgres@127.0.0.1:1/nowhere" }),
    ]);
    for (const result of [demo, migrate]) {
      expect(result.code).toBe(2);
      const lines = result.stderr.trim().split("\n");
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(
        /^fleet: DATABASE_URL: cannot reach Postgres at postgres:\/\/postgres@127\.0\.0\.1:1\/nowhere/,
      );
      expect(lines[0]).toMatch(/ECONNREFUSED.*Start it/);
    }
  });

  it("names Redis the same way", async () => {
    const result = await fleet(["demo"], { REDIS_URL: "redis://127.0.0.1:1" });
    expect(result.code).toBe(2);
    expect(result.stderr.trim()).toMatch(
      /^fleet: REDIS_URL: cannot reach Redis at redis:\/\/127\.0\.0\.1:1 \(connect ECONNREFUSED 127\.0\.0\.1:1\)\. Start it/,
    );
    expect(result.stderr).not.toMatch(/\n\s+at /);
  });
});
