/** The events of a `text/event-stream` answer (the client's `events()`; tests read raw streams with it too). */
import { textLines } from "./text-lines.js";

/** Server-Sent Events as they arrive: `id`, `event` and the joined `data` lines of each. */
export async function* parseSse(
  body: AsyncIterable<Uint8Array>,
): AsyncGenerator<{ id?: string; type?: string; data?: string }> {
  let event: { id?: string; type?: string; data?: string } = {};
  for await (const line of textLines(body)) {
    if (line === "") {
      if (event.data !== undefined || event.type !== undefined) yield event;
      event = {};
    } else if (!line.startsWith(":")) {
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") event.id = value;
      else if (field === "event") event.type = value;
      else if (field === "data") event.data = event.data === undefined ? value : `${event.data}\n${value}`;
    }
  }
}
