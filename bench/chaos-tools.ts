/**
 * The chaos run's own tool, loaded by its workers (`fleet worker --tools bench/chaos-tools.ts`):
 * `chaos_mark {line}` records that it started, and when, before anything else — in the same
 * synchronous stretch as the worker's last ownership check — so the checks know exactly
 * when each call started (a built-in tool's file shows only when its write landed, which a
 * freeze in the middle of the tool can delay). Each start is one line
 * `<label> <callId> <ms since epoch>` in `$CHAOS_MARK_DIR/<label>.marks`.
 */
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { defineTool } from "../src/worker/tools/registry.js";

const markDir = process.env.CHAOS_MARK_DIR;

export default [
  defineTool({
    name: "chaos_mark",
    description: "Record that this call started (chaos runs only).",
    parameters: { type: "object", properties: { line: { type: "string" } }, required: ["line"] },
    schema: z.object({ line: z.string().regex(/^[a-z0-9]+ [a-z0-9_]+$/) }),
    async run({ line }) {
      if (!markDir) throw new Error("CHAOS_MARK_DIR is not set");
      appendFileSync(join(markDir, `${line.split(" ")[0]}.marks`), `${line} ${Date.now()}\n`);
      return `marked ${line}`;
    },
  }),
];
