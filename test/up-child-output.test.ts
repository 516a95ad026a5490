/**
 * How `fleet up` passes on a child's stdout (supervisor.ts `forwardLines`): whole lines, so
 * children never interleave mid-line. A user tool (`--tools`) that writes to stdout without a
 * newline (a progress bar redrawn with "\r", a dump of binary data) made the pending line
 * grow without end: `fleet up` held all of it in memory, scanned all of it again for every
 * chunk (quadratic), and passed none of it on.
 */
import { EventEmitter } from "node:events";
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { forwardLines, MAX_FORWARDED_LINE } from "../src/commands/supervisor.js";

function fakeChild() {
  const stdout = new PassThrough();
  const child = Object.assign(new EventEmitter(), { stdout });
  return { child: child as never, stdout };
}

const drained = () => new Promise((resolve) => setImmediate(resolve));

describe("fleet up's forwarding of a child's stdout", () => {
  it("passes whole lines on, and tells each to onLine", async () => {
    const { child, stdout } = fakeChild();
    const written: string[] = [];
    const lines: string[] = [];
    forwardLines(
      child,
      (line) => lines.push(line),
      (text) => written.push(text),
    );
    stdout.write("fleet worker ready: {}\nhal");
    stdout.write("f\n");
    await drained();
    expect(written.join("")).toBe("fleet worker ready: {}\nhalf\n");
    expect(lines).toEqual(["fleet worker ready: {}", "half"]);
  });

  it("passes on a line that never ends in pieces of at most MAX_FORWARDED_LINE, holding no more", async () => {
    const { child, stdout } = fakeChild();
    let written = 0;
    let longest = 0;
    forwardLines(
      child,
      () => {},
      (text) => {
        written += text.length;
        longest = Math.max(longest, text.length);
      },
    );
    const chunk = "\r42 %".repeat(13_000);
    for (let i = 0; i < 100; i++) stdout.write(chunk);
    await drained();
    const total = chunk.length * 100;
    // All of it but less than one piece has been passed on before any newline came.
    expect(written).toBeGreaterThan(total - MAX_FORWARDED_LINE);
    expect(longest).toBeLessThanOrEqual(MAX_FORWARDED_LINE + 1);
  });
});
