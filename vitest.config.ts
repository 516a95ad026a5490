import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Cluster-only files: `npm run test:cluster` (vitest.cluster.config.ts).
    exclude: ["test/cluster/**", "**/node_modules/**"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration files each get their own database and FLEET_PREFIX, so files may run in
    // parallel; two at a time fits a 2-core machine.
    maxWorkers: 2,
    pool: "forks",
  },
});
