/**
 * The postinstall patches (scripts/patch-postgres.mjs) are in the installed postgres.js, and
 * each buys what it is for:
 * - the closed-socket guard: without it, a write to a connection that had just closed threw
 *   outside any query and crashed the process (test/connection-loss.test.ts shows the
 *   behaviour it buys);
 * - failing what was queued after the error: test/postgres-reconnect.test.ts shows what it buys;
 * - forgetting the statement in flight when a connection closes (so that `end()` ends):
 *   test/postgres-reconnect.test.ts shows what it buys;
 * - failing the statements waiting for a connection when one is taken for lost after a silence
 *   (a blackhole): test/postgres-reconnect.test.ts shows what it buys;
 * - settling without closures: a promise that holds a closure over its own resolving
 *   functions (what a postgres.js Query did) keeps what it resolved to alive through V8's
 *   young-generation collections, so every query's rows were promoted to the old generation.
 *   Measured here in child processes with `--trace-gc-nvp` (bytes promoted by scavenges);
 * - sending a statement's message as built: a big parameter (a 16 MiB import) was copied into
 *   two more buffers of its size on its way to the socket (Buffer.concat, Buffer.from). Seen
 *   here by counting the big buffers made while such statements are sent.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const root = dirname(dirname(dirname(createRequire(import.meta.url).resolve("postgres"))));
const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
/** `${i}` in the child's tagged template: a parameter, as the fleet's queries have. */
const PARAMETER = ["$", "{i}"].join("");
const PATCHED = [
  "src/connection.js",
  "cjs/src/connection.js",
  "src/query.js",
  "cjs/src/query.js",
  "src/index.js",
  "cjs/src/index.js",
];
const WAITING_MARK = /agent-fleet: fail the statements waiting for a connection after a silence/g;

