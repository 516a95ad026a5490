/**
 * `npm run chaos`: N scripted sessions on a fleet of worker and sweeper processes while a
 * seeded schedule SIGKILLs and SIGSTOPs them, terminates their Postgres connections and
 * restarts their Redis; then checks every invariant from Postgres and the tool files.
 *
 *   npm run chaos                              # 200 sessions, a random seed (printed)
 *   npm run chaos -- --sessions 1000           # deadline scales with the sessions
 *   npm run chaos -- --seed 1234 --timeout 60  # repeat a schedule, shorter
 *   npm run chaos -- --redis-port 7800         # the private redis-server's port (default: a free one)
 *   npm run chaos -- --logs /tmp/chaos-logs     # where each worker's and sweeper's log is kept
 *                                              # (default: a new directory, printed at the end)
 *
 * Exits 0 when every check holds, 1 on a violation (the first offending sessions are
 * printed with their seqs), 2 when the run itself could not be carried out.
 */
import { runChaos } from "./chaos-run.js";
import { benchOptions } from "./support.js";

// Output piped into `head` or a closed terminal must not kill the run before it cleans up.
for (const stream of [process.stdout, process.stderr]) stream.on("error", () => {});

const values = benchOptions({
  sessions: { type: "string", default: "200" },
  seed: { type: "string" },
  timeout: { type: "string" },
  settle: { type: "string", default: "60" },
  workers: { type: "string", default: "4" },
  sweepers: { type: "string", default: "2" },
  concurrency: { type: "string", default: "8" },
  "lease-ms": { type: "string", default: "2000" },
  "chaos-rate": { type: "string", default: "1" },
  "redis-port": { type: "string" },
  logs: { type: "string" },
  keep: { type: "boolean", default: false },
  quiet: { type: "boolean", default: false },
});

function number(name: string, value: string | undefined, min: number, integer = true): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < min || (integer && !Number.isInteger(n))) {
    console.error(`--${name} must be a ${integer ? "whole " : ""}number ≥ ${min}`);
    process.exit(2);
  }
  return n;
}

const sessions = number("sessions", values.sessions, 1);
// 0.6 s per session, at least a minute: 200 sessions → 120 s, 1000 → 600 s.
const timeoutS =
  values.timeout === undefined ? Math.max(60, sessions * 0.6) : number("timeout", values.timeout, 5);
const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : number("seed", values.seed, 0);

const code = await runChaos({
  sessions,
  seed,
  timeoutMs: timeoutS * 1000,
  settleMs: number("settle", values.settle, 1) * 1000,
  workers: number("workers", values.workers, 1),
  sweepers: number("sweepers", values.sweepers, 1),
  concurrency: number("concurrency", values.concurrency, 1),
  leaseTtlMs: number("lease-ms", values["lease-ms"], 500),
  chaosRate: number("chaos-rate", values["chaos-rate"], 0, false),
  redisPort: values["redis-port"] === undefined ? null : number("redis-port", values["redis-port"], 1),
  keep: values.keep,
  logDir: values.logs ?? null,
  verbose: !values.quiet,
});
// Exit explicitly: a keep-alive socket or timer left by a library must not hold the run open.
process.exit(code);
