/**
 * The client's readers of streamed bodies (Server-Sent Events, NDJSON results): a very large
 * event arrives whole from many chunks, and `\r\n` split across two chunks is one line end
 * (an event's `id` was lost, so a reconnect repeated it). How long a 20 MB event takes (about
 * 15 s before, when each chunk searched the whole buffer again; 0.3–0.5 s now) is a figure,
 * not asserted here.
 */
import { describe, expect, it } from "vitest";
import { parseSse } from "../src/producer/client.js";
import { textLines } from "../src/producer/text-lines.js";

describe("the client's line readers", () => {
  it("reads a 20 MB event from 320 chunks, whole", async () => {
    const payload = `id: 7\nevent: MESSAGE\ndata: {"x":"${"a".repeat(20 * 1024 * 1024)}"}\n\n`;
    const bytes = Buffer.from(payload);
    async function* chunks() {
      for (let i = 0; i < bytes.length; i += 65_536) yield bytes.subarray(i, i + 65_536);
    }
    const events = [];
    for await (const event of parseSse(chunks())) events.push(event);
    expect(events).toHaveLength(1);
    expect(events[0]?.data?.length).toBe(20 * 1024 * 1024 + 8);
    expect(events[0]).toMatchObject({ id: "7", type: "MESSAGE" });
  }, 60_000);

  it("takes a CRLF split across chunks as one line end", async () => {
    const split = ["id: 1\r", "\nevent: A\r\ndata: {}\r", "\n\r", "\n"].map((text) => Buffer.from(text));
    async function* crlf() {
      yield* split;
    }
    const parsed = [];
    for await (const event of parseSse(crlf())) parsed.push(event);
    expect(parsed).toEqual([{ id: "1", type: "A", data: "{}" }]);
  });

  it("yields NDJSON's last line without a line end", async () => {
    async function* body() {
      yield Buffer.from('{"a":1}\n{"b"');
      yield Buffer.from(":2}");
    }
    const lines = [];
    for await (const line of textLines(body())) lines.push(line);
    expect(lines).toEqual(['{"a":1}', '{"b":2}']);
  });
});
