/**
 * How the `fleet` processes start and stop, through the real CLI: `--help` on every command
 * does nothing else; usage errors end in one line and exit 2; a role whose port is taken
 * exits 2 with one line instead of running half-started; a worker that loses Redis says so
 * once (not a stack trace per reconnect) and once when it is back.
 */
import { execFile, spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { restartDelay } from "../src/commands/supervisor.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, ROOT, waitFor } from "./support/fleet-env.js";

type Run = { code: number | null; stdout: string; stderr: string };

const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

function fleet(args: string[], env: Record<string, string> = {}, timeoutMs = 30_000): Promise<Run> {
  return new Promise((resolve) => {
    const childEnv = { ...process.env, ...env };
    delete childEnv.FLEET_DEBUG;
    execFile(
      process.execPath,
      [FLEET_BIN, ...args],
      { cwd: ROOT, env: childEnv, timeout: timeoutMs },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : null) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

const lines = (text: string) => text.split("\n").filter((l) => l.length > 0);

function expectOneLine(run: Run, pattern: RegExp): void {
  expect(run.code, run.stdout + run.stderr).toBe(2);
  expect(run.stdout).toBe("");
  expect(lines(run.stderr), run.stderr).toHaveLength(1);
  expect(run.stderr.trim()).toMatch(pattern);
  expect(run.stderr).not.toMatch(/^\s+at /m);
}

/** Holds a port the way another program would. */
async function holdPort(host: string): Promise<{ port: number; server: Server }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, host, () => resolve()));
  const address = server.address();
  return { port: typeof address === "object" && address ? address.port : 0, server };
}

describe("--help and usage errors", () => {
  // A database nobody created and a Redis nobody listens on: a command that did anything
  // besides printing help would fail, or leave the database behind.
  const name = `fleet_t_help_${randomUUID().slice(0, 8)}`;
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  const env = { DATABASE_URL: url.toString(), REDIS_URL: "redis://127.0.0.1:1", PORT: "1" };

  /** The flags each command's help must list (every command the root help shows is checked). */
  const FLAGS: Record<string, string[]> = {
    "resume-point": ["--file", "SESSION_ID"],
    migrate: [],
    api: ["--port"],
    worker: ["--tools", "--extensions", "--metrics-port"],
    sweeper: ["--metrics-port"],
    up: ["--workers", "--tools", "--extensions", "--metrics-port-base"],
    watch: ["SESSION_ID", "--json", "--after", "--once", "--api"],
    keys: ["create", "list", "revoke"],
    "keys create": ["--tenant", "--admin"],
    "keys list": [],
    "keys revoke": ["KEY_ID"],
    demo: ["--sessions", "--workers", "--no-kill"],
    session: ["delete", "export", "import"],
    "session delete": ["ID", "--api"],
    "session export": ["ID", "--out", "--api"],
    "session import": ["FILE", "--metadata", "--idempotency-key", "--api"],
  };

  let root: Run;
  const helps: Record<string, Run> = {};
  beforeAll(async () => {
    const helpOf = async (commands: string[]) => {
      const runs = await Promise.all(commands.map((c) => fleet([...c.split(" "), "--help"], env)));
      for (const [i, c] of commands.entries()) helps[c] = runs[i]!;
    };
    root = await fleet(["--help"], env);
    const commands = [...root.stdout.matchAll(/^ {2}fleet ([a-z][a-z0-9-]*)/gm)].map((m) => m[1]!);
    await helpOf([...new Set([...commands, ...Object.keys(FLAGS).filter((c) => !c.includes(" "))])]);
    // The subcommands each parent's help lists (keys create, …), whether FLAGS knows them or not.
    const subcommands = Object.entries(helps).flatMap(([parent, run]) => {
      const section = /\nCommands:\n([\s\S]*?)(?:\n\n|$)/.exec(run.stdout)?.[1] ?? "";
      return [...section.matchAll(/^ {2}([a-z][a-z0-9-]*)/gm)]
        .map((m) => m[1]!)
        .filter((name) => name !== "help")
        .map((name) => `${parent} ${name}`);
    });
    await helpOf([...new Set([...subcommands, ...Object.keys(FLAGS).filter((c) => c.includes(" "))])]);
    helps["help worker"] = await fleet(["help", "worker"], env);
  }, 60_000);

  it("`fleet --help` lists every command and exits 0", () => {
    expect(root.code, root.stderr).toBe(0);
    expect(root.stderr).toBe("");
    for (const command of Object.keys(FLAGS).filter((c) => !c.includes(" ")))
      expect(root.stdout).toMatch(new RegExp(`^ {2}fleet ${command}\\b`, "m"));
  });

  it("every command's --help exits 0 and lists its flags", () => {
    expect(Object.keys(helps)).toEqual(expect.arrayContaining(Object.keys(FLAGS)));
    for (const [command, run] of Object.entries(helps)) {
      expect(run.code, `${command}: ${run.stderr}`).toBe(0);
      expect(run.stderr, command).toBe("");
      expect(run.stdout, command).toMatch(/^Usage: fleet /);
      for (const flag of FLAGS[command] ?? []) expect(run.stdout, `${command} lists ${flag}`).toContain(flag);
    }
    expect(helps["help worker"]!.stdout).toBe(helps.worker!.stdout);
  });

  it("--help does nothing else: `fleet migrate --help` created no database", async () => {
    const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
    try {
      const [row] = await admin<
        { n: number }[]
      >`select count(*)::int as n from pg_database where datname = ${name}`;
      expect(row!.n).toBe(0);
    } finally {
      await admin.end();
    }
    expect(helps.migrate!.stdout).not.toContain("migrations applied");
  });

  it("usage errors exit 2 with one line naming the command and pointing at its --help", async () => {
    const cases: [string[], RegExp][] = [
      [["worker", "--bogus"], /^fleet worker: unknown option '--bogus'; see `fleet worker --help`$/],
      [["keys", "revoke"], /^fleet keys revoke: missing required argument 'KEY_ID\|KEY'/],
      [["keys", "create"], /^fleet keys create: required option '--tenant <NAME>' not specified/],
      [["up", "--workers", "abc"], /^fleet up: option '--workers <N>' argument 'abc' is invalid/],
      // Each worker a process of ~1 s of CPU and ~100 MB: 100000 forked until the machine stalled.
      [
        ["up", "--workers", "100000"],
        /^fleet up: option '--workers <N>' argument '100000' is invalid\. expected a whole number from 1 to 64/,
      ],
      [
        ["demo", "--workers", "65"],
        /^fleet demo: option '--workers <N>' argument '65' is invalid\. expected a whole number from 1 to 64/,
      ],
      [
        ["api", "--port", "70000"],
        /^fleet api: .*'70000' is invalid\. expected a whole number from 0 to 65535/,
      ],
      [
        ["sweeper", "--metrics-port", "x"],
        /^fleet sweeper: option '--metrics-port <N>' argument 'x' is invalid/,
      ],
      [["demo", "--sessions", "0"], /^fleet demo: .*expected a whole number from 1 to 1000/],
      // One batch (the API's 1,000 sessions): before, 1001 started the fleet, then ended with
      // `fleet: sessions: holds at most 1000 sessions` and exit 1; 100001 with "the body is
      // larger than 16 MiB".
      [
        ["demo", "--sessions", "1001"],
        /^fleet demo: option '--sessions <N>' argument '1001' is invalid\. expected a whole number from 1 to 1000/,
      ],
      [["migrate", "now"], /^fleet migrate: too many arguments/],
      // Said before any request: a folder was found only when the whole export was renamed onto
      // it (`cannot write /tmp: EISDIR: … rename '/tmp.123.partial' -> '/tmp'`, exit 1).
      [
        ["session", "export", "s1", "--out", tmpdir()],
        new RegExp(`^fleet session export: --out: ${tmpdir()} is a folder, not a file$`),
      ],
      [["session", "export", "s1", "--out", ""], /^fleet session export: --out: must name a file$/],
      [["frobnicate"], /^fleet: unknown command 'frobnicate'; see `fleet --help`$/],
    ];
    const runs = await Promise.all(cases.map(([args]) => fleet(args, env)));
    for (const [i, run] of runs.entries()) expectOneLine(run, cases[i]![1]);
  });

  it("an API URL fetch refuses itself (port 1) is bad input for every API command: one line naming the command, exit 2", async () => {
    // Before, all but `fleet session export|import` ended `fleet: GET http://127.0.0.1:1/… failed:
    // bad port` with exit 1, as if something had failed that asking again might mend.
    const batchFile = join(tmpdir(), `fleet-bad-port-${randomUUID().slice(0, 8)}.jsonl`);
    writeFileSync(
      batchFile,
      `${JSON.stringify({ agent: { model: { provider: "scripted", steps: [{ text: "x" }] } }, input: "x" })}\n`,
    );
    const cases: [string, string[]][] = [
      ["fleet batch submit", ["batch", "submit", batchFile]],
      ["fleet batch status", ["batch", "status", "b1"]],
      ["fleet batch results", ["batch", "results", "b1"]],
      ["fleet batch cancel", ["batch", "cancel", "b1"]],
      ["fleet batch delete", ["batch", "delete", "b1"]],
      ["fleet batch resume", ["batch", "resume", "b1"]],
      ["fleet session delete", ["session", "delete", "s1"]],
      ["fleet session events", ["session", "events", "s1", "on"]],
      ["fleet watch", ["watch", "s1"]],
    ];
    try {
      const runs = await Promise.all(
        cases.map(([, args]) => fleet([...args, "--api", "http://127.0.0.1:1"], env)),
      );
      for (const [i, run] of runs.entries()) {
        const what = cases[i]![0].replace(/ /g, "\\s");
        expectOneLine(
          run,
          new RegExp(
            `^${what}: [A-Z]+ http://127\\.0\\.0\\.1:1/\\S+ failed: bad port \\(fetch sends nothing to this URL: check --api or FLEET_API_URL\\)$`,
          ),
        );
      }
    } finally {
      rmSync(batchFile, { force: true });
    }
  });
});

describe("against a real database", () => {
  let fleetEnv: FleetEnv;
  beforeAll(async () => {
    fleetEnv = await createFleetEnv("lifecycle");
  });
  afterAll(async () => fleetEnv?.close());

  it("`fleet keys create --admin` stores an admin key; without the flag, a plain one", async () => {
    const [admin, plain] = await Promise.all([
      fleet(["keys", "create", "--tenant", "ops", "--admin"], fleetEnv.env),
      fleet(["keys", "create", "--tenant", "app"], fleetEnv.env),
    ]);
    expect(admin.code, admin.stderr).toBe(0);
    expect(plain.code, plain.stderr).toBe(0);
    expect(admin.stderr).toMatch(/created for tenant ops, with admin access/);
    const rows = await fleetEnv.database.sql<{ tenant: string; admin: boolean }[]>`
      select tenant, admin from api_keys order by tenant`;
    expect(rows).toEqual([
      { tenant: "app", admin: false },
      { tenant: "ops", admin: true },
    ]);
  });

  it("a port that is taken: api --port, worker and sweeper --metrics-port (or METRICS_PORT) exit 2 with one line", async () => {
    const api = await holdPort("127.0.0.1");
    const metrics = await holdPort("0.0.0.0");
    try {
      const [apiRun, workerRun, sweeperRun, envRun] = await Promise.all([
        fleet(["api", "--port", String(api.port)], fleetEnv.env),
        fleet(["worker", "--metrics-port", String(metrics.port)], fleetEnv.env),
        fleet(["sweeper", "--metrics-port", String(metrics.port)], fleetEnv.env),
        fleet(["worker"], { ...fleetEnv.env, METRICS_PORT: String(metrics.port) }),
      ]);
      expectOneLine(
        apiRun,
        new RegExp(
          `^fleet api: PORT: port ${api.port} on 127\\.0\\.0\\.1 is already in use by another process`,
        ),
      );
      for (const run of [workerRun, sweeperRun, envRun])
        expectOneLine(
          run,
          new RegExp(
            `^fleet (worker|sweeper): METRICS_PORT: port ${metrics.port} on 0\\.0\\.0\\.0 is already in use .*--metrics-port`,
          ),
        );
    } finally {
      api.server.close();
      metrics.server.close();
    }
  });
});

describe("fleet up's restarts", () => {
  it("wait 1 s after a crash, doubling with each crash in a row, at most 30 s", () => {
    expect([1, 2, 3, 4, 5, 6, 7, 20].map((n) => restartDelay(n))).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000,
    ]);
  });
});

