/**
 * A tool whose zod schema checks its argument asynchronously (tool-async-schema,
 * tool-schema-cancel): `notify { to }` waits for `check(to)`, accepts an address with an `@`,
 * and records each `to` it ran for in `sent`.
 */
import { z } from "zod";
import { defineTool } from "../../src/worker/tools/registry.js";

export function notifyTool(check: (to: string) => Promise<void>, sent: string[]) {
  return defineTool({
    name: "notify",
    description: "Notifies someone.",
    parameters: { type: "object", properties: { to: { type: "string" } }, required: ["to"] },
    schema: z.object({ to: z.string() }).refine(async ({ to }) => {
      await check(to);
      return to.includes("@");
    }, "to: not a known address"),
    async run({ to }) {
      sent.push(to);
      return `notified ${to}`;
    },
  });
}
