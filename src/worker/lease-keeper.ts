/**
 * A session job's lease renewals, every third of the TTL, and what each answer means for
 * the job's LeaseGuard:
 * - "renewed": the key still held this job's token; the lease is proven from the send;
 * - "lost": another token holds it; the guard is lost for good and the job is stopped;
 * - "retaken": the key was gone (it expired while Redis was unreachable or frozen, or Redis
 *   restarted empty) and the renewal took it back with `SET NX`. Nobody else can take it
 *   from then on, but someone may have acted on the session while it was gone, and every
 *   such actor moves the session's epoch in Postgres first (a claim, or the sweeper ending
 *   the run). So the guard is suspended, the epoch is read, and the lease counts again
 *   only if the epoch is still the one this job's claim took; otherwise the job stops.
 * A renewal that fails (Redis unreachable) changes nothing: the guard lapses on its own.
 */
import type { Logger } from "pino";
import type { LeaseHold, LeaseStore } from "../shared/lease.js";
import type { LeaseGuard } from "./lease-guard.js";

export type LeaseKeeperDeps = {
  sessionId: string;
  token: string;
  ttlMs: number;
  lease: LeaseStore;
  guard: LeaseGuard;
  /** The epoch this job's claim took; null before the claim answered. */
  epoch: () => number | null;
  /** Whether the session's epoch is still `epoch`; absent: a taken-back lease is lost. */
  holdsEpoch?: (fence: { sessionId: string; epoch: number }) => Promise<boolean>;
  /** Told how each epoch check after a take-back ended (`fleet_lease_retakes_total{result}`). */
  onRetaken?: (result: "verified" | "lost") => void;
  /** Called once when the lease is lost (the job aborts). */
  onLost: (reason: string) => void;
  log: Pick<Logger, "warn" | "info">;
};

/** What to do with the epoch read after a take-back (pure). */
export function afterEpochCheck(claimed: number | null, stillOurs: boolean | null): "verified" | "lost" {
  // Before the claim answered there is no epoch to hold on to: stop rather than guess.
  if (claimed === null) return "lost";
  return stillOurs ? "verified" : "lost";
}

/** Starts the renewals; returns the function that stops them. */
export function keepLease(deps: LeaseKeeperDeps): () => void {
  const { guard, sessionId, token } = deps;
  let checking = false;
  let stopped = false;
  const lose = (reason: string) => {
    guard.lost(reason);
    deps.onLost(`session lease lost: ${reason}`);
  };
  const hold = (): Promise<LeaseHold> =>
    deps.lease.hold
      ? deps.lease.hold(sessionId, token)
      : deps.lease.renew(sessionId, token).then((ok) => (ok ? "renewed" : "lost"));

  /** The key is this job's again (since `sentAt` at the latest): prove the epoch, or lose it. */
  const checkEpoch = async (sentAt: number) => {
    checking = true;
    try {
      const claimed = deps.epoch();
      const stillOurs =
        claimed === null || !deps.holdsEpoch ? null : await deps.holdsEpoch({ sessionId, epoch: claimed });
      const result = afterEpochCheck(claimed, stillOurs);
      deps.onRetaken?.(result);
      if (result === "verified") {
        guard.verified(sentAt);
        deps.log.info(
          { sessionId, epoch: claimed },
          "session lease was gone (Redis unreachable or restarted); taken back, epoch unchanged: going on",
        );
      } else {
        lose(
          claimed === null
            ? "it was gone before this worker's claim answered"
            : "it was gone, and the session's epoch moved meanwhile: another holder took it",
        );
      }
    } catch (error) {
      // Postgres did not answer: still suspended; the next renewal checks again.
      deps.log.warn({ err: error, sessionId }, "checking the session's epoch failed; retrying");
    } finally {
      checking = false;
    }
  };

  const tick = () => {
    if (checking || stopped) return;
    const sentAt = guard.stamp();
    hold().then(
      (answer) => {
        if (stopped) return;
        if (answer === "lost") return lose("another holder");
        if (answer === "retaken") guard.suspend();
        if (guard.isSuspended()) {
          if (!checking) void checkEpoch(sentAt);
          return;
        }
        guard.confirmed(sentAt);
      },
      // The guard lapses on its own if no renewal succeeds within the TTL.
      (error) => deps.log.warn({ err: error, sessionId }, "lease renewal failed; retrying"),
    );
  };
  const timer = setInterval(tick, Math.max(100, Math.floor(deps.ttlMs / 3)));
  // The renewals alone do not keep the process alive: a job left waiting on a Redis that went
  // away after its worker's stop gave up on it (worker.ts) would have kept it so for good.
  timer.unref();
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
