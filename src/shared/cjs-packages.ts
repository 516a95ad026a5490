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
 * Code that needs one of their values takes it from here, never from `import { … } from
 * "bullmq"` (test/role-imports.test.ts holds the roles to that).
 */
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

export const bullmq: typeof import("bullmq") = require("bullmq");
export const ioredis: typeof import("ioredis") = require("ioredis");
