/**
 * The console's text/event-stream parser (console/src/event-parser.ts): events as they arrive,
 * however the body is cut into chunks, and each character looked at a bounded number of times.
 * The page parsed `buffer + chunk` whole again at every chunk and kept the unfinished rest: an
 * event of n bytes that came in many chunks was scanned from its start at each of them, O(n²)
 * (a 1 MB tool result delivered 16 KB at a time was split 64 times over, a byte at a time a
 * million times). The work is counted (characters scanned), not timed.
 */
import { describe, expect, it } from "vitest";
import { eventParser, type FleetEvent } from "../console/src/event-parser.js";

function parseAll(chunks: string[]): { events: FleetEvent[]; scanned: number } {
  const events: FleetEvent[] = [];
  const parser = eventParser((event) => events.push(event));
  for (const chunk of chunks) parser.push(chunk);
  return { events, scanned: parser.scanned() };
}

/** `text` cut into pieces of `size` characters. */
function pieces(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

describe("the console's event-stream parser", () => {
  it("reads one large event fed a character at a time scanning each character a bounded number of times", () => {
    const text = "x".repeat(50_000);
    const body = `id: 1-0\nevent: MESSAGE_DELTA\ndata: ${JSON.stringify({ type: "MESSAGE_DELTA", text })}\n\n`;
    const { events, scanned } = parseAll(pieces(body, 1));
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ id: "1-0", type: "MESSAGE_DELTA", data: { text } });
    // Linear: a few passes over the body at most (the quadratic parser scanned 1.25·10^9).
    expect(scanned).toBeLessThanOrEqual(4 * body.length);
  });

  it("finds the same events whatever the chunks and line ends (\\n, \\r\\n, \\r, split \\r\\n)", () => {
    const events = [
      { id: "1-0", type: "RUN_STARTED", data: { type: "RUN_STARTED", runId: "r" } },
      { id: "2-0", type: "MESSAGE_DELTA", data: { type: "MESSAGE_DELTA", text: "a\nb" } },
      { id: "3-0", type: "MESSAGE", data: { type: "MESSAGE", message: { content: "é 🙂" } } },
    ];
    for (const end of ["\n", "\r\n", "\r"]) {
      const body =
        `: heartbeat${end}${end}` +
        events
          .map(
            (e) => [`id: ${e.id}`, `event: ${e.type}`, `data: ${JSON.stringify(e.data)}`, ""].join(end) + end,
          )
          .join("") +
        // Not JSON, no data, an unfinished event: none of them is emitted.
        `event: X${end}data: {nope${end}${end}event: Y${end}${end}id: 9-0${end}data: {}`;
      for (const size of [1, 2, 3, 7, 64, body.length]) {
        const { events: got } = parseAll(pieces(body, size));
        expect(got, `line end ${JSON.stringify(end)}, chunks of ${size}`).toEqual(events);
      }
    }
    // Multi-line data is joined with \n; a field without a colon; a value without its space.
    const { events: joined } = parseAll(['data:{"a":\ndata: 1}\nevent\n\n']);
    expect(joined).toEqual([{ id: "", type: "", data: { a: 1 } }]);
  });
});
