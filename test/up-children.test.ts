/**
 * `fleet up --tools FILE --extensions FILE` gives both to every worker it starts, and only to
 * workers (contracts §8: "`fleet up` passes it on"), as absolute paths, so a child started from
 * any directory loads the files the operator named. Before this test nothing noticed if up
 * stopped passing `--extensions` on: test/fleet-up.test.ts starts up with `--tools` alone.
 */
import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { upChildren } from "../src/commands/up.js";

describe("fleet up's children", () => {
  it("every worker gets each --tools and --extensions file, in order; the API and the sweeper get none", () => {
    const children = upChildren(
      { workers: 2, tools: ["tools.ts"], extensions: ["audit.ts", "/srv/more.mjs"] },
      9100,
    );
    expect(children.map((child) => [child.name, child.role, child.args])).toEqual([
      ["api", "api", []],
      ["sweeper", "sweeper", ["--metrics-port", "9102"]],
      ...[0, 1].map((i) => [
        `worker ${i}`,
        "worker",
        [
          "--tools",
          resolve("tools.ts"),
          "--extensions",
          resolve("audit.ts"),
          "--extensions",
          "/srv/more.mjs",
          "--metrics-port",
          String(9100 + i),
        ],
      ]),
    ]);
  });
});

describe("fleet up --metrics-port-base 0", () => {
  it("means free ports for every child, as METRICS_PORT=0 does, not ports 1, 2, ...", () => {
    const children = upChildren({ workers: 2 }, 0);
    expect(children.map((child) => [child.name, child.args])).toEqual([
      ["api", []],
      ["sweeper", ["--metrics-port", "0"]],
      ["worker 0", ["--metrics-port", "0"]],
      ["worker 1", ["--metrics-port", "0"]],
    ]);
  });
});
