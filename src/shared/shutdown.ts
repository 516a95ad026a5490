/** Process helpers every role uses when it shuts down. */
import type { Logger } from "pino";

/** Closes every resource, in order, even when one close throws. */
export async function closeAll(
  closers: (() => Promise<unknown>)[],
  log: Pick<Logger, "warn">,
): Promise<void> {
  for (const close of closers) {
    try {
      await close();
    } catch (error) {
      log.warn({ err: error }, "close failed");
    }
  }
}
