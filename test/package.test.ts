/**
 * The package as a user gets it: `npm pack` (whose prepack runs `npm run build`) in a copy of
 * this checkout, the tarball installed into an empty project, and its `fleet` run (with npx,
 * and through node_modules/.bin where npx is not the point). The installed `fleet` runs the
 * compiled dist/ with the production dependencies only (no TypeScript sources, no tsx), and
 * finds the migrations that ship beside it.
 *
 * The copy keeps the build out of this working tree (where a dist/ would be one more thing
 * to keep current); it shares node_modules through a symbolic link. When this checkout's
 * dist/ is a complete build newer than every input of the build (CI builds just before the
 * tests), the copy takes it and packs with `--ignore-scripts`: the same files prepack would
 * have built, without a second build (15 s of the file's 50 s). Otherwise — no build, or a
 * source edited since — the copy builds as a user's `npm pack` does. The install fetches the
 * dependencies from the npm registry (or npm's cache): ~30–90 s in all.
 */
import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signWebhook } from "../src/shared/webhook-signature.js";
import { ROOT } from "./support/fleet-env.js";
import { copyCheckout, run } from "./support/packed-package.js";

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
describe("the npm package", () => {
  let dir: string;
  let project: string;
  let packed: { filename: string; files: { path: string }[] };
  const seconds: Record<string, number> = {};

  const timed = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
    const started = Date.now();
    try {
      return await work();
    } finally {
      seconds[name] = (Date.now() - started) / 1000;
    }
  };
  /** `npx fleet ARGS` in the project, as a user runs it. */
  const npxFleet = (args: string[], env: Record<string, string> = {}) =>
    run("npx", ["--no", "--", "fleet", ...args], project, env, 30_000);
  /**
   * The same command through the project's node_modules/.bin/fleet, the link npx runs (the
   * `--help` case and the demo check that npx finds it): npx itself costs ~0.6 s of CPU a start,
   * more than the `fleet` it starts (0.17 s for `--version`).
   */
  const fleet = (args: string[], env: Record<string, string> = {}) =>
    run(join(project, "node_modules/.bin/fleet"), args, project, env, 30_000);

  /**
   * Type-checks the project's `files` under each of `variants` (module settings; strict, ES2022,
   * @types/node): one tsconfig each, checked by one `tsc --build` of them all (exit 0: no error
   * in any). One process rather than one tsc a variant: --build parses @types/node and the
   * package's declarations once for every variant, where each tsc parsed them again (5 tsc
   * runs: 41 s of CPU, against 27 s for the two --build runs, measured with /usr/bin/time).
   * --verbose names each variant's tsconfig before its errors.
   */
  const typeCheck = async (
    name: string,
    skipLibCheck: boolean,
    variants: {
      files: string[];
      module: string;
      moduleResolution: string;
      esModuleInterop?: boolean;
      /** Other compiler options (`tsc --init`'s). */
      [option: string]: unknown;
    }[],
    timeoutMs = 60_000,
  ) => {
    const configs = await Promise.all(
      variants.map(async ({ files, ...options }) => {
        const config = `tsconfig.${name}.${options.moduleResolution}.json`;
        const compilerOptions = {
          noEmit: true,
          strict: true,
          skipLibCheck,
          target: "es2022",
          typeRoots: [join(ROOT, "node_modules/@types")],
          types: ["node"],
          ...options,
        };
        await writeFile(join(project, config), JSON.stringify({ compilerOptions, files }));
        return config;
      }),
    );
    const tsc = join(ROOT, "node_modules/typescript/bin/tsc");
    return run(process.execPath, [tsc, "--build", "--verbose", ...configs], project, {}, timeoutMs);
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "fleet-package-"));
    const { checkout, reuse } = await copyCheckout(dir);
    const pack = await timed(reuse ? "npm pack (of the fresh dist/)" : "npm pack (with the build)", () =>
      run(
        "npm",
        ["pack", "--json", "--pack-destination", dir, ...(reuse ? ["--ignore-scripts"] : [])],
        checkout,
        {},
        120_000,
      ),
    );
    expect(pack.code, pack.stderr).toBe(0);
    packed = (JSON.parse(pack.stdout) as (typeof packed)[])[0]!;

    project = join(dir, "project");
    await mkdir(project);
    await writeFile(
      join(project, "package.json"),
      JSON.stringify({ name: "fleet-package-test", version: "0.0.0", private: true, type: "module" }),
    );
    const install = await timed("npm install of the tarball", () =>
      run(
        "npm",
        ["install", "--no-audit", "--no-fund", "--prefer-offline", join(dir, packed.filename)],
        project,
        {},
        150_000,
      ),
    );
    expect(install.code, install.stderr).toBe(0);
  }, 240_000);

  afterAll(async () => {
    console.log(
      `package test: ${Object.entries(seconds)
        .map(([k, v]) => `${k} ${v.toFixed(1)} s`)
        .join(", ")}`,
    );
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("ships the compiled code, the CLI, the migrations, the postinstall script, deploy/ and docs/, and no sources", () => {
    const files = packed.files.map((f) => f.path);
    for (const needed of [
      "package.json",
      "bin/fleet.js",
      "dist/src/cli.js",
      "dist/src/index.js",
      "dist/src/index.d.ts",
      "drizzle/meta/_journal.json",
      "scripts/patch-postgres.mjs",
      "dist/console/index.html",
      "esm-only.cjs",
      "dist/cjs/package.json",
      "dist/cjs/producer/client.js",
      "dist/cjs/producer/client.d.ts",
      // The README's dashboard and Prometheus files, for a fleet of the installed package.
      "deploy/grafana/dashboards/agent-fleet.json",
      "deploy/prometheus/prometheus.yml",
      "deploy/prometheus/fleet-up.yml",
      "deploy/prometheus/rules/alerts.yml",
      "deploy/prometheus/rules/recording.yml",
      // What the README links and `fleet … --help` cites (test/package-docs.test.ts).
      "docs/contracts.md",
    ])
      expect(files, needed).toContain(needed);
    expect(files.filter((f) => f.endsWith(".sql")).length).toBeGreaterThan(0);
    expect(files.filter((f) => /^(src|test|bench|console)\//.test(f))).toEqual([]);
    expect(files.filter((f) => /^dist\/console\/assets\/.*\.js$/.test(f)).length).toBeGreaterThan(0);
  });

  it("ships source maps that carry their sources: the package has no src/ for them to point to", async () => {
    const installed = join(project, "node_modules/agent-fleet");
    const maps = packed.files.map((f) => f.path).filter((f) => f.endsWith(".js.map"));
    expect(maps).toContain("dist/src/cli.js.map");
    const missing: string[] = [];
    for (const map of maps) {
      const { sources, sourcesContent } = JSON.parse(await readFile(join(installed, map), "utf8")) as {
        sources: string[];
        sourcesContent?: (string | null)[];
      };
      for (const [i, source] of sources.entries()) {
        if (typeof sourcesContent?.[i] === "string") continue;
        // Without its text in the map, the source must be a file of the package.
        const shipped = await stat(join(installed, dirname(map), source)).catch(() => null);
        if (!shipped) missing.push(`${map}: ${source}`);
      }
    }
    // With `node --enable-source-maps` (or a debugger) a stack frame named src/….ts, a file no
    // installed package holds.
    expect(missing.slice(0, 5), `${missing.length} sources missing`).toEqual([]);
  });

  it("installs with the production dependencies only: no tsx", async () => {
    const installed = await readdir(join(project, "node_modules"));
    expect(installed).toContain("agent-fleet");
    expect(installed).toContain("commander");
    // The compiled CLI runs without it (a dev dependency that runs the sources of a checkout).
    expect(installed).not.toContain("tsx");
  });

  it("`npx fleet --help` lists the commands and exits 0", async () => {
    const help = await timed("npx fleet --help", () => npxFleet(["--help"]));
    expect(help.code, help.stderr).toBe(0);
    expect(help.stderr).toBe("");
    expect(help.stdout).toMatch(/^usage: fleet <command>/);
    for (const command of [
      "resume-point",
      "migrate",
      "api",
      "worker",
      "sweeper",
      "up",
      "keys",
      "batch",
      "session",
      "watch",
      "demo",
    ])
      expect(help.stdout).toMatch(new RegExp(`^ {2}fleet ${command}\\b`, "m"));
    // The README's commands for deleting data, each with its --help.
    for (const command of [
      ["session", "delete"],
      ["batch", "delete"],
      ["batch", "resume"],
    ]) {
      const sub = await fleet([...command, "--help"]);
      expect(sub.code, sub.stderr).toBe(0);
      expect(sub.stdout).toMatch(new RegExp(`^Usage: fleet ${command.join(" ")} `));
    }
    const version = await fleet(["--version"]);
    expect(version.stdout.trim()).toBe("0.1.0");
  });

  it("`fleet` applies the postgres.js patches at start when npm did not run the postinstall (npm 11 asks first)", async () => {
    type Patch = { files: string[]; mark: string; edits: [string, string][] };
    const { patches } = (await import(join(ROOT, "scripts/patch-postgres.mjs"))) as { patches: Patch[] };
    const installed = join(project, "node_modules/postgres");
    // postgres.js as a fresh install leaves it without the approval: whatever npm applied, undone.
    for (const patch of patches)
      for (const file of patch.files) {
        let text = await readFile(join(installed, file), "utf8");
        for (const [original, replacement] of patch.edits) text = text.replace(replacement, () => original);
        expect(text, file).not.toContain(patch.mark);
        await writeFile(join(installed, file), text);
      }
    const help = await fleet(["--help"]);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stderr).toBe("");
    for (const patch of patches)
      for (const file of patch.files)
        expect(await readFile(join(installed, file), "utf8"), file).toContain(patch.mark);
  });

  it("the installed `fleet resume-point --file` classifies a history: exit 0 resumable, 3 not, 2 invalid", async () => {
    const crash = join(ROOT, "test/fixtures/crash-history.json");
    const completed = join(dir, "completed.json");
    await writeFile(
      completed,
      JSON.stringify([
        { role: "user", content: "hi" },
        { role: "assistant", content: "hello", stopReason: "end_turn" },
      ]),
    );
    const invalid = join(dir, "invalid.json");
    await writeFile(invalid, JSON.stringify([{ role: "assistant", content: "no stop reason" }]));
    const [resumable, done, bad] = await Promise.all([
      timed("fleet resume-point", () => fleet(["resume-point", "--file", crash])),
      fleet(["resume-point", "--file", completed]),
      fleet(["resume-point", "--file", invalid]),
    ]);
    expect(resumable.code, resumable.stderr).toBe(0);
    expect(JSON.parse(resumable.stdout)).toMatchObject({
      resumable: true,
      kind: "recover_tools",
      unansweredToolCalls: [{ id: "b", name: "write_file", arguments: { path: "b.txt", content: "b" } }],
    });
    expect(done.code).toBe(3);
    expect(JSON.parse(done.stdout)).toEqual({ resumable: false, reason: "completed" });
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split("\n")).toHaveLength(1);
    expect(bad.stderr).toContain("messages[0].stopReason");
  });

  it("the installed `fleet migrate` finds the migrations of the installed package", async () => {
    const name = `fleet_t_package_${randomUUID().slice(0, 8)}`;
    const url = new URL(ADMIN_URL);
    url.pathname = `/${name}`;
    const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
    try {
      const migrate = await fleet(["migrate"], { DATABASE_URL: url.toString() });
      expect(migrate.code, migrate.stderr).toBe(0);
      expect(migrate.stdout).toContain("migrations applied");
      const db = postgres(url.toString(), { max: 1, onnotice: () => {} });
      try {
        const tables = await db<{ table_name: string }[]>`
          select table_name from information_schema.tables where table_schema = 'public'`;
        expect(tables.map((t) => t.table_name)).toEqual(
          expect.arrayContaining(["sessions", "messages", "runs"]),
        );
      } finally {
        await db.end();
      }
    } finally {
      await admin.unsafe(`drop database if exists "${name}" with (force)`);
      await admin.end();
    }
  });

  it("`npx fleet demo` runs a real fleet of the installed package: API, sweeper, workers it spawns, a kill", async () => {
    // The one check that the installed package's roles start as processes of their own and
    // talk to each other (the client tests below use a stand-in API).
    const name = `fleet_t_package_${randomUUID().slice(0, 8)}`;
    const url = new URL(ADMIN_URL);
    url.pathname = `/${name}`;
    const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
    try {
      const demo = await timed("npx fleet demo", () =>
        run(
          "npx",
          ["--no", "--", "fleet", "demo", "--sessions", "4", "--workers", "2"],
          project,
          { DATABASE_URL: url.toString(), FLEET_PREFIX: `fleet-t-package-${randomUUID().slice(0, 8)}` },
          150_000,
        ),
      );
      console.log(demo.stdout);
      expect(demo.code, demo.stdout + demo.stderr).toBe(0);
      expect(demo.stdout).toMatch(/^sessions +4 \(4 completed, 0 parked\)$/m);
      expect(demo.stdout).toMatch(/answered twice: 0\)$/m);
      expect(demo.stdout).toContain(`files written under ${join(project, "fleet-files", "demo")}`);
    } finally {
      await admin.unsafe(`drop database if exists "${name}_demo" with (force)`);
      await admin.end();
    }
  }, 180_000);

  it("exports the library API from the compiled code", async () => {
    const imported = await run(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        "const m = await import('agent-fleet'); console.log(typeof m.resumePoint, typeof m.FleetClient);",
      ],
      project,
    );
    expect(imported.code, imported.stderr).toBe(0);
    expect(imported.stdout.trim()).toBe("function function");
  });

  it("its types resolve for a TypeScript consumer (node16 and bundler), naming every answer of the client", async () => {
    await writeFile(
      join(project, "consumer.mts"),
      `import {
  FleetApiError,
  FleetClient,
  type BatchCreated,
  type BatchJson,
  type BatchResult,
  type BatchSessionInput,
  type PostOptions,
  type RunJson,
  type RunWithSession,
  type SessionJson,
  type SessionSummary,
  type UsageTotals,
  verifyWebhookSignature,
} from "agent-fleet";
const fleet = new FleetClient({ baseUrl: "http://127.0.0.1:3000" });
export const signed: boolean = verifyWebhookSignature("whsec", "{}", "t=1,v1=00");
const item: BatchSessionInput = { agent: { model: { provider: "openai", model: "gpt-4o-mini" } }, input: "hi" };
const options: PostOptions = { idempotencyKey: "k" };
export async function main(): Promise<void> {
  const created: BatchCreated = await fleet.createBatch([item], options);
  const batch: BatchJson = await fleet.getBatch(created.id);
  for await (const result of fleet.batchResults(batch.id)) {
    const line: BatchResult = result;
    const usage: UsageTotals = line.usage;
    console.log(line.status, usage.costUsd);
  }
  const page = await fleet.listSessions({ status: "parked" });
  const first: SessionSummary | undefined = page.sessions[0];
  const session: SessionJson = await fleet.getSession(first?.id ?? "");
  const run: RunJson | undefined = session.runs[0];
  const ended: RunWithSession = await fleet.waitForRun(run?.id ?? "");
  console.log(ended.endedReason);
  await fleet.resume(session.id).catch((error: unknown) => {
    if (error instanceof FleetApiError) console.log(error.status, error.code, error.reason);
  });
}
`,
    );
    const checked = await typeCheck("consumer", true, [
      { files: ["consumer.mts"], module: "node16", moduleResolution: "node16" },
      { files: ["consumer.mts"], module: "esnext", moduleResolution: "bundler" },
    ]);
    expect(checked.code, `${checked.stdout}${checked.stderr}`).toBe(0);
  }, 60_000);

  it("the README's client example compiles as written in a project of `tsc --init`, and options take undefined", async () => {
    // TypeScript 5.9's `tsc --init` turns on exactOptionalPropertyTypes: an option typed
    // `apiKey?: string` then refuses `process.env.FLEET_API_KEY` (string | undefined), so the
    // README's first client example did not compile in such a project (TS2379).
    const readme = await readFile(join(ROOT, "README.md"), "utf8");
    const example = /```ts\n(import \{ FleetClient \} from "agent-fleet";\n[\s\S]*?)```/.exec(readme)?.[1];
    expect(example).toContain("apiKey: process.env.FLEET_API_KEY");
    await writeFile(join(project, "readme-client.mts"), example!);
    // Every option of the client given a value that may be undefined (an unset variable).
    await writeFile(
      join(project, "optional-options.mts"),
      `import { FleetClient, type BatchSessionInput } from "agent-fleet";
declare const s: string | undefined;
declare const n: number | undefined;
declare const b: boolean | undefined;
declare const signal: AbortSignal | undefined;
const fleet = new FleetClient({ baseUrl: "http://127.0.0.1:3000", apiKey: s, maxLimitWaitMs: n });
const agent = { model: { provider: "openai" as const, model: "gpt-4o-mini" }, system: s, maxTurns: n };
const { id } = await fleet.createSession({ agent, metadata: undefined, sessionEvents: b }, { idempotencyKey: s });
const item: BatchSessionInput = { agent, input: s, customId: s, sessionEvents: b, metadata: undefined };
await fleet.createBatch([item], { idempotencyKey: s, open: b, sessionEvents: b, webhook: undefined });
await fleet.appendToBatch(id, [item], { close: b, idempotencyKey: s });
await fleet.getBatch(id, { include: undefined });
await fleet.resumeBatch(id, { parkedReason: s, cursor: s, limit: n, model: undefined });
await fleet.listSessions({ status: undefined, batch: s, parkedReason: s, limit: n, before: s });
await fleet.send(id, "x", { idempotencyKey: s, goal: undefined });
await fleet.resume(id, { idempotencyKey: s, model: undefined });
await fleet.getSession(id, { afterSeq: n, limit: n, runsLimit: n, runsBefore: s, signal });
for await (const m of fleet.messages(id, { afterSeq: n, pageSize: n, signal })) console.log(m.seq);
for await (const e of fleet.events(id, { after: s, signal, maxReconnectDelayMs: n, failIfUnreachable: b, onRetry: undefined }))
  console.log(e.type);
for await (const r of fleet.batchResults(id, { signal })) console.log(r.status);
await fleet.getRun(id, { signal });
await fleet.waitForRun(id, { timeoutMs: n, intervalMs: n, signal });
await fleet.deleteSession(id, { idempotencyKey: s });
`,
    );
    // What `tsc --init` of TypeScript 5.9 writes (less the output options).
    const checked = await typeCheck("init", true, [
      {
        files: ["readme-client.mts", "optional-options.mts"],
        module: "nodenext",
        moduleResolution: "nodenext",
        target: "esnext",
        noUncheckedIndexedAccess: true,
        exactOptionalPropertyTypes: true,
        verbatimModuleSyntax: true,
        isolatedModules: true,
        noUncheckedSideEffectImports: true,
        moduleDetection: "force",
      },
    ]);
    expect(checked.code, `${checked.stdout}${checked.stderr}`).toBe(0);
  }, 60_000);

  it("`agent-fleet/client` is required from CommonJS and imported from ESM, and talks to an API", async () => {
    // A stand-in API: one session, 404 for anything else (as the real one answers).
    const script = (load: string) => `${load}
const { createServer } = require("node:http");
const server = createServer((req, res) => {
  res.setHeader("content-type", "application/json");
  if (req.url === "/v1/sessions/s1") {
    res.end(JSON.stringify({ id: "s1", status: "completed", messages: [], runs: [] }));
  } else {
    res.statusCode = 404;
    res.end(JSON.stringify({ error: { code: "not_found", message: "session nope not found" } }));
  }
});
server.listen(0, "127.0.0.1", async () => {
  const fleet = new FleetClient({ baseUrl: "http://127.0.0.1:" + server.address().port });
  const session = await fleet.getSession("s1");
  const error = await fleet.getSession("nope").catch((e) => e);
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  // Nothing listens there any more: a FleetNetworkError of this build.
  const down = await fleet.getSession("s1").catch((e) => e);
  console.log(JSON.stringify({ status: session.status, api: error instanceof FleetApiError, code: error.code,
    network: down instanceof FleetNetworkError }));
});
`;
    await writeFile(
      join(project, "client.cjs"),
      script(`const { FleetClient, FleetApiError, FleetNetworkError } = require("agent-fleet/client");`),
    );
    await writeFile(
      join(project, "client.mjs"),
      script(`import { createRequire } from "node:module";
import { FleetClient, FleetApiError, FleetNetworkError } from "agent-fleet/client";
const require = createRequire(import.meta.url);`),
    );
    for (const file of ["client.cjs", "client.mjs"]) {
      const ran = await run(process.execPath, [file], project);
      expect(ran.code, `${file}: ${ran.stderr}`).toBe(0);
      expect(JSON.parse(ran.stdout), file).toEqual({
        status: "completed",
        api: true,
        code: "not_found",
        network: true,
      });
    }
    // The package's root stays an ES module only.
    // Required from CommonJS, it says so and names what works (not Node's "No exports main").
    const root = await run(process.execPath, ["-e", "require('agent-fleet')"], project);
    expect(root.code).not.toBe(0);
    expect(root.stderr).toContain("agent-fleet is an ES module");
    expect(root.stderr).toContain('require("agent-fleet/client")');
  });

  it("a webhook receiver checks `Fleet-Signature` with the package's verifyWebhookSignature: root, client, CommonJS", async () => {
    // Headers as the sweeper signs deliveries (contracts §9), one of them during a rotation.
    const body = JSON.stringify({ id: "b1", status: "ended" });
    const now = Math.floor(Date.now() / 1000);
    const cases = {
      signed: signWebhook("whsec-new", body, now),
      rotating: signWebhook(["whsec-new", "whsec-old"], body, now),
      stale: signWebhook("whsec-new", body, now - 3600),
    };
    const check = `const { signed, rotating, stale } = JSON.parse(process.env.CASES);
const body = ${JSON.stringify(body)};
console.log(JSON.stringify([
  verifyWebhookSignature("whsec-new", body, signed),
  verifyWebhookSignature("whsec-new", body + " ", signed),
  verifyWebhookSignature("whsec-other", body, signed),
  verifyWebhookSignature("whsec-old", body, rotating),
  verifyWebhookSignature("whsec-new", body, stale),
  verifyWebhookSignature("", body, signed),
]));
`;
    await writeFile(
      join(project, "verify-root.mjs"),
      `import { verifyWebhookSignature } from "agent-fleet";\n${check}`,
    );
    await writeFile(
      join(project, "verify-client.mjs"),
      `import { verifyWebhookSignature } from "agent-fleet/client";\n${check}`,
    );
    await writeFile(
      join(project, "verify-client.cjs"),
      `const { verifyWebhookSignature } = require("agent-fleet/client");\n${check}`,
    );
    for (const file of ["verify-root.mjs", "verify-client.mjs", "verify-client.cjs"]) {
      const ran = await run(process.execPath, [file], project, { CASES: JSON.stringify(cases) });
      expect(ran.code, `${file}: ${ran.stderr}`).toBe(0);
      expect(JSON.parse(ran.stdout), file).toEqual([true, false, false, true, false, false]);
    }
  });

  it("`agent-fleet/client` types check with skipLibCheck off: CommonJS and ESM, nodenext, bundler, node10", async () => {
    const consumer = (importLine: string) => `${importLine}
const fleet = new FleetClient({ baseUrl: "http://127.0.0.1:3000", apiKey: "k" });
export async function main(): Promise<void> {
  const session: SessionJson = await fleet.getSession("s", { limit: 10, runsLimit: 0 });
  const status: SessionStatus = session.status;
  for await (const m of fleet.messages(session.id, { pageSize: 100 })) console.log(m.seq, m.role);
  for await (const r of fleet.batchResults("b")) {
    const line: BatchResult = r;
    const usage: UsageTotals = line.usage;
    console.log(usage.unknownSteps, status);
  }
  const run: RunJson | undefined = session.runs[0];
  const batch: BatchJson = await fleet.getBatch("b");
  const summary: SessionSummary | undefined = (await fleet.listSessions({ batch: batch.id })).sessions[0];
  const deleted = await fleet.deleteSession(summary?.id ?? run?.id ?? "", { idempotencyKey: "k" });
  console.log(deleted.deleted, (await fleet.deleteBatch(batch.id)).sessionsDeleted);
  await fleet.resume(session.id).catch((error: unknown) => {
    if (error instanceof FleetApiError) console.log(error.status, error.reason);
  });
  for await (const event of fleet.events(session.id)) {
    if (isEventType(event, "MESSAGE")) console.log(event.data.message.role satisfies "user" | "assistant" | "tool" | "internal");
    if (event.type === "RUN_COMPLETED") break;
  }
  const ended = await fleet.waitForRun(run?.id ?? "").catch((error: unknown) => {
    if (error instanceof FleetNetworkError) console.log(error.code, error.url);
    return undefined;
  });
  // @ts-expect-error a run's status is queued, running or ended ("completed" is an endedReason)
  if (ended?.status === "completed") console.log(ended.endedReason);
  // A webhook receiver's check (contracts §9), from the package it has installed.
  const signed: boolean = verifyWebhookSignature(process.env.FLEET_WEBHOOK_SECRET ?? "", "{}", "t=1,v1=00", 300);
  console.log(signed);
}
`;
    const names = `FleetApiError, FleetClient, FleetNetworkError, isEventType, type BatchJson, type BatchResult, type RunJson,
  type SessionJson, type SessionStatus, type SessionSummary, type UsageTotals, verifyWebhookSignature`;
    await writeFile(join(project, "typed.cts"), consumer(`import { ${names} } from "agent-fleet/client";`));
    await writeFile(join(project, "typed.mts"), consumer(`import { ${names} } from "agent-fleet/client";`));
    await writeFile(join(project, "typed.ts"), consumer(`import { ${names} } from "agent-fleet/client";`));
    // Each checks @types/node whole (skipLibCheck off), which is slow.
    const checked = await typeCheck(
      "typed",
      false,
      [
        { files: ["typed.cts", "typed.mts"], module: "nodenext", moduleResolution: "nodenext" },
        { files: ["typed.ts"], module: "esnext", moduleResolution: "bundler" },
        // A CommonJS project of `tsc --init` before node16 (zod's declarations need the interop).
        { files: ["typed.ts"], module: "commonjs", moduleResolution: "node10", esModuleInterop: true },
      ],
      280_000,
    );
    expect(checked.code, `${checked.stdout}${checked.stderr}`).toBe(0);
  }, 300_000);
});
