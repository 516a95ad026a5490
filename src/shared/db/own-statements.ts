/**
 * A pool's connections carry one application_name that ends in a random tag, so the process
 * can find its own backends in pg_stat_activity and cancel the statements still running there
 * when it stops. Without that, a statement waiting on a lock (or running a long plan) goes on
 * in Postgres after the process has exited: closing the socket does not end it, Postgres only
 * notices the client is gone when it next writes to it.
 */
import { randomBytes } from "node:crypto";
import postgres from "postgres";

/** Characters of the operator's own application_name kept before the tag. */
const BASE_MAX = 40;

/**
 * The URL to connect with and the application_name its connections get: the URL's own
 * `application_name` (or PGAPPNAME, or `fleet-<role>`), clipped to printable ASCII, then a
 * space and `tag`. The URL's parameter is taken out of it: postgres.js lets it win over ours.
 */
export function taggedConnection(
  url: string,
  role: string,
  tag: string,
  env: { PGAPPNAME?: string } = process.env,
): { url: string; applicationName: string } {
  let connectUrl = url;
  let base = env.PGAPPNAME || `fleet-${role}`;
  try {
    const parsed = new URL(url);
    const own = parsed.searchParams.get("application_name");
    if (own !== null) {
      parsed.searchParams.delete("application_name");
      connectUrl = parsed.toString();
      base = own;
    }
  } catch {
    // A URL only postgres.js reads (several hosts): connected as it is, named as above.
  }
  const clipped = base.replace(/[^\x20-\x7e]/g, "?").slice(0, BASE_MAX);
  return { url: connectUrl, applicationName: `${clipped} ${tag}` };
}

export function newTag(): string {
  return randomBytes(6).toString("hex");
}

/**
 * Cancels (pg_cancel_backend) the statements running on the connections named
 * `applicationName`, from `admin`, until `done` settles: a statement sent after one round
 * is cancelled at the next. Returns how many cancels were sent.
 */
export async function cancelUntil(
  admin: postgres.Sql,
  applicationName: string,
  done: Promise<unknown>,
): Promise<number> {
  let settled = false;
  const finished = done.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  let cancelled = 0;
  while (!settled) {
    const [row] = await admin<{ n: number }[]>`
      select count(*) filter (where pg_cancel_backend(pid))::int as n from pg_stat_activity
       where application_name = ${applicationName} and state = 'active' and pid <> pg_backend_pid()`;
    cancelled += row!.n;
    await Promise.race([finished, new Promise((resolve) => setTimeout(resolve, 50))]);
  }
  return cancelled;
}

/**
 * Ends a pool: new statements are refused at once, and those still running are cancelled
 * (from one extra connection) rather than waited for. After `timeoutS` its sockets are closed
 * whatever is left. A Postgres that cannot be reached for the cancel leaves only the timeout.
 */
export async function endCancelling(
  sql: postgres.Sql,
  url: string,
  applicationName: string,
  timeoutS = 5,
): Promise<void> {
  const ended = sql.end({ timeout: timeoutS });
  // A pool whose statements all end by themselves in this time needs no cancel (nor a connection for one).
  if (await Promise.race([ended.then(() => true), new Promise<false>((r) => setTimeout(r, 100, false))]))
    return;
  const admin = postgres(url, {
    max: 1,
    onnotice: () => {},
    connect_timeout: timeoutS,
    fetch_types: false,
    connection: { application_name: `${applicationName} cancel` },
  });
  try {
    await cancelUntil(admin, applicationName, ended);
  } catch {
    // Postgres away: nothing runs there to cancel that a timeout would not leave too.
  } finally {
    await admin.end({ timeout: 1 }).catch(() => {});
  }
  await ended;
}
