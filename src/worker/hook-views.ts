/**
 * What extensions' hooks are handed (contracts §8): frozen copies, never the worker's own
 * objects. The run's history, the agent it is about to parse and each committed message are
 * the very objects the worker sends to the model and stores its tail from; a hook that
 * "redacts" `ctx.history[0].content`, or sets `ctx.agent.budget = undefined`, changed what
 * the model was sent and which limits held, while Postgres kept the original. A copy keeps
 * the worker's objects out of reach; freezing it makes such a write fail in the hook (an
 * ES module is strict code) instead of silently doing nothing. `onError`'s error is the
 * exception: each extension gets a copy of its own, unfrozen (error reporters mark errors).
 */

import { deepFreeze } from "../shared/deep-freeze.js";
import { RunError } from "./extensions.js";

/** A deep copy of `value` (plain data: JSON values, Dates), frozen throughout (pure). */
export function frozenCopy<T>(value: T): T {
  return deepFreeze(structuredClone(value));
}

/** A copy of `error` (message, outcome, reason, stack) that one extension's `onError` may change. */
export function ownCopy(error: RunError): RunError {
  const copy = new RunError(error.message, error.outcome, error.reason);
  Object.defineProperty(copy, "stack", { value: error.stack, writable: true, configurable: true });
  return copy;
}
