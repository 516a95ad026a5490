/**
 * Preloaded into a fleet worker by `bench/start-ramp.ts` (after gc-mark.mjs): counts what the
 * process makes — AbortControllers, timers (setTimeout / setInterval), socket writes and their
 * bytes by remote port, and with START_COUNT_PROMISES=1 promises (async_hooks PROMISE inits) —
 * and at each SIGUSR2 prints `start-count N {json}` with the totals so far. The difference of
 * two marks is what happened between them. Only the counts are meant to be read: the wrappers
 * cost time, and a promise hook makes V8 allocate a promise at every `await` (the throwaway
 * one its await optimization otherwise skips), so promises are counted apart from the bytes.
 */
import { createHook } from "node:async_hooks";
import net from "node:net";

const counts = { promises: 0, abortControllers: 0, timers: 0, socketWrites: {}, socketBytes: {} };
if (process.env.START_COUNT_PROMISES === "1")
  createHook({
    init(_id, type) {
      if (type === "PROMISE") counts.promises++;
    },
  }).enable();
const OriginalController = globalThis.AbortController;
globalThis.AbortController = class extends OriginalController {
  constructor() {
    super();
    counts.abortControllers++;
  }
};
for (const name of ["setTimeout", "setInterval"]) {
  const original = globalThis[name];
  globalThis[name] = function (...args) {
    counts.timers++;
    return original.apply(this, args);
  };
}
const write = net.Socket.prototype.write;
net.Socket.prototype.write = function (chunk, ...rest) {
  const port = String(this.remotePort ?? "other");
  counts.socketWrites[port] = (counts.socketWrites[port] ?? 0) + 1;
  counts.socketBytes[port] =
    (counts.socketBytes[port] ?? 0) +
    (typeof chunk === "string" ? Buffer.byteLength(chunk) : (chunk?.length ?? 0));
  return write.call(this, chunk, ...rest);
};
let marks = 0;
process.on("SIGUSR2", () => {
  marks++;
  process.stdout.write(`start-count ${marks} ${JSON.stringify(counts)}\n`);
});
