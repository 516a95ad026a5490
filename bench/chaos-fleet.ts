/**
 * The processes a chaos run disturbs: a private redis-server (its own port, no persistence,
 * restartable), slots of `fleet worker` / `fleet sweeper` child processes that are killed,
 * frozen and replaced, and Postgres connections terminated from an admin connection.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createServer } from "node:net";
import { join } from "node:path";
import postgres from "postgres";
import { ADMIN_URL, FLEET_BIN, sleep, spawnUntilReady } from "./support.js";

/** A worker or sweeper that has not said it is ready by then is killed and started again. */
const START_TIMEOUT_MS = 120_000;

/** The application_name of the chaos script's own connections: never terminated. */
export const CHAOS_APP_NAME = "fleet-chaos";

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}

/** A redis-server of our own: `--save "" --appendonly no`, so a restart loses everything. */
export class PrivateRedis {
  private child: ChildProcess | null = null;
  restarts = 0;

  constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  start(): Promise<void> {
    const child = spawn(
      "redis-server",
      ["--port", String(this.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
      { stdio: ["ignore", "pipe", "ignore"] },
    );
    this.child = child;
    return new Promise((resolve, reject) => {
      let out = "";
      child.stdout?.on("data", (d) => {
        out += d;
        if (out.includes("Ready to accept connections")) resolve();
      });
      child.once("error", (error) => reject(new Error(`cannot start redis-server: ${error.message}`)));
      child.once("exit", (code) => reject(new Error(`redis-server exited (${code}) at start: ${out}`)));
    });
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill("SIGKILL");
    await exited;
  }

  /** Kills the server, waits `downMs`, starts an empty one on the same port. */
  async restart(downMs: number): Promise<void> {
    await this.stop();
    await sleep(downMs);
    await this.start();
    this.restarts++;
  }
}

export type Role = "worker" | "sweeper";

/** A fleet child process: its last output and how it exited. */
export type FleetProcess = { child: ChildProcess; output: () => string; exited: Promise<number | string> };

type Slot = {
  proc: FleetProcess | null;
  id: string;
  state: "starting" | "up" | "stopped";
  cont?: NodeJS.Timeout;
};

/** Something worth reporting that a fleet process did on its own (exited unasked). */
export type UnexpectedExit = { role: Role; id: string; how: number | string; tail: string };

/**
 * `count` processes of one role. A killed one is replaced at once, so the fleet keeps its
 * size; one that exits unasked is recorded and replaced too.
 */
export class RoleSlots {
  private readonly slots: Slot[];
  private readonly everyProcess: FleetProcess[] = [];
  private closed = false;
  readonly unexpected: UnexpectedExit[] = [];
  private spawned = 0;

  constructor(
    readonly role: Role,
    count: number,
    private readonly env: Record<string, string>,
    private readonly log: (line: string) => void,
    /** Arguments after `fleet <role>`. */
    private readonly args: string[] = [],
    /** Where each process's output is kept, as `<role>-<pid>.log` (null: nowhere). */
    private readonly logDir: string | null = null,
  ) {
    this.slots = Array.from({ length: count }, () => ({ proc: null, id: "", state: "starting" }));
  }

  async startAll(): Promise<void> {
    await Promise.all(this.slots.map((_, i) => this.fill(i)));
  }

  /**
   * Spawns `fleet <role>` and waits for its ready line. The child is tracked from its first
   * moment, so a cleanup during a start (Redis down, Ctrl-C) still stops it.
   */
  private async spawnOne(): Promise<{ proc: FleetProcess; id: string }> {
    const pattern = this.role === "worker" ? /fleet worker ready: (\S+),/ : /fleet sweeper ready/;
    let proc: FleetProcess | undefined;
    const { child, ready } = await spawnUntilReady(
      [FLEET_BIN, this.role, ...this.args],
      this.env,
      pattern,
      START_TIMEOUT_MS,
      {
        // Tracked from its first moment; the last 64 KB show what a process said before it died.
        onSpawn: (started) => {
          proc = started;
          this.everyProcess.push(started);
        },
        keepBytes: 65_536,
        ...(this.logDir ? { logFile: (pid) => join(this.logDir!, `${this.role}-${pid}.log`) } : {}),
      },
    );
    const id = this.role === "worker" ? ready[1]! : `sweeper-${child.pid}`;
    return { proc: proc!, id };
  }

  /** Starts a process in slot `i`, retrying while the infrastructure is down. */
  private async fill(i: number): Promise<void> {
    const slot = this.slots[i]!;
    slot.state = "starting";
    slot.proc = null;
    for (let attempt = 1; !this.closed; attempt++) {
      try {
        const { proc, id } = await this.spawnOne();
        this.spawned++;
        if (this.closed) {
          proc.child.kill("SIGKILL");
          return;
        }
        slot.proc = proc;
        slot.id = id;
        slot.state = "up";
        void proc.exited.then((how) => {
          if (slot.proc !== proc || this.closed) return; // we did it
          const tail = proc.output().split("\n").slice(-12).join("\n");
          this.unexpected.push({ role: this.role, id, how, tail });
          this.log(`${this.role} ${id} exited on its own (${how}); replacing it`);
          void this.fill(i);
        });
        return;
      } catch (error) {
        this.log(
          `starting a ${this.role} failed (attempt ${attempt}): ${(error as Error).message.split("\n")[0]}`,
        );
        await sleep(500);
      }
    }
  }

  /** Picks `preferred` if it can take the action, else the next slot that can; null if none. */
  private pick(preferred: number, states: Slot["state"][]): number | null {
    for (let k = 0; k < this.slots.length; k++) {
      const i = (preferred + k) % this.slots.length;
      if (states.includes(this.slots[i]!.state) && this.slots[i]!.proc) return i;
    }
    return null;
  }

  /** SIGKILL (a frozen process too) and start a replacement. Returns the victim's id. */
  kill(preferred: number): string | null {
    const i = this.pick(preferred, ["up", "stopped"]);
    if (i === null) return null;
    const slot = this.slots[i]!;
    const proc = slot.proc!;
    if (slot.cont) clearTimeout(slot.cont);
    slot.proc = null;
    proc.child.kill("SIGKILL");
    void this.fill(i);
    return slot.id;
  }

  /** SIGSTOP now, SIGCONT after `ms`. Returns the victim's id. */
  stop(preferred: number, ms: number): string | null {
    const i = this.pick(preferred, ["up"]);
    if (i === null) return null;
    const slot = this.slots[i]!;
    const proc = slot.proc!;
    proc.child.kill("SIGSTOP");
    slot.state = "stopped";
    slot.cont = setTimeout(() => this.cont(i), ms);
    return slot.id;
  }

  private cont(i: number): void {
    const slot = this.slots[i]!;
    if (slot.cont) clearTimeout(slot.cont);
    slot.cont = undefined;
    if (slot.state !== "stopped" || !slot.proc) return;
    slot.proc.child.kill("SIGCONT");
    slot.state = "up";
  }

  /** Wakes every frozen process now. */
  contAll(): void {
    for (let i = 0; i < this.slots.length; i++) this.cont(i);
  }

  /** Whether every slot has a running (not frozen, not starting) process. */
  full(): boolean {
    return this.slots.every((s) => s.state === "up" && s.proc !== null);
  }

  /** Process ids of the processes in the slots now. */
  pids(): number[] {
    return this.slots.flatMap((s) => (s.proc?.child.pid ? [s.proc.child.pid] : []));
  }

  get started(): number {
    return this.spawned;
  }

  /** Stops every process this role ever started: SIGTERM, then SIGKILL after `graceMs`. */
  async close(graceMs: number): Promise<void> {
    this.closed = true;
    this.contAll();
    await Promise.all(
      this.everyProcess.map(async (proc) => {
        if (proc.child.exitCode !== null || proc.child.signalCode !== null) return;
        proc.child.kill("SIGCONT");
        proc.child.kill("SIGTERM");
        const timer = setTimeout(() => proc.child.kill("SIGKILL"), graceMs);
        await proc.exited;
        clearTimeout(timer);
      }),
    );
  }
}

/** Terminates every connection to `database` except the chaos script's own. */
export async function terminatePgConnections(database: string): Promise<number> {
  const admin = postgres(ADMIN_URL, {
    max: 1,
    onnotice: () => {},
    connection: { application_name: CHAOS_APP_NAME },
  });
  try {
    const [row] = await admin<{ n: number }[]>`
      select count(*)::int as n from (
        select pg_terminate_backend(pid) from pg_stat_activity
         where datname = ${database} and pid <> pg_backend_pid()
           and coalesce(application_name, '') <> ${CHAOS_APP_NAME}) t`;
    return row!.n;
  } finally {
    await admin.end({ timeout: 2 });
  }
}
