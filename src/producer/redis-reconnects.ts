/**
 * Times the API's Redis connection came back (event-stream.ts): Redis may have lost its data
 * meanwhile, so a reader whose place may have gone with it ends, and its reconnect gets 410.
 */
import type { Redis } from "ioredis";
import { isCluster } from "../shared/redis.js";

export class RedisReconnects {
  /** Times the connection (or, on a cluster, one node's) came back since this was made. */
  reconnects = 0;

  constructor(redis: Redis) {
    let connected = redis.status === "ready";
    redis.on("ready", () => {
      if (connected) this.reconnects++;
      connected = true;
    });
    // On a cluster, one node may lose its data while the others stay up: the cluster stays
    // ready, and its connection to that node ends and is made anew (ioredis adds the node again).
    if (isCluster(redis)) {
      const nodes = new Set<string>();
      redis.on("+node", (node: Redis) => {
        const address = `${node.options.host}:${node.options.port}`;
        if (nodes.has(address)) this.reconnects++;
        nodes.add(address);
      });
    }
  }
}
