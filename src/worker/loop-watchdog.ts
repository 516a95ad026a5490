/**
 * `fleet worker`'s watchdog: a thread of its own that ends the process when the main event
 * loop has not turned for FLEET_WORKER_BLOCKED_EXIT_MS. A tool or extension hook that never
 * returns from synchronous code (`while (true) {}`, a busy wait) left a zombie: the sweeper
 * resumed its sessions elsewhere once their leases lapsed, but the process kept its BullMQ
 * and liveness connections, its slots and its /healthz socket, and looked alive to its
 * supervisor for ever. Nothing on the main thread can notice (no timer of it fires), hence a
 * `worker_threads` thread: the main thread adds 1 to a SharedArrayBuffer every second (an
 * unref'd timer: an Atomics.add, nothing else), and the thread reads it every second.
 *
 * How it ends the process: with SIGALRM, sent to itself. A blocked main thread runs nothing,
 * so no exit code of our own can be given (`process.exit` in a worker thread ends only that
 * thread); a signal's default action is the only way out, and SIGALRM's ends the process
 * without a core dump. It is one a supervisor tells apart: `fleet up` logs `exited
 * (SIGALRM)`, a shell, Docker and Kubernetes report 142 (128 + 14); SIGKILL (137) is the
 * kernel's OOM killer or a `kill -9`, SIGABRT (134) V8's heap limit, 70 an unhandled error
 * (cli.ts), 1 a failed start. Should operator code listen for SIGALRM (the signal is then
 * queued for the blocked loop), SIGKILL follows KILL_AFTER_MS later.
 *
 * Before the signal it writes one line on stderr (straight to fd 2: a worker thread's
 * `process.stderr` goes through the blocked main thread) saying how long the loop was held
 * and, when the inspector can pause the main thread (it can inside JavaScript, not inside a
 * blocking native call), the stack that holds it: the tool's or hook's function and line.
 */
import { Worker } from "node:worker_threads";

/** How often the main thread beats, and how often the watchdog looks. */
export const HEARTBEAT_MS = 1_000;
/** The signal a blocked worker ends by (see above). */
export const BLOCKED_EXIT_SIGNAL = "SIGALRM";
/** How long the watchdog waits for the blocked stack before it says the line without it. */
const STACK_WAIT_MS = 3_000;
/** How long after SIGALRM a process still there (operator code listens for it) gets SIGKILL. */
const KILL_AFTER_MS = 2_000;

/**
 * The thread's code, run as a CommonJS script (`eval`): one source for tsx and the build,
 * with no file to find beside this one. It requires only Node's own modules.
 */
const THREAD_SOURCE = `
const { workerData } = require("node:worker_threads");
const { writeSync } = require("node:fs");
const { beats, blockedMs, tickMs, role, variable, signal, stackWaitMs, killAfterMs } = workerData;
let seen = Atomics.load(beats, 0);
let lastTick = performance.now();
let quietMs = 0;
const timer = setInterval(() => {
  const now = performance.now();
  const gap = now - lastTick;
  lastTick = now;
  const beat = Atomics.load(beats, 0);
  if (beat !== seen) {
    seen = beat;
    quietMs = 0;
    return;
  }
  // A gap far past the tick means this thread was not running either (SIGSTOP, a suspended
  // VM, a starved machine): that time does not count against the main thread, whose timer
  // is due as soon as the process runs again.
  if (gap <= 2 * tickMs) quietMs += gap;
  if (quietMs < blockedMs) return;
  clearInterval(timer);
  end(Math.round(quietMs / 1000));
}, tickMs);

function end(seconds) {
  let said = false;
  const say = (stack) => {
    if (said) return;
    said = true;
    const where = stack ? ", at " + stack : " (its stack could not be read: a blocking native call?)";
    writeSync(2, "fleet " + role + ": the event loop has not turned for " + seconds + " s (" + variable +
      "): synchronous code that does not return (a tool, an extension hook or a module it loaded) holds it" +
      where + "; exiting by " + signal + " so that a supervisor restarts it\\n");
    process.kill(process.pid, signal);
    setTimeout(() => process.kill(process.pid, "SIGKILL"), killAfterMs);
  };
  setTimeout(() => say(null), stackWaitMs);
  try {
    const inspector = require("node:inspector");
    const session = new inspector.Session();
    session.connectToMainThread();
    const urls = new Map();
    session.on("Debugger.scriptParsed", (m) => urls.set(m.params.scriptId, m.params.url));
    session.on("Debugger.paused", (m) => {
      const frames = m.params.callFrames.slice(0, 4).map((f) => {
        // A path, not a URL: no file:// before it, no loader's ?query after it (tsx: ?typescript).
        const url = (urls.get(f.location.scriptId) || f.url || "?").replace(/^file:\\/\\//, "").replace(/\\?.*$/, "");
        return (f.functionName || "(anonymous)") + " (" + url + ":" + (f.location.lineNumber + 1) + ":" + (f.location.columnNumber + 1) + ")";
      });
      say(frames.join(" < "));
    });
    session.post("Debugger.enable", () => session.post("Debugger.pause"));
  } catch {
    say(null);
  }
}
`;

export type LoopWatchdog = { stop(): void };

/**
 * Starts the watchdog of this process's event loop (`blockedMs` 0: none). Neither its thread
 * nor its heartbeat keeps a stopping process alive (both unref'd).
 */
export function startLoopWatchdog(options: {
  blockedMs: number;
  role: string;
  variable: string;
  onError: (error: Error) => void;
}): LoopWatchdog {
  if (options.blockedMs <= 0) return { stop: () => {} };
  const beats = new Int32Array(new SharedArrayBuffer(4));
  const thread = new Worker(THREAD_SOURCE, {
    eval: true,
    // Not the main thread's flags (tsx's loader, --inspect): the thread runs only Node's modules.
    execArgv: [],
    workerData: {
      beats,
      blockedMs: options.blockedMs,
      tickMs: HEARTBEAT_MS,
      role: options.role,
      variable: `${options.variable} ${options.blockedMs}`,
      signal: BLOCKED_EXIT_SIGNAL,
      stackWaitMs: STACK_WAIT_MS,
      killAfterMs: KILL_AFTER_MS,
    },
  });
  // A thread that fails (it should not) is reported, and the worker goes on without it.
  thread.on("error", options.onError);
  thread.unref();
  const heartbeat = setInterval(() => Atomics.add(beats, 0, 1), HEARTBEAT_MS);
  heartbeat.unref();
  return {
    stop() {
      clearInterval(heartbeat);
      void thread.terminate();
    },
  };
}