/** MB promoted by scavenges while `script` (an ES module) runs in a child node. */
function promotedMb(script: string): number {
  const out = execFileSync(process.execPath, ["--trace-gc-nvp", "--input-type=module", "-e", script], {
    cwd: resolve(import.meta.dirname, ".."),
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  let promoted = 0;
  for (const line of out.split("\n")) {
    if (!line.includes("gc=s ")) continue;
    promoted += Number(/ promoted=(\d+)/.exec(line)?.[1] ?? 0);
  }
  return promoted / 1e6;
}

// A promise subclass settled by a closure kept on it (postgres.js 3.4's Query), or by its
// resolving function kept as it is and a method (the patched Query); 8,000 promises, each
// resolved on a later turn with 50 rows, as a query is.
const settling = (style: "closure" | "method") => `
  const make = () => Array.from({ length: 50 }, (_, i) => ({ id: "s-" + i + Math.random(), at: new Date(), text: "x".repeat(20) + i }));
  class Closure extends Promise {
    constructor() { let resolve; super((a) => { resolve = a; }); this.resolve = (x) => (this.active = false, resolve(x)); }
    static get [Symbol.species]() { return Promise; }
  }
  class Method extends Promise {
    constructor() { let resolve; super((a) => { resolve = a; }); this.settle = resolve; }
    resolve(x) { this.active = false; this.settle(x); }
    static get [Symbol.species]() { return Promise; }
  }
  const Query = ${style === "closure" ? "Closure" : "Method"};
  for (let i = 0; i < 8000; i++) { const q = new Query(); setImmediate(() => q.resolve(make())); await q; }`;

/**
 * Inserts a 4 MiB text three ways (a fresh statement, the same one prepared, one with
 * `prepare: false`) while counting the buffers of 1 MiB or more Buffer.concat and Buffer.from
 * make; reads them back, then reads through a cursor. Prints the sizes, what was stored and
 * the rows the cursor gave.
 */
const BIG_PARAMETER = `
  import postgres from "postgres";
  const sql = postgres(${JSON.stringify(ADMIN_URL)}, { max: 1, fetch_types: false, onnotice: () => {} });
  const copies = [];
  const counted = (make) => function (...args) {
    const made = make.apply(this, args);
    if (made.length >= 1 << 20) copies.push(made.length);
    return made;
  };
  const { concat, from } = Buffer;
  await sql\`create temporary table big (id int, body text)\`;
  const big = (tag) => tag + "x".repeat((4 << 20) - 1);
  Buffer.concat = counted(concat);
  Buffer.from = counted(from);
  await sql\`insert into big values (1, \${big("a")})\`;
  await sql\`insert into big values (2, \${big("b")})\`;
  await sql.unsafe("insert into big values (3, $1)", [big("c")], { prepare: false });
  Buffer.concat = concat;
  Buffer.from = from;
  const rows = await sql\`select length(body) || ' ' || left(body, 1) as stored from big order by id\`;
  let cursor = 0;
  for await (const batch of sql\`select g from generate_series(1, 10) g\`.cursor(3)) cursor += batch.length;
  await sql.end();
  console.log(JSON.stringify({ copies, stored: rows.map((r) => r.stored), cursor }));`;

describe("postgres.js patches", () => {
  it("are applied to both builds of the installed postgres.js, once, and re-running them changes nothing", () => {
    const before = PATCHED.map((f) => readFileSync(join(root, f), "utf8"));
    for (const text of before.slice(0, 2)) {
      expect(text.match(/agent-fleet: guard against a closed socket/g)).toHaveLength(1);
      expect(text).toMatch(/function nextWrite\(fn\) \{\n {4}if \(!socket\) \{/);
      expect(text.match(/agent-fleet: fail what was queued after the error too/g)).toHaveLength(1);
      expect(text).not.toContain("!hadError && (query || sent.length)");
      expect(text.match(WAITING_MARK)).toHaveLength(1);
      expect(text).toMatch(
        /query = null \/\/ agent-fleet: nothing is in flight on a closed connection\n {4}ended && terminate\(\)\n {4}closedTime/,
      );
      expect(text.match(/agent-fleet: a statement's message is sent as built/g)).toHaveLength(1);
      expect(text.match(/agent-fleet: a clean close during start-up fails its statements/g)).toHaveLength(1);
      expect(
        text.match(/nextWriteTimer = chunk = null \/\/ agent-fleet: a closed connection forgets/g),
      ).toHaveLength(1);
      expect(text).toMatch(/if \(initial && !hadError && !terminated\) \{ \/\/ agent-fleet/);
      expect(text).not.toContain(": Buffer.from(x)");
    }
    for (const text of before.slice(4)) {
      expect(text.match(WAITING_MARK)).toHaveLength(1);
      expect(text).toMatch(
        /while \(queries\.length\)\n {8}queries\.shift\(\)\.reject\(lost\)\n {4}\}\n {4}queries\.length && connect/,
      );
    }
    for (const text of before.slice(2, 4)) {
      expect(text.match(/agent-fleet: settle without closures/g)).toHaveLength(1);
      expect(text).not.toContain("this.resolve = x =>");
      expect(text).toMatch(/\n {2}resolve\(x\) \{\n {4}this\.active = false\n {4}this\[settle\]\[0\]\(x\)/);
    }
    execFileSync(process.execPath, [resolve(import.meta.dirname, "../scripts/patch-postgres.mjs")]);
    expect(PATCHED.map((f) => readFileSync(join(root, f), "utf8"))).toEqual(before);
  });

  it("a promise settled by a closure kept on it is promoted with its value; one settled by a method is not", () => {
    const closure = promotedMb(settling("closure"));
    const method = promotedMb(settling("method"));
    // Seen: about 31 MB against 3.5 MB.
    expect(closure).toBeGreaterThan(15);
    expect(method).toBeLessThan(8);
  }, 60_000);

  it("sends a big parameter without copying it: no buffer of its size made on its way, and it arrives whole", () => {
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", BIG_PARAMETER], {
      cwd: resolve(import.meta.dirname, ".."),
      encoding: "utf8",
    });
    const result = JSON.parse(out) as { copies: number[]; stored: string[]; cursor: number };
    // Unpatched: two copies of 4 MiB for each statement (Buffer.concat, then Buffer.from).
    expect(result.copies).toEqual([]);
    // The fresh statement (Parse and Describe first), the prepared one, and one not prepared.
    expect(result.stored).toEqual(["4194304 a", "4194304 b", "4194304 c"]);
    // A cursor's Execute (not the one appended to the Bind) still works.
    expect(result.cursor).toBe(10);
  }, 60_000);

  it("lets each query's rows die young: 3,000 queries of 50 rows promote a few MB, not tens", () => {
    const mb = promotedMb(`
      import postgres from "postgres";
      const sql = postgres(${JSON.stringify(ADMIN_URL)}, { max: 1, fetch_types: false, onnotice: () => {} });
      for (let i = 0; i < 3000; i++) {
        await sql\`select g as id, md5(g::text) as text, now() as at, ${PARAMETER}::int as round from generate_series(1, 50) g\`;
      }
      await sql.end();`);
    // Seen: about 1 MB patched, 50–75 MB with postgres.js 3.4.9 as published.
    expect(mb).toBeLessThan(8);
  }, 60_000);
});
