/** Sessions that are inside a tool for a while: the state in which crash tests kill workers. */
import type { FleetClient } from "../../src/producer/client.js";

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
