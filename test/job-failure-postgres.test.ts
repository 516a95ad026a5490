/**
 * A run whose job failed on a statement Postgres refused — for anything but its content
 * (storage_rejected) or an outage (a retry rides it out): a privilege taken away, a disk that
 * is full, a migration not applied — has the failure on the run its tenant reads
 * (job-failure.ts), and Postgres's words name the operator's schema and server: `permission
 * denied for table messages`, `could not extend file "base/16384/16397"`. The tenant reads
 * that Postgres refused and its SQLSTATE; the worker's "job failed" line keeps the message.
 * Real API, worker (in this process), Postgres and Redis; the refusals come from a trigger of
 * this file's own database, with Postgres's own words and codes.
 */
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type RunningWorker, startWorker } from "../src/worker/worker.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

let fleet: FleetEnv;
let client: FleetClient;
let worker: RunningWorker;
const lines: Record<string, unknown>[] = [];
const logger = pino({ level: "warn" }, { write: (line: string) => void lines.push(JSON.parse(line)) });

/** The tool result each refusal meets (the `sleep` tool's answer), with Postgres's words and code. */
const REFUSALS = [
  { result: "slept 1 ms", code: "42501", message: "permission denied for table messages" },
  {
    result: "slept 2 ms",
    code: "53100",
    message: 'could not extend file "base/16384/16397": No space left on device',
  },
  {
    result: "slept 3 ms",
    code: "42703",
    message: 'column "history_bytes" of relation "sessions" does not exist',
  },
];

beforeAll(async () => {
  fleet = await createFleetEnv("job-failure-postgres");
  const cases = REFUSALS.map(
    (r) =>
      `when new.content = '${r.result}' then raise exception using message = '${r.message.replaceAll("'", "''")}', errcode = '${r.code}';`,
  ).join("\n      ");
  await fleet.database.sql.unsafe(`
    create function refuse_tool_result() returns trigger language plpgsql as $$
    begin
      case
      ${cases}
      else null;
      end case;
      return new;
    end $$;
    create trigger refuse_tool_result before insert on messages
      for each row when (new.role = 'tool') execute function refuse_tool_result();`);
  ({ client } = await fleet.startApi());
  worker = await startWorker({ ...fleet.config, logLevel: "silent" }, { serveMetrics: false, logger });
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await fleet?.close();
});

describe("a run whose job failed on a statement Postgres refused", () => {
  for (const [i, refusal] of REFUSALS.entries())
    it(`says SQLSTATE ${refusal.code} to its tenant, not Postgres's words; the log keeps them`, async () => {
      const agent = {
        model: {
          provider: "scripted" as const,
          steps: [{ toolCalls: [{ name: "sleep", arguments: { ms: i + 1 } }] }, { text: "resumed" }],
        },
        tools: ["sleep"],
      };
      const session = await client.createSession({ agent });
      const { runId } = await client.send(session.id, "go");
      // The failed job's retry claims the session: the run ends `crashed`, a resume completes.
      await waitFor(
        async () => (await client.getSession(session.id)).runs.some((r) => r.endedReason === "completed"),
        60_000,
        "the resume after the refusal to complete",
      );
      const crashed = (await client.getRun(runId)) as { endedReason: string | null; error: string | null };
      expect(crashed.endedReason).toBe("crashed");
      // Before: the run's error was Postgres's message, e.g. "permission denied for table messages".
      expect(crashed.error).toBe(
        `Postgres refused a statement of the worker (SQLSTATE ${refusal.code}); the operator's log has the rest`,
      );
      const body = JSON.stringify(await client.getSession(session.id));
      expect(body).not.toContain(refusal.message.slice(0, 20));
      // The operator's "job failed" line has the message whole.
      const failed = lines.filter((l) => l.msg === "job failed").map((l) => String(l.err));
      expect(failed).toContain(refusal.message);
    }, 90_000);
});
