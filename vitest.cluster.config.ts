/**
 * `npm run test:cluster`: the crash, frozen-worker, sweeper-concurrency and demo tests again,
 * unchanged, against a real 3-master Redis Cluster the run starts (test/support/redis-cluster.ts)
 * instead of the single Redis of `npm test`; and test/cluster/ (only here), which starts a
 * cluster of its own.
 */
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: [
      "test/crash-recovery.test.ts",
      "test/frozen-worker.test.ts",
      "test/sweeper-concurrency.test.ts",
      "test/demo.test.ts",
      "test/cluster/**/*.test.ts",
    ],
    globalSetup: ["test/support/redis-cluster.ts", "test/support/template-database.ts"],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    maxWorkers: 2,
    pool: "forks",
  },
});