const hasRedisServer = spawnSync("redis-server", ["--version"]).status === 0;

describe.skipIf(!hasRedisServer)("a worker whose Redis goes away", () => {
  let fleetEnv: FleetEnv;
  let port: number;
  let redis: ReturnType<typeof spawn> | undefined;
  const startRedis = async () => {
    const child = spawn("redis-server", ["--port", String(port), "--save", "", "--appendonly", "no"], {
      stdio: ["ignore", "pipe", "ignore"],
    });
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
    });
    await waitFor(() => /Ready to accept connections/.test(out), 10_000, "redis-server to start");
    redis = child;
  };
  const stopRedis = async () => {
    const child = redis;
    redis = undefined;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  };

  beforeAll(async () => {
    const held = await holdPort("127.0.0.1");
    port = held.port;
    await new Promise((r) => held.server.close(r));
    await startRedis();
    fleetEnv = await createFleetEnv("redisoutage", { redisUrl: `redis://127.0.0.1:${port}` });
  });
  afterAll(async () => {
    await fleetEnv?.close();
    await stopRedis();
  });

  it("says once that Redis is unreachable and once that it is back, with no stack trace; SIGTERM still stops it", async () => {
    const worker = await fleetEnv.spawnWorker({ LOG_LEVEL: "warn" });
    await stopRedis();
    await waitFor(() => /Redis is unreachable/.test(worker.output()), 10_000, "the outage warning");
    // Many reconnect attempts, counted: the port takes each connection and drops it at once
    // (the attempts fail as "Connection is closed", still the same outage), until Redis is back.
    let attempts = 0;
    const dropping = createServer((socket) => {
      attempts++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => dropping.listen(port, "127.0.0.1", resolve));
    await waitFor(() => attempts >= 10, 20_000, "ten reconnect attempts of the worker");
    await new Promise((resolve) => dropping.close(resolve));
    await startRedis();
    await waitFor(() => /Redis is reachable again/.test(worker.output()), 15_000, "the recovery line");
    const out = worker.output();
    expect(out.match(/Redis is unreachable \(connect ECONNREFUSED/g) ?? [], out).toHaveLength(1);
    expect(out.match(/Redis is reachable again after \d+\.\d s/g) ?? [], out).toHaveLength(1);
    expect(out).not.toMatch(/"stack"|^\s+at /m);
    expect(out).not.toMatch(/worker error/);
    const warnings = out.split("\n").filter((l) => l.includes('"level":40'));
    expect(warnings, out).toHaveLength(2);

    worker.child.kill("SIGTERM");
    expect(await worker.exited).toBe(0);
  }, 60_000);
});
