/**
 * `npx tsx bench/event-writes.ts [SESSIONS] [CONCURRENCY]`: the worker side of session event
 * writes alone, without the rest of a run: SESSIONS sessions (default 2000), CONCURRENCY at a
 * time (default 200), each writing through a SessionEventLog what a bench:scale session writes
 * (RUN_STARTED, text deltas, the assistant's MESSAGE with TOOL_STARTED, the result's MESSAGE
 * with TOOL_FINISHED, the answer's MESSAGE, RUN_COMPLETED) into a scratch prefix. Prints the
 * process's CPU time; run it with `node --expose-gc --trace-gc-nvp --import tsx` and add up the
 * GC lines (bench/gc-trace.ts) for the bytes allocated per session, or under
 * `valgrind --tool=callgrind` for instructions: counts a busy machine changes little.
 */
import { Redis } from "ioredis";
import { EventWriter } from "../src/shared/event-writer.js";
import type { StoredMessage } from "../src/shared/messages.js";
import { SessionEventLog } from "../src/shared/session-event-log.js";

const SESSIONS = Number(process.argv[2] ?? 2000);
const CONCURRENCY = Number(process.argv[3] ?? 200);
const redis = new Redis(process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379", {
  maxRetriesPerRequest: null,
});
const prefix = `evw${process.pid}`;
const writer = new EventWriter(redis, prefix);

function stored(seq: number, message: object): StoredMessage {
  return { seq, createdAt: new Date(1_700_000_000_000 + seq).toISOString(), ...message } as StoredMessage;
}

async function session(n: number): Promise<void> {
  const sessionId = `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`;
  const runId = `10000000-0000-4000-8000-${String(n).padStart(12, "0")}`;
  const history: StoredMessage[] = [];
  const log = new SessionEventLog(
    writer,
    sessionId,
    history,
    () => runId,
    (e) => console.error(e),
    0,
  );
  history.push(stored(1, { role: "user", content: `task ${n}: look something up and answer` }));
  void log.emit([{ type: "RUN_STARTED", runId, kind: "run", resumeKind: null, trigger: "api" }], 1);
  for (const word of ["Let ", "me ", "look ", "that ", "up."]) log.delta(runId, word);
  history.push(
    stored(2, {
      role: "assistant",
      content: "Let me look that up.",
      toolCalls: [{ id: `call-${n}`, name: "lookup", arguments: { query: `item ${n}` } }],
    }),
  );
  void log.emit();
  void log.emit([{ type: "TOOL_STARTED", runId, toolCallId: `call-${n}`, name: "lookup" }]);
  await log.settled();
  history.push(stored(3, { role: "tool", toolCallId: `call-${n}`, content: `result for item ${n}: 42` }));
  void log.emit(
    [{ type: "TOOL_FINISHED", runId, toolCallId: `call-${n}`, name: "lookup", success: true }],
    3,
  );
  for (const word of ["The ", "answer ", "is ", "42."]) log.delta(runId, word);
  await log.settled();
  history.push(stored(4, { role: "assistant", content: "The answer is 42." }));
  void log.emit();
  await log.emitBounded([{ type: "RUN_COMPLETED", runId, outcome: "completed" }]);
}

async function main(): Promise<void> {
  await redis.ping();
  // Warm-up outside the measured part.
  for (let i = 0; i < 50; i++) await session(SESSIONS + i);
  global.gc?.();
  console.log("MEASURE_START");
  const cpu = process.cpuUsage();
  for (let start = 0; start < SESSIONS; start += CONCURRENCY) {
    const wave: Promise<void>[] = [];
    for (let n = start; n < Math.min(SESSIONS, start + CONCURRENCY); n++) wave.push(session(n));
    await Promise.all(wave);
  }
  const used = process.cpuUsage(cpu);
  global.gc?.();
  console.log("MEASURE_END");
  console.log(`sessions ${SESSIONS}, CPU ${((used.user + used.system) / 1000).toFixed(0)} ms`);
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
    cursor = next;
    if (keys.length > 0) await redis.del(...keys);
  } while (cursor !== "0");
  redis.disconnect();
}

await main();
