/**
 * What `fleet up` does with its children: each role runs in a process of its own, so one
 * that crashes (or exits 70 on an unhandled error) takes nothing else down. A child that
 * dies is started again after a delay that doubles with each crash in a row, up to a cap;
 * one that ran long enough starts the count again. Every restart is logged.
 */
import type { ChildProcess } from "node:child_process";
import { spawnRole } from "./serve.js";

export type ChildSpec = {
  /** How logs name it: "api", "sweeper", "worker 1". */
  name: string;
  /** The `fleet` command it runs. */
  role: "api" | "worker" | "sweeper";
  args: string[];
};

export type RestartPolicy = {
  /** The wait before the first restart; doubles with each crash in a row. Default 1 s. */
  firstDelayMs: number;
  /** The longest wait between restarts. Default 30 s. */
  maxDelayMs: number;
  /** A child that ran this long before it died is restarted after firstDelayMs again. Default 60 s. */
  healthyAfterMs: number;
};

const DEFAULT_POLICY: RestartPolicy = { firstDelayMs: 1_000, maxDelayMs: 30_000, healthyAfterMs: 60_000 };

/** The wait before the restart that follows `crashesInARow` crashes (1-based), capped. */
export function restartDelay(crashesInARow: number, policy: RestartPolicy = DEFAULT_POLICY): number {
  return Math.min(policy.firstDelayMs * 2 ** Math.max(0, crashesInARow - 1), policy.maxDelayMs);
}

type Supervised = {
  spec: ChildSpec;
  child: ChildProcess | null;
  /** Resolves once the running child has exited and its output has been read (childEnded). */
  ended: Promise<void>;
  startedAt: number;
  crashesInARow: number;
  restarts: number;
  /** The rest of the line after "fleet <role> ready: ", once it said so. */
  ready: string | null;
  timer: NodeJS.Timeout | null;
};

/** A child that exited on its first start, before it said it was ready: nothing to restart. */
export class StartFailedError extends Error {
  override name = "StartFailedError";
  constructor(
    readonly spec: ChildSpec,
    readonly exit: { code: number | null; signal: NodeJS.Signals | null },
  ) {
    super(`${spec.name} could not start (${exit.signal ?? `exit code ${exit.code}`})`);
  }
}

export class Supervisor {
  private readonly children: Supervised[] = [];
  private stopping = false;
  private startFailed: (error: StartFailedError) => void = () => {};
  private readonly failure = new Promise<never>((_, reject) => {
    this.startFailed = reject;
  });
  private allReady: () => void = () => {};
  private readonly everyoneReady = new Promise<void>((resolve) => {
    this.allReady = resolve;
  });

  constructor(private readonly policy: RestartPolicy = DEFAULT_POLICY) {
    this.failure.catch(() => {});
  }

  start(spec: ChildSpec): void {
    const entry: Supervised = {
      spec,
      child: null,
      ended: Promise.resolve(),
      startedAt: 0,
      crashesInARow: 0,
      restarts: 0,
      ready: null,
      timer: null,
    };
    this.children.push(entry);
    this.spawn(entry, false);
  }

  /**
   * Resolves with each child's ready line (what follows "fleet ROLE ready: ") once every
   * child has said it is ready; rejects with a StartFailedError when one exits first.
   */
  async started(): Promise<Map<string, string>> {
    if (this.children.some((c) => c.ready === null)) await Promise.race([this.everyoneReady, this.failure]);
    return new Map(this.children.map((c) => [c.spec.name, c.ready!]));
  }

  private spawn(entry: Supervised, restarted: boolean): void {
    const child = spawnRole(entry.spec.role, {}, entry.spec.args, "pipe");
    entry.child = child;
    entry.startedAt = Date.now();
    let readyNow = false;
    console.log(`fleet up: ${restarted ? "restarted" : "started"} ${entry.spec.name} (pid ${child.pid})`);
    forwardLines(child, (line) => {
      const match = /^fleet (api|worker|sweeper) ready: (.*)$/.exec(line);
      if (match) {
        entry.ready = match[2]!;
        readyNow = true;
        if (this.children.every((c) => c.ready !== null)) this.allReady();
      }
    });
    entry.ended = childEnded(child).then(({ code, signal }) => {
      entry.child = null;
      if (this.stopping) return;
      if (!restarted && !readyNow) {
        this.startFailed(new StartFailedError(entry.spec, { code, signal }));
        return;
      }
      const exit = signal ?? `exit code ${code}`;
      const ranMs = Date.now() - entry.startedAt;
      entry.crashesInARow = ranMs >= this.policy.healthyAfterMs ? 1 : entry.crashesInARow + 1;
      entry.restarts += 1;
      const delay = restartDelay(entry.crashesInARow, this.policy);
      console.error(
        `fleet up: ${entry.spec.name} exited (${exit}) after ${formatMs(ranMs)}; restarting it in ${formatMs(delay)} (restart ${entry.restarts})`,
      );
      entry.timer = setTimeout(() => {
        entry.timer = null;
        if (!this.stopping) this.spawn(entry, true);
      }, delay);
    });
  }

