/**
 * Why a job failed, written on its run (session-job.ts). A fault the run's loop does not turn
 * into an outcome — a tool's wrapper that throws, an extension that throws outside its hook,
 * a bug in the worker — fails the job and leaves its run `running`: the next claim (BullMQ's
 * retry) or the sweeper ends it `crashed`/`stalled`, and a resume follows. Its reason was only
 * in the worker's "job failed" log line; the run's `error` said nothing. The job writes it
 * there first, while it still holds the session, in one fenced statement: nothing else about
 * the run, its end or its resume changes, and a job that cannot write it (its lease lost,
 * Postgres away) leaves the run as before.
 */
import { jobFailureText } from "../shared/failure-text.js";
import type { Fence, FencedWrites } from "../shared/store/fenced-writes.js";
import { isServiceUnavailable } from "../shared/unavailable.js";
import type { LeaseGuard } from "./lease-guard.js";

/** How long a failed job waits for its run's error to be written before it fails all the same. */
export const FAILURE_WRITE_MS = 2_000;

/** What a system error's place reads on the run. */
export const WORKER_PATH = "[a path of the worker]";
export const WORKER_ADDRESS = "[an address of the worker's network]";

/**
 * The text a run's `error` gets, which its tenant reads (pure): jobFailureText without the
 * places a Node system error names — its `path` and `dest` (`ENOENT: …, open
 * '/srv/fleet/ext/config.json'`), its `address`, `port` and `hostname` (`listen EADDRINUSE:
 * address already in use 10.0.3.7:9464`). A statement Postgres refused (for anything but its
 * content, which ends the run `storage_rejected`, or an outage, which writes nothing) is said
 * with its SQLSTATE alone: Postgres's words name the operator's schema and server (`permission
 * denied for table messages`, `could not extend file "base/16384/16397"`, `column "…" of
 * relation "sessions" does not exist`). The "job failed" line logs jobFailureText whole.
 */
export function tenantJobFailureText(
  error: unknown,
  env: Readonly<Record<string, string | undefined>>,
): string {
  // Never throws: `error` may be what operator code threw (a `beforeRun`'s refusal), and a value
  // that cannot be read (a revoked proxy, a getter that throws) threw here, out of the hook
  // runner: the run crashed and its resumes met the same hook instead of ending `failed`.
  const refused = readOr(() => postgresRefusal(error), null);
  if (refused !== null) return refused;
  let text = jobFailureText(error, env);
  if (error === null || typeof error !== "object") return text;
  const place = (key: string): unknown => readOr(() => (error as Record<string, unknown>)[key], undefined);
  const [path, dest, address, port, hostname] = ["path", "dest", "address", "port", "hostname"].map(place);
  const replace = (place: unknown, by: string) => {
    if (typeof place === "string" && place.length >= 3) text = text.replaceAll(place, by);
  };
  // A path with a directory in it: a bare file name (`notes.txt`) names no place of the worker's.
  for (const file of [path, dest])
    if (typeof file === "string" && /[/\\]/.test(file)) replace(file, WORKER_PATH);
  if (typeof address === "string" && (typeof port === "string" || typeof port === "number"))
    replace(`${address}:${String(port)}`, WORKER_ADDRESS);
  replace(address, WORKER_ADDRESS);
  replace(hostname, WORKER_ADDRESS);
  return text;
}

/** What `read` gives, or `otherwise` when it throws. */
function readOr<T>(read: () => T, otherwise: T): T {
  try {
    return read();
  } catch {
    return otherwise;
  }
}

/** A SQLSTATE: five digits or upper-case letters. */
const SQLSTATE = /^[0-9A-Z]{5}$/;

/** What a tenant reads of a statement Postgres refused (postgres.js's PostgresError), or null for another error. */
function postgresRefusal(error: unknown): string | null {
  if (!(error instanceof Error) || error.name !== "PostgresError") return null;
  const code = (error as { code?: unknown }).code;
  const state = typeof code === "string" && SQLSTATE.test(code) ? ` (SQLSTATE ${code})` : "";
  return `Postgres refused a statement of the worker${state}; the operator's log has the rest`;
}

/**
 * Writes `error`'s text on the run `runId` when the job still holds its lease (`guard`, from
 * memory: no wait) and the statement's fence agrees. Never throws; waits at most
 * FAILURE_WRITE_MS (the statement, if still pending then, changes nothing once another holder
 * took the session or the run ended). A job failed by an outage (Postgres or Redis
 * unavailable: its ride-out gave up) fails at once, as before: it writes nothing.
 */
export async function recordJobFailure(
  writes: Partial<Pick<FencedWrites, "recordRunFailure">>,
  guard: Pick<LeaseGuard, "isValid">,
  fence: Fence,
  runId: string,
  error: unknown,
): Promise<void> {
  if (!writes.recordRunFailure || !guard.isValid() || isServiceUnavailable(error)) return;
  let timer: NodeJS.Timeout | undefined;
  const written = writes
    .recordRunFailure(fence, runId, tenantJobFailureText(error, process.env))
    .catch(() => false);
  await Promise.race([written, new Promise((resolve) => (timer = setTimeout(resolve, FAILURE_WRITE_MS)))]);
  clearTimeout(timer);
}
