import { defineConfig } from "vitest/config";
import SlowFirstSequencer from "./test/support/slow-first.js";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Cluster-only files: `npm run test:cluster` (vitest.cluster.config.ts).
    exclude: ["test/cluster/**", "**/node_modules/**"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration files each get their own database and FLEET_PREFIX, so files may run in
    // parallel. Three at a time on a 2-core machine: with two, the machine was 61 % busy on
    // average (much of a file's time is waiting: child processes, lease TTLs, backoffs) and
    // the run took 674 s; with three, 89 % busy and 522 s, all 1,444 tests passing (quiet
    // machine, 5 December).
    maxWorkers: 3,
    pool: "forks",
    // Each fork imports the sources once, not once per file (139 files: 129 s of imports,
    // 648 s in all, against 13 s and 552 s). Files share no module state they change: none
    // mocks a module, and the few that set an environment variable, a spy or fake timers
    // restore them.
    isolate: false,
    // One migrated database for the run; each file's fleet gets a copy of it.
    globalSetup: ["test/support/template-database.ts"],
    // A test process runs file after file (isolate: false): while one fleet runs, the next
    // one's copy is made (test/support/fleet-env.ts).
    env: { TEST_SPARE_COPY: "1" },
    // The slowest files start first (test/support/slow-first.ts), also on a fresh checkout.
    sequence: { sequencer: SlowFirstSequencer },
  },
});
