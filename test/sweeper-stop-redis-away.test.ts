/**
 * A sweeper stopped while its Redis is away (`startSweeper().stop()`, as an embedding process
 * or a test's teardown calls it): the stop ends. Before, it waited for the webhook Worker's
 * `close()`, which BullMQ never resolves while Redis is away (taskforcesh/bullmq#4656), so it
 * hung until Redis came back (infra-faults' teardown once ran past vitest's 30 s limit, its
 * worker children left running). Now its waits are bounded (STOP_WAIT_MS in all) and the rest
 * of the stop goes on. `fleet sweeper` itself was already bounded by its exit deadline.
 *
 * And once stopped, nothing of it keeps the program that embeds it alive. Before, the webhook
 * Worker's lock renewal (which only its close, never ending, would stop) and the stop's own
 * look at the pass under way (a 10 ms poll; the pass never ends) kept such a program alive
 * for good; and when the webhook Worker's blocking connection had not connected before Redis
 * went (startSweeper does not wait for it: a program stopped soon after its start, as in a
 * slow CI, may meet it so), that connection went on reconnecting too. A first fix (eeec428, reverted) dropped it through
 * BullMQ's `disconnect()`, which first awaits that connection's first connect: its stop never
 * returned in such a program (shown by the second case here: `stop not returned`).
 */
import { afterAll, describe, expect, it } from "vitest";
import { QUEUES } from "../src/shared/queues.js";
import { afterStop, type Embedding, killEmbeddings, startEmbedding } from "./support/embedding-program.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { startRedis, stopRedis } from "./support/private-redis.js";
import { startPrivateRedisFleet } from "./support/private-redis-fleet.js";
import { startTcpProxy, type TcpProxy } from "./support/tcp-proxy.js";

const FIXTURE = "test/fixtures/embedded-sweeper.ts";

describe("a sweeper stopped while Redis is away", () => {
  let fleet: FleetEnv | undefined;
  let port = 0;
  const embedding: Embedding[] = [];
  const fleets: FleetEnv[] = [];
  let proxy: TcpProxy | undefined;
  afterAll(async () => {
    await killEmbeddings(embedding);
    // The fleets' own close talks to Redis: it is started again for it.
    if (!fleet) return;
    const back = await startRedis(port);
    await Promise.all([fleet, ...fleets].map((each) => each.close()));
    await proxy?.close();
    await stopRedis(back);
  }, 90_000);

  it("ends its stop without waiting for Redis to come back", async () => {
    const started = await startPrivateRedisFleet("sweepaway");
    ({ fleet, port } = started);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await stopRedis(started.redis);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      started.sweeper.stop().then(() => "stopped" as const),
      new Promise<"still waiting">((resolve) => {
        timer = setTimeout(() => resolve("still waiting"), 25_000);
      }),
    ]);
    clearTimeout(timer);
    await started.api.stop();
    expect(outcome).toBe("stopped");
  }, 90_000);

  it("leaves nothing running once stopped: the programs that embed it exit by themselves, its webhook worker connected or never", async () => {
    if (!port) throw new Error("the first case did not start the fleet");
    const redis = await startRedis(port);
    try {
      // One program on Redis itself; one behind a proxy that never answers the webhook
      // Worker's blocking connection, which so never connects before Redis goes. That
      // connection names itself in its handshake (CLIENT SETNAME <prefix>:<base64 of the
      // queue's name>), which ioredis ends with CLIENT SETINFO LIB-NAME.
      const blockingName = Buffer.from(QUEUES.webhooks.name).toString("base64");
      let up = true;
      let held = 0;
      proxy = await startTcpProxy(
        () => (up ? port : null),
        (sent) => {
          if (sent.includes(`:${blockingName}`)) {
            held++;
            return true;
          }
          return sent.includes("LIB-NAME") ? false : undefined;
        },
      );
      const [direct, proxied] = await Promise.all([
        createFleetEnv("sweepawayembed", { redisUrl: `redis://127.0.0.1:${port}` }),
        createFleetEnv("sweepawayheld", { redisUrl: `redis://127.0.0.1:${proxy.port}` }),
      ]);
      fleets.push(direct, proxied);
      const connected = startEmbedding(FIXTURE, direct.env);
      const neverConnected = startEmbedding(FIXTURE, proxied.env);
      embedding.push(connected, neverConnected);
      await waitFor(
        () => connected.out().includes("started") && neverConnected.out().includes("started"),
        40_000,
        "the embedding programs to start",
      );
      // Each blocking connection as said (startSweeper does not wait for it to connect).
      const named = `name=${direct.config.prefix}:${blockingName} `;
      await waitFor(
        async () => String(await direct.redis.client("LIST")).includes(named),
        30_000,
        "the first program's blocking connection to connect",
      );
      await waitFor(() => held > 0, 30_000, "the proxy to hold the second's");
      up = false;
      proxy.cut();
      await stopRedis(redis);
      await new Promise((r) => setTimeout(r, 1_000));
      const outcomes = await Promise.all([afterStop(connected), afterStop(neverConnected)]);
      expect(outcomes).toEqual([
        { ended: "exited", out: "started\nstopped\n" },
        { ended: "exited", out: "started\nstopped\n" },
      ]);
    } finally {
      await stopRedis(redis);
    }
  }, 90_000);
});