  /**
   * Stops restarting, sends SIGTERM to every child and waits for all to exit; one still
   * running after `graceMs` is killed.
   */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    for (const entry of this.children) {
      if (entry.timer) clearTimeout(entry.timer);
      entry.timer = null;
    }
    await Promise.all(
      this.children.map(async ({ spec, child, ended }) => {
        if (!child) return;
        if (child.exitCode !== null || child.signalCode !== null) return ended;
        child.kill("SIGTERM");
        const late = setTimeout(() => {
          console.error(`fleet up: ${spec.name} did not stop within ${formatMs(graceMs)}; killing it`);
          child.kill("SIGKILL");
        }, graceMs);
        await ended;
        clearTimeout(late);
      }),
    );
  }
}

/**
 * How long after a child's exit its output is still waited for: what it wrote last (its ready
 * line, the reason it stopped) is read by then, unless a process it started holds its stdout.
 */
export const OUTPUT_AFTER_EXIT_MS = 1_000;

/**
 * Resolves with a child's exit once its stdout has been read to the end, or OUTPUT_AFTER_EXIT_MS
 * after the exit. Node's "close" waits for the pipe, which a process the child started (a
 * tool's command run with stdio "inherit", a helper a --tools module spawned) keeps open after
 * the child is gone: waiting for "close" alone, a dead worker was not restarted and `fleet up`
 * did not exit until that process ended. Such a pipe is still passed on, but no longer keeps
 * `fleet up` alive.
 */
export function childEnded(
  child: ChildProcess,
  drainMs = OUTPUT_AFTER_EXIT_MS,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve) => {
    let drained = child.stdout === null || child.stdout.closed;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
    let timer: NodeJS.Timeout | undefined;
    const settle = () => {
      if (!exit || !drained) return;
      clearTimeout(timer);
      resolve(exit);
    };
    child.stdout?.once("close", () => {
      drained = true;
      settle();
    });
    child.once("exit", (code, signal) => {
      exit = { code, signal };
      if (drained) return settle();
      timer = setTimeout(() => {
        drained = true;
        (child.stdout as { unref?: () => void } | null)?.unref?.();
        settle();
      }, drainMs);
    });
  });
}

/**
 * The longest line `forwardLines` holds back waiting for its newline: a child that writes more
 * without one (a user tool's progress bar redrawn with "\r", binary data) has it passed on in
 * pieces of this size, each ended with a newline.
 */
export const MAX_FORWARDED_LINE = 64 * 1024;

/**
 * Passes a child's stdout on whole line by whole line (so children never interleave mid-line).
 * Only the new chunk is searched for newlines, and at most MAX_FORWARDED_LINE is held back:
 * the whole pending text, searched again for every chunk, grew without bound (and quadratic
 * work with it) while a child wrote without a newline, and none of it was passed on.
 */
export function forwardLines(
  child: Pick<ChildProcess, "stdout">,
  onLine: (line: string) => void,
  write: (text: string) => void = (text) => void process.stdout.write(text),
): void {
  let pending = "";
  child.stdout?.setEncoding("utf8");
  child.stdout?.on("data", (chunk: string) => {
    const lines = chunk.split("\n");
    if (lines.length > 1) {
      lines[0] = pending + lines[0];
      pending = lines.pop() ?? "";
      for (const line of lines) {
        write(`${line}\n`);
        onLine(line);
      }
    } else {
      pending += chunk;
    }
    while (pending.length > MAX_FORWARDED_LINE) {
      write(`${pending.slice(0, MAX_FORWARDED_LINE)}\n`);
      pending = pending.slice(MAX_FORWARDED_LINE);
    }
  });
  child.stdout?.on("end", () => {
    if (pending) write(`${pending}\n`);
    pending = "";
  });
}

function formatMs(ms: number): string {
  return ms < 10_000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`;
}
