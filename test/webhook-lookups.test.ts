/**
 * Webhook host names are looked up at most LOOKUPS_AT_ONCE at a time (webhook-lookups.ts): a
 * host whose DNS never answers holds a libuv pool thread per lookup, and the pool's 4 threads
 * also serve the sweeper's file-system calls and its own Postgres and Redis lookups. Here a
 * lookup that holds a pool thread is made for real: opening a FIFO for reading blocks its
 * thread until a writer opens it.
 */
import { execFileSync } from "node:child_process";
import type { LookupAddress } from "node:dns";
import { closeSync, constants, mkdtempSync, openSync } from "node:fs";
import { open, stat } from "node:fs/promises";
import { createServer } from "node:http";
import type { LookupFunction } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { LOOKUPS_AT_ONCE, limitLookups } from "../src/shared/webhook-lookups.js";
import { postWebhook, webhookSettingsFromEnv } from "../src/shared/webhooks.js";
import { waitFor } from "./support/fleet-env.js";

/** Opens `fifo` for writing once its reader has (non-blocking: ENXIO while none has), and closes it. */
async function writerOpened(fifo: string): Promise<void> {
  for (;;) {
    try {
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENXIO") throw error;
      await new Promise((r) => setTimeout(r, 5));
    }
  }
}

describe("webhook lookups, a few at a time", () => {
  it("leaves the thread pool to the rest of the process while 8 lookups hang", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lookups-"));
    const fifos = Array.from({ length: 8 }, (_, i) => join(dir, `dns-${i}`));
    for (const fifo of fifos) execFileSync("mkfifo", [fifo]);
    let started = 0;
    let next = 0;
    // A "DNS server" that never answers: each lookup blocks a pool thread until its FIFO gets a writer.
    const hanging: LookupFunction = (_hostname, _options, callback) => {
      started++;
      const fifo = fifos[next++]!;
      open(fifo, "r").then(async (file) => {
        await file.close();
        (callback as (e: null, a: LookupAddress[]) => void)(null, [{ address: "192.0.2.1", family: 4 }]);
      });
    };
    const lookup = limitLookups(hanging);
    const answered: number[] = [];
    for (let i = 0; i < 8; i++) lookup(`hook-${i}.example`, { all: true }, () => answered.push(i));
    expect(started).toBe(LOOKUPS_AT_ONCE);
    // The pool still serves the process: without the limit, 4 of the 8 held every thread and
    // this never returned.
    expect((await stat(dir)).isDirectory()).toBe(true);
    // The DNS answers, one lookup at a time: each that returns lets the next waiting one start,
    // in the order they were asked, never more than LOOKUPS_AT_ONCE running.
    for (let i = 0; i < 8; i++) {
      await writerOpened(fifos[i]!);
      while (answered.length <= i) await new Promise((r) => setTimeout(r, 5));
      expect(started - answered.length).toBeLessThanOrEqual(LOOKUPS_AT_ONCE);
    }
    expect(started).toBe(8);
    expect(answered).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  }, 30_000);

  it("a lookup still waiting at its delivery's deadline is answered with an error and never run", async () => {
    // Two lookups of a host whose DNS never answers hold both places; every delivery after
    // them waits. Before, a waiting lookup waited for good: its delivery gave up at its
    // deadline, but the lookup stayed queued and ran later, so one tenant's dead DNS host
    // queued every delivery's lookup (every tenant's) behind ever more abandoned ones.
    const held: (() => void)[] = [];
    let started = 0;
    const hanging: LookupFunction = (_hostname, _options, callback) => {
      started++;
      held.push(() =>
        (callback as (e: null, a: LookupAddress[]) => void)(null, [{ address: "192.0.2.1", family: 4 }]),
      );
    };
    const lookup = limitLookups(hanging, LOOKUPS_AT_ONCE, 100);
    for (let i = 0; i < LOOKUPS_AT_ONCE; i++) lookup(`dead-${i}.example`, { all: true }, () => {});
    const errors: (NodeJS.ErrnoException | null)[] = [];
    for (let i = 0; i < 20; i++) lookup(`hook-${i}.example`, { all: true }, (error) => errors.push(error));
    await waitFor(() => errors.length === 20, 10_000, "the waiting lookups answered");
    expect(errors.map((error) => error?.code)).toEqual(Array(20).fill("ETIMEOUT"));
    expect(started).toBe(LOOKUPS_AT_ONCE);
    // The DNS answers at last: none of the abandoned lookups runs, and a new one starts at once.
    for (const answer of held.splice(0)) answer();
    expect(started).toBe(LOOKUPS_AT_ONCE);
    let answered = false;
    lookup("live.example", { all: true }, () => {
      answered = true;
    });
    expect(started).toBe(LOOKUPS_AT_ONCE + 1);
    held[0]!();
    expect(answered).toBe(true);
  });

  it("a delivery to a host name goes through them", async () => {
    const server = createServer((_req, res) => res.writeHead(204).end());
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const port = (server.address() as { port: number }).port;
      const settings = webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET: "s" });
      expect(await postWebhook(`http://localhost:${port}/hook`, "{}", {}, settings)).toBe(204);
    } finally {
      server.close();
    }
  });
});
