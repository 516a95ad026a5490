/**
 * `bench:scale --gc` adds up each worker's collections from V8's `--trace-gc-nvp` lines
 * (bench/gc-trace.ts). Checked against the lines this Node itself prints, so that a change of
 * their format shows here rather than as zeros in a bench's figures.
 */
import { spawn, spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { GC_MARK_ARGS, gcLine, gcTotals, markGc } from "../bench/gc-trace.js";

describe("bench/gc-trace.ts", () => {
  it("adds up the scavenges and mark-compacts of a real process, and what they copied and promoted", () => {
    // Short-lived arrays (many scavenges), and 200 × 2,000 objects kept (copied, then promoted).
    const script = `
      const kept = [];
      for (let i = 0; i < 100_000; i++) {
        const a = new Array(20).fill(i);
        if (i % 500 === 0) kept.push(Array.from({ length: 2_000 }, (_, k) => ({ k })));
        globalThis.last = a;
      }
      globalThis.gc();
      console.log("kept", kept.length);`;
    const run = spawnSync(process.execPath, ["--trace-gc-nvp", "--expose-gc", "-e", script], {
      encoding: "utf8",
    });
    expect(run.status).toBe(0);
    expect(run.stdout).toContain("kept 200");
    const totals = gcTotals(run.stdout);
    expect(totals.scavenges).toBeGreaterThan(3);
    expect(totals.markCompacts).toBeGreaterThanOrEqual(1); // globalThis.gc()
    // At least the arrays' 100,000 × 20 elements (8 bytes each, or 4 with pointer compression).
    expect(totals.allocatedBytes).toBeGreaterThan(100_000 * 20 * 4);
    // The kept objects outlive a scavenge: copied, then promoted.
    expect(totals.survivedBytes).toBeGreaterThan(0);
    expect(totals.promotedBytes).toBeGreaterThan(0);
    expect(totals.pauseMs).toBeGreaterThan(0);
  });

  it("between two marks (GC_MARK_ARGS, markGc), counts what the process allocated between them, not before", async () => {
    // ~6 MB of short-lived arrays before the first mark, ~2 MB between the marks. Counted from
    // an arbitrary moment, the first collection after it also counted what came before.
    const script = `
      let keep;
      const churn = (n) => { for (let i = 0; i < n; i++) keep = new Array(20).fill(i); };
      churn(60_000);
      console.log("ready");
      process.stdin.on("data", () => { churn(20_000); console.log("churned"); });`;
    const child = spawn(process.execPath, [...GC_MARK_ARGS, "-e", script], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (data: Buffer) => {
      out += data;
    });
    const worker = { child, output: () => out };
    const seen = async (text: string) => {
      while (!out.includes(text)) await new Promise((done) => setTimeout(done, 10));
    };
    try {
      await seen("ready\n");
      const from = await markGc(worker, 1);
      child.stdin.write("go\n");
      await seen("churned\n");
      const to = await markGc(worker, 2);
      const between = gcTotals(out.slice(from, to));
      // 20,000 arrays of 20 small integers: at least 4 bytes an element, at most 8 and headers.
      expect(between.allocatedBytes).toBeGreaterThanOrEqual(20_000 * 20 * 4);
      expect(between.allocatedBytes).toBeLessThan(20_000 * 20 * 8 * 1.5);
      expect(between.markCompacts).toBe(1); // the second mark's own
    } finally {
      child.kill();
    }
  }, 30_000);

  it("skips every other line, and counts each field of each collection once", () => {
    const text = [
      "fleet worker ready: w-1, metrics on port 9000",
      "[1:0x1]      129 ms: pause=3.4 mutator=113.7 gc=s reduce_memory=0 scavenge=1.94 allocated=4000 promoted=100 new_space_survived=300 nodes_promoted=2",
      "[1:0x1]      300 ms: pause=5.5 mutator=10.0 gc=mc reduce_memory=0 allocated=50 promoted=7000 new_space_survived=0",
      '{"level":40,"msg":"gc=s allocated=99"}',
    ].join("\n");
    expect(gcTotals(text)).toEqual({
      scavenges: 1,
      markCompacts: 1,
      allocatedBytes: 4050,
      survivedBytes: 300,
      promotedBytes: 7100,
      pauseMs: 8.9,
    });
    expect(gcLine(gcTotals(text), 2)).toBe(
      "1 scavenges, 1 mark-compacts; allocated 0.0 MB (2.0 KB a session), scavenges copied 0.0 MB and promoted 0.0 MB (3.6 KB a session); pauses 0.01 s",
    );
  });
});
