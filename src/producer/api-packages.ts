/**
 * The API's CommonJS packages (Fastify and its plugins, bull-board), loaded with `require()`
 * rather than `import`, as src/shared/cjs-packages.ts loads BullMQ and ioredis and for the
 * same reason: Node 20's `import` of a CommonJS package runs cjs-module-lexer over its entry
 * and every file that re-exports, before compiling them. Importing these six cost ~430–510 ms
 * of CPU, requiring them ~330–350 ms, at each start of a `fleet api` (and each test that runs
 * one). A module of its own: a worker or a sweeper, which load cjs-packages.ts, never load
 * these. `require()` gives what a default import gave (a CommonJS package's module.exports).
 */
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);

export const fastify: typeof import("fastify") = require("fastify");
export const fastifySwagger: typeof import("@fastify/swagger") = require("@fastify/swagger");
export const fastifyStatic: typeof import("@fastify/static") = require("@fastify/static");
export const bullBoard: typeof import("@bull-board/api") = require("@bull-board/api");
export const bullBoardBullMQ: typeof import("@bull-board/api/bullMQAdapter") = require("@bull-board/api/bullMQAdapter");
export const bullBoardFastify: typeof import("@bull-board/fastify") = require("@bull-board/fastify");
