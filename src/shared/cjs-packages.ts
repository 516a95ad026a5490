/**
 * BullMQ and ioredis, loaded with `require()` rather than `import`. Both are CommonJS. An
 * `import` of a CommonJS package makes Node 20 read it twice: it compiles it, and before that
 * its cjs-module-lexer parses the entry file for the names to export, following every
 * re-export (`__exportStar(require("./classes"), exports)`) into the files it names. BullMQ's
 * index re-exports all of its ~170 files, ioredis's ~50, so every `fleet worker`, `fleet
 * sweeper` and `fleet api` lexed ~220 files it had compiled anyway: ~0.1 s of CPU per start
 * for BullMQ (`import("bullmq")` ~250 ms of CPU, `require("bullmq")` ~155 ms) and ~45 ms for
 * ioredis. `require()` is the same module instance (Node's one CommonJS cache), so classes
 * and `instanceof` are those of an `import`; the types still come from `import type`.
 *
 * BullMQ's values are read from the files that define them, not from its index: the index
 * also loads its flow producer, sandboxed processors, queue events, relay, Postgres backend
 * and ~45 files of (empty) interfaces and types, none of which the fleet uses: 70 of its 246
 * files, ~35 ms of CPU per start (`require("bullmq")` 171–209 ms, these three 135–146 ms).
 * The index has no side effect they need (it only re-exports); test/cjs-packages.test.ts
 * checks that each value is the one the index exports, so a BullMQ that moves a file fails
 * there, and that loading this module does not load the index.
 *
 * Code that needs one of their values takes it from here, never from `import { … } from
 * "bullmq"` (test/cjs-packages.test.ts holds the code to that).
 */
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

type BullMQ = typeof import("bullmq");
type BullMQValues = Pick<
  BullMQ,
  "Queue" | "Worker" | "PRIORITY_LIMIT" | "DelayedError" | "UnrecoverableError"
>;
const classes = "bullmq/dist/cjs/classes";
let loaded: BullMQValues | undefined;
/** BullMQ's files, required at the first use of one of its values (see `bullmq`). */
function load(): BullMQValues {
  if (!loaded) {
    const { Queue } = require(`${classes}/queue.js`) as Pick<BullMQ, "Queue">;
    const { Worker } = require(`${classes}/worker.js`) as Pick<BullMQ, "Worker">;
    const { PRIORITY_LIMIT } = require(`${classes}/job.js`) as Pick<BullMQ, "PRIORITY_LIMIT">;
    const { DelayedError, UnrecoverableError } = require(`${classes}/errors/index.js`) as Pick<
      BullMQ,
      "DelayedError" | "UnrecoverableError"
    >;
    loaded = { Queue, Worker, PRIORITY_LIMIT, DelayedError, UnrecoverableError };
  }
  return loaded;
}

/**
 * The values of BullMQ the fleet uses, required at the first use of one, not when this module
 * loads: ioredis comes from here too, and a role refused at its start checks (which use
 * ioredis) loads no BullMQ (test/role-imports.test.ts).
 */
export const bullmq: BullMQValues = {
  get Queue() {
    return load().Queue;
  },
  get Worker() {
    return load().Worker;
  },
  get PRIORITY_LIMIT() {
    return load().PRIORITY_LIMIT;
  },
  get DelayedError() {
    return load().DelayedError;
  },
  get UnrecoverableError() {
    return load().UnrecoverableError;
  },
};
type IoRedisValues = Pick<typeof import("ioredis"), "Redis" | "Cluster" | "Command">;
let ioredisLoaded: IoRedisValues | undefined;
/**
 * ioredis's values, required at the first use of one, not when this module loads: config.ts
 * reads REDIS_URL with redis.ts, so every client command (`fleet batch status`, `fleet watch`,
 * `fleet session export`) loaded ioredis and never used it: ~0.2 s of CPU of the ~0.6 s such a
 * command takes (`node -e 'require("ioredis")'` 0.31–0.33 s against 0.12–0.14 s for
 * `node -e 0`, load 27; test/role-imports.test.ts).
 */
export const ioredis: IoRedisValues = {
  get Redis() {
    ioredisLoaded ??= require("ioredis") as IoRedisValues;
    return ioredisLoaded.Redis;
  },
  get Cluster() {
    ioredisLoaded ??= require("ioredis") as IoRedisValues;
    return ioredisLoaded.Cluster;
  },
  get Command() {
    ioredisLoaded ??= require("ioredis") as IoRedisValues;
    return ioredisLoaded.Command;
  },
};
