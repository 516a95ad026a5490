/**
 * A process that replays a long history into a session's event stream (EventWriter, in
 * chunks), for a test to SIGKILL between two chunks. Arguments: REDIS_URL PREFIX SESSION_ID
 * MESSAGES BYTES (the size of each message's text) [CHUNK, the EventWriter's chunk limit as
 * JSON `{bytes, entries}`; WRITE_CHUNK when absent]. Prints "writing" before it starts.
 */
import { Redis } from "ioredis";
import { EventWriter, WRITE_CHUNK } from "../../src/shared/event-writer.js";
import { replayHistory } from "./replay-history.js";

const [url, prefix, sessionId, count, bytes, chunk] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string,
  string | undefined,
];
const redis = new Redis(url);
const writer = new EventWriter(
  redis,
  prefix,
  { maxEvents: 1_000_000, maxAgeMs: 600_000 },
  undefined,
  true,
  0,
  {},
  chunk ? (JSON.parse(chunk) as typeof WRITE_CHUNK) : WRITE_CHUNK,
);
const messages = replayHistory(Number(count), Number(bytes));
process.stdout.write("writing\n");
const result = await writer.write(sessionId, messages, [
  { type: "RUN_COMPLETED", runId: "r1", outcome: "completed" },
]);
process.stdout.write(`${JSON.stringify({ ok: result.ok })}\n`);
await redis.quit();
