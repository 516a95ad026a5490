/**
 * Resolves after `ms`, or at once when `signal` aborts (live.ts: its backoff between
 * connections and its polling). A wait that ends takes its listener off the signal: the page's
 * signal lives as long as it follows the session, and a listener left by each wait (one a
 * second while it polls) held 86,400 closures a day.
 */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
