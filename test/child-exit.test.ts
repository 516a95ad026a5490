/**
 * test/support/child-exit.ts: a child's exit code comes with all it wrote, and a grandchild
 * that keeps the pipes open does not hold the test past the grace.
 */
import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { exitedWithOutput } from "./support/child-exit.js";

const node = (script: string) =>
  spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "pipe"] });

describe("exitedWithOutput", () => {
  it("gives the exit code after the last line written before the exit has been read", async () => {
    for (let i = 0; i < 10; i++) {
      const child = node(
        "process.stdout.write('out\\n'); process.stderr.write('one line\\n'); process.exit(2)",
      );
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      expect(await exitedWithOutput(child)).toBe(2);
      expect([stdout, stderr]).toEqual(["out\n", "one line\n"]);
    }
  });

  it("resolves at the grace when a grandchild still holds the pipes", async () => {
    const child = node(
      "const g = require('node:child_process').spawn(process.execPath, ['-e', 'setTimeout(() => {}, 20000)'], { stdio: 'inherit', detached: true }); g.unref(); process.stdout.write(String(g.pid)); process.exit(5)",
    );
    let pid = "";
    child.stdout.on("data", (d) => (pid += d));
    const started = Date.now();
    try {
      expect(await exitedWithOutput(child, 300)).toBe(5);
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      if (pid !== "") process.kill(Number(pid), "SIGKILL");
    }
  });

  it("a child that already exited and closed its pipes resolves at once", async () => {
    const child = node("process.exit(0)");
    await new Promise((resolve) => child.once("close", resolve));
    expect(await exitedWithOutput(child)).toBe(0);
  });
});
