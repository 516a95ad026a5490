/**
 * A text/event-stream body read into the fleet's events as it arrives (live.ts): `id:`,
 * `event:`, `data:` lines, a blank line ends an event, `:` lines are comments; a line ends at
 * `\r\n`, `\n` or `\r`, also a `\r\n` split across two chunks, split by the client's own
 * splitter (src/shared/line-splitter.ts): each chunk is searched once. The page
 * parsed `buffer + chunk` whole again at every chunk, so an event of n bytes that came in many
 * chunks (a large tool result, a slow connection) was scanned from its start at each: O(n²).
 *
 * An event without `data:`, or whose data is not JSON, is not one of the fleet's: skipped.
 */

import { lineSplitter } from "../../src/shared/line-splitter.js";

/** An event of the stream (contracts §7): its id, its type and its JSON data. */
export type FleetEvent = {
  id: string;
  type: string;
  data: { sessionId?: string; type?: string; runId?: string; [field: string]: unknown };
};

export type EventParser = {
  /** The next decoded text of the body. */
  push(text: string): void;
  /** Characters searched so far (each once): the parser's work, for tests. */
  scanned(): number;
};

export function eventParser(emit: (event: FleetEvent) => void): EventParser {
  const lines = lineSplitter();
  let scanned = 0;
  let id = "";
  let type = "message";
  let data: string[] = [];

  const line = (text: string) => {
    if (text === "") {
      if (data.length > 0) {
        try {
          emit({ id, type, data: JSON.parse(data.join("\n")) });
        } catch {
          // Not JSON: not one of the fleet's events; skipped.
        }
      }
      id = "";
      type = "message";
      data = [];
      return;
    }
    if (text.startsWith(":")) return;
    const colon = text.indexOf(":");
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") id = value;
    else if (field === "event") type = value;
    else if (field === "data") data.push(value);
  };

  return {
    push(text) {
      for (const whole of lines.push(text)) line(whole);
      scanned += text.length;
    },
    scanned: () => scanned,
  };
}
