/**
 * A worker cut off from Redis (its connections to a TCP proxy in front of a private Redis
 * on port 7102 are dropped and no new one gets through) until both its lease keys have
 * expired (TTL 2 s) and `nap` (2 s) has ended, about 3 s, while two of its sessions are
 * inside `nap`. Meanwhile one session's lease key is taken by
 * another holder, and the other session's epoch moves in Postgres (as a claim or the
 * sweeper ending its run would move it). When the worker reaches Redis again, it does not
 * go on with either: it starts no tool (`after` never runs) and appends nothing.
 */
import type { ChildProcess } from "node:child_process";
import { access } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { SessionLease } from "../src/shared/lease.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { startTcpProxy, type TcpProxy } from "./support/tcp-proxy.js";

const PORT = 7102;
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("a worker cut off from Redis whose session changed hands meanwhile", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let redis: ChildProcess;
  let proxy: TcpProxy;
  let open = true;

  beforeAll(async () => {
    redis = await startRedis(PORT);
    proxy = await startTcpProxy(() => (open ? PORT : null));
    // The test's own connections (fleet.redis, the API) go straight to Redis; the worker's through the proxy.
    fleet = await createFleetEnv("redisoutagefenced", { redisUrl: `redis://127.0.0.1:${PORT}` });
    ({ client } = await fleet.startApi());
  }, 90_000);
  afterAll(async () => {
    await fleet?.close();
    await proxy?.close();
    if (redis) await stopRedis(redis);
  });

  it("starts no tool and appends nothing once its lease was taken or its epoch moved", async () => {
    const worker = await fleet.spawnWorker({
      LOG_LEVEL: "info",
      REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
    });
    const ids: string[] = [];
    for (const name of ["taken", "moved"]) {
      const { id } = await client.createSession({
        agent: {
          model: {
            provider: "scripted",
            steps: [
              { toolCalls: [{ id: "nap", name: "sleep", arguments: { ms: 2_000 } }] },
              {
                toolCalls: [
                  { id: "after", name: "append_file", arguments: { path: `${name}.txt`, line: "ran" } },
                ],
              },
              { text: "done" },
            ],
          },
          tools: ["append_file", "sleep"],
        },
      });
      await client.send(id, name);
      ids.push(id);
    }
    const { sql } = fleet.database;
    const state = async () =>
      sql<{ id: string; last_seq: number; lease_epoch: string }[]>`
        select id, last_seq, lease_epoch from sessions where id in ${sql(ids)} order by id`;
    await waitFor(
      async () => (await state()).every((s) => s.last_seq === 2),
      20_000,
      "both sessions inside `nap`",
    );
    const insideNap = Date.now();

    open = false; // the partition: every proxied connection drops, no new one gets through
    proxy.cut();
    // The leases (TTL 2 s) expire: the test's own connection, straight to Redis, sees both
    // keys gone (this waited a fixed 3 s, and 3 s more after the changes below).
    const lease = new SessionLease(fleet.redis, fleet.config.prefix, fleet.config.leaseTtlMs);
    await waitFor(
      async () => (await Promise.all(ids.map((id) => lease.holder(id)))).every((holder) => holder === null),
      10_000,
      "both leases expired",
    );
    expect(await lease.holder(ids[0]!)).toBeNull();
    await fleet.redis.set(lease.key(ids[0]!), "another-worker/token", "PX", 60_000);
    await sql`update sessions set lease_epoch = lease_epoch + 1 where id = ${ids[1]!}`;
    const before = await state();
    // `nap` (2 s, begun when both sessions were seen inside it) ends while the worker is still
    // cut off: its result waits for a lease the worker cannot prove. 3 s after that moment, as
    // the fixed pause after the cut gave it before; nothing of the worker shows the end.
    await pause(insideNap + 3_000 - Date.now());
    open = true;

    await waitFor(
      () => (worker.output().match(/fenced out/g) ?? []).length >= 2,
      20_000,
      "the worker stopping both sessions",
    ).catch((error) => {
      console.log(worker.output().slice(-4_000));
      throw error;
    });
    await pause(1_000); // whatever it was about to do, it has done by now
    const reasons = worker
      .output()
      .split("\n")
      .filter((l) => l.includes("fenced out"))
      .map((l) => (JSON.parse(l) as { reason: string }).reason);
    console.log("stopped:", reasons);
    expect(reasons.some((r) => /another holder\)/.test(r))).toBe(true);
    expect(reasons.some((r) => /epoch moved/.test(r))).toBe(true);
    expect(await state()).toEqual(before); // nothing appended (last_seq), no claim (epoch)
    for (const name of ["taken", "moved"])
      expect(
        await access(join(fleet.config.toolDir, `${name}.txt`)).then(
          () => true,
          () => false,
        ),
      ).toBe(false);
    // The other holder's key is untouched; the taken-back one was released when the job stopped.
    expect(await lease.holder(ids[0]!)).toBe("another-worker/token");
    expect(await lease.holder(ids[1]!)).toBeNull();
  }, 60_000);
});
