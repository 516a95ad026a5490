/**
 * A managed Redis's failover behind one address: the old primary becomes a replica, the
 * address leads new connections to the new primary, and connections already open stay on
 * the old one, where every write answers `READONLY`. ioredis does not reconnect on that by
 * itself, so a fleet would refuse every write until someone restarted it. Each connection
 * reconnects when it meets READONLY (and sends the command again: a replica executed none
 * of it), and the fleet goes on on the new primary. The address is a TCP proxy here.
 */
import type { ChildProcess } from "node:child_process";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";
import { startTcpProxy, type TcpProxy } from "./support/tcp-proxy.js";

const agent = { model: { provider: "scripted" as const, steps: [{ text: "one" }, { text: "two" }] } };

describe("a Redis failover behind one address", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let oldPrimary: ChildProcess;
  let newPrimary: ChildProcess;
  let proxy: TcpProxy;
  let target: number;
  let oldPort: number;
  let newPort: number;

  beforeAll(async () => {
    [oldPort, newPort] = [await freePort(), await freePort()];
    oldPrimary = await startRedis(oldPort);
    newPrimary = await startRedis(newPort, ["--replicaof", "127.0.0.1", String(oldPort)]);
    target = oldPort;
    proxy = await startTcpProxy(() => target);
    fleet = await createFleetEnv("redisfailover", { redisUrl: `redis://127.0.0.1:${proxy.port}` });
    ({ client } = await fleet.startApi());
  });
  afterAll(async () => {
    await fleet?.close();
    await proxy?.close();
    for (const server of [oldPrimary, newPrimary]) if (server) await stopRedis(server);
  });

  it("goes on on the new primary without a restart", async () => {
    await fleet.spawnWorker();
    const { id } = await client.createSession({ agent });
    await client.waitForRun((await client.send(id, "first")).runId, { timeoutMs: 15_000 });

    // The failover: the replica, in sync, is promoted; the old primary becomes its replica;
    // new connections to the address go to the new primary.
    const [oldAdmin, newAdmin] = [new Redis(oldPort, "127.0.0.1"), new Redis(newPort, "127.0.0.1")];
    await newAdmin.call("WAIT", "0", "0").catch(() => {});
    await newAdmin.replicaof("NO", "ONE");
    await oldAdmin.replicaof("127.0.0.1", String(newPort));
    target = newPort;
    oldAdmin.disconnect();
    newAdmin.disconnect();

    const second = await client.send(id, "second");
    expect(await client.waitForRun(second.runId, { timeoutMs: 20_000 })).toMatchObject({
      endedReason: "completed",
    });
    expect((await client.getSession(id)).messages.map((m) => m.seq)).toEqual([1, 2, 3, 4]);
  }, 60_000);
});
