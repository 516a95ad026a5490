/**
 * A Postgres server of a test's own (initdb into a temporary directory, `pg_ctl` on a free
 * port), that the test may stop, start and restart without disturbing the shared server or
 * any other test. initdb refuses to run as root, so as root the server runs as `postgres`.
 */
import { execFile } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort } from "./private-redis.js";

const run = promisify(execFile);

/** The newest installed server's bin directory (/usr/lib/postgresql/<version>/bin). */
function binDir(): string {
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, "bin", "initdb")))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error("no Postgres server binaries under /usr/lib/postgresql");
  return join(root, versions[0]!, "bin");
}

export type PrivatePostgres = {
  port: number;
  /** `postgres://postgres@127.0.0.1:<port>/postgres`: trust, the superuser. */
  adminUrl: string;
  /** Stops it: `fast` ends every session (57P01), `immediate` as a crash would. */
  stop(mode?: "fast" | "immediate"): Promise<void>;
  start(): Promise<void>;
  /** Stops it for good and removes its directory. */
  remove(): Promise<void>;
};

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = binDir();
  const dir = mkdtempSync(join(tmpdir(), "fleet-pg-"));
  const data = join(dir, "data");
  const asRoot = process.getuid?.() === 0;
  const user = asRoot ? { uid: uidOf("postgres"), gid: gidOf("postgres") } : {};
  if (asRoot) chownSync(dir, user.uid!, user.gid!);
  const pgRun = (program: string, args: string[]) =>
    run(join(bin, program), args, { ...user, cwd: dir, env: { ...process.env, LC_ALL: "C" } });
  await pgRun("initdb", ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
  const port = await freePort();
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`;
  const start = async () => {
    await pgRun("pg_ctl", ["-D", data, "-l", join(dir, "log"), "-o", options, "-w", "-t", "60", "start"]);
  };
  const stop = async (mode: "fast" | "immediate" = "fast") => {
    await pgRun("pg_ctl", ["-D", data, "-m", mode, "-w", "-t", "60", "stop"]);
  };
  await start();
  return {
    port,
    adminUrl: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop,
    start,
    async remove() {
      await stop("immediate").catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function uidOf(name: string): number {
  return idOf(name, 2);
}

function gidOf(name: string): number {
  return idOf(name, 3);
}

function idOf(name: string, field: number): number {
  const line = readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${name}:`));
  if (!line) throw new Error(`no user ${name} to run Postgres as (initdb refuses root)`);
  return Number(line.split(":")[field]);
}
