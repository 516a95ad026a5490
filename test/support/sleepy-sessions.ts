/** Sessions that are inside a tool for a while: the state in which crash tests kill workers. */
import type { FleetClient } from "../../src/producer/client.js";
import type { Database } from "../../src/shared/db/client.js";
import { waitFor } from "./fleet-env.js";

/** The exact result text of an interrupted call (resume-semantics.md §3), written out. */
export const INTERRUPTED_TEXT =
  "The process stopped while this tool was running, so it may or may not have completed, and whatever it changes may or may not have happened. Check the current state before running it again.";

/**
 * Starts `count` sessions whose first step appends "ran" to `<file>-<i>.txt` (call id `log`)
 * and then sleeps `sleepMs` (call id `nap`); the next step answers `done`.
 */
export async function startSleepySessions(
  client: FleetClient,
  count: number,
  options: { file: string; sleepMs: number },
): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const { id } = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            {
              toolCalls: [
                {
                  id: "log",
                  name: "append_file",
                  arguments: { path: `${options.file}-${i}.txt`, line: "ran" },
                },
                { id: "nap", name: "sleep", arguments: { ms: options.sleepMs } },
              ],
            },
            { text: "done" },
          ],
        },
        tools: ["append_file", "sleep"],
      },
    });
    ids.push(id);
    await client.send(id, `session ${i}`);
  }
  return ids;
}

/** Waits until `count` sessions are inside the sleep: each one's `log` result committed. */
export async function untilInsideTheSleep({ sql }: Database, count: number): Promise<void> {
  await waitFor(
    async () => {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from messages where role = 'tool' and tool_call_id = 'log'`;
      return row!.n === count;
    },
    20_000,
    `${count} sessions inside the sleep tool`,
  );
}

/** Waits until `count` sessions have completed (their tail). */
export async function untilCompleted({ sql }: Database, count: number): Promise<void> {
  await waitFor(
    async () => {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from sessions where tail_state = 'completed'`;
      return row!.n === count;
    },
    30_000,
    `${count} sessions completed`,
  );
}
