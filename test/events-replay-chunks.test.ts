/**
 * A whole history replayed into an event stream (after a history import, or once the stream
 * expired) goes to Redis in bounded chunks, not in one script call: at 10,000 messages of
 * 1 KB one call carried 14.5 MB and held Redis for about 50 ms, every other client waiting.
 * On a Redis of this file's own (SLOWLOG records every call): no call carries more than a
 * chunk; a reader reading while the replay goes gets every MESSAGE once, in seq order; and
 * a writer process SIGKILLed between two chunks leaves a stream the next writer completes,
 * every seq once.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chunkStarts, EventWriter } from "../src/shared/event-writer.js";
import { eventStreamKey } from "../src/shared/events.js";
import { freePort, startRedis, stopRedis } from "./support/private-redis.js";
import { replayHistory } from "./support/replay-history.js";

const PREFIX = "{replay}";
const RETENTION = { maxEvents: 1_000_000, maxAgeMs: 600_000 };
/**
 * A chunk limit an eighth of WRITE_CHUNK's (bytes and entries), so that a tenth of the data
 * makes about as many chunks as the full-size replay makes with the real limits: the same
 * chunking proved on 1,000 and 5,000 messages instead of 10,000 and 50,000.
 */
const CHUNK = { bytes: 16 * 1024, entries: 32 };

/** Every MESSAGE seq of a stream, in its order, and the types of its other entries. */
async function streamOf(redis: Redis, sessionId: string): Promise<{ seqs: number[]; others: string[] }> {
  const rows = (await redis.xrange(eventStreamKey(PREFIX, sessionId), "-", "+")) as [string, string[]][];
  const seqs: number[] = [];
  const others: string[] = [];
  for (const [, fields] of rows) {
    const data = JSON.parse(fields[3]!) as { type: string; message?: { seq: number } };
    if (data.type === "MESSAGE") seqs.push(data.message!.seq);
    else others.push(data.type);
  }
  return { seqs, others };
}

const upTo = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

describe("replaying a history into an event stream", () => {
  let server: ChildProcess;
  let url: string;
  let redis: Redis;

  beforeAll(async () => {
    const port = await freePort();
    server = await startRedis(port, ["--slowlog-log-slower-than", "0", "--slowlog-max-len", "100000"]);
    url = `redis://127.0.0.1:${port}`;
    redis = new Redis(url);
  }, 30_000);
  afterAll(async () => {
    await redis?.quit();
    if (server) await stopRedis(server);
  });

  it("cuts a write into chunks of bounded bytes and entries, in order", () => {
    expect(chunkStarts([])).toEqual([]);
    expect(chunkStarts([10, 10, 10], { bytes: 25, entries: 10 })).toEqual([0, 2]);
    expect(chunkStarts([10, 10, 10, 10, 10], { bytes: 1_000, entries: 2 })).toEqual([0, 2, 4]);
    // An entry heavier than a chunk goes alone.
    expect(chunkStarts([5, 100, 5], { bytes: 50, entries: 10 })).toEqual([0, 1, 2]);
  });

  it("writes 1,000 messages of 1 KB in bounded calls; a reader meanwhile gets each once, in order", async () => {
    const writer = new EventWriter(redis, PREFIX, RETENTION, undefined, true, 0, {}, CHUNK);
    const sessionId = "s-10k";
    await redis.slowlog("RESET");
    // A reader follows the stream from its start while the replay goes on.
    const seen: number[] = [];
    let done = false;
    const reading = (async () => {
      let after = "0-0";
      while (!done) {
        const rows = (await redis.xrange(
          eventStreamKey(PREFIX, sessionId),
          `(${after}`,
          "+",
          "COUNT",
          500,
        )) as [string, string[]][];
        for (const [id, fields] of rows) {
          after = id;
          const data = JSON.parse(fields[3]!) as { type: string; message?: { seq: number } };
          if (data.type === "MESSAGE") seen.push(data.message!.seq);
          else done = data.type === "RUN_COMPLETED";
        }
        if (rows.length === 0) await new Promise((r) => setTimeout(r, 1));
      }
    })();
    const result = await writer.write(sessionId, replayHistory(1_000, 1_000), [
      { type: "RUN_COMPLETED", runId: "r1", outcome: "completed" },
    ]);
    expect(result.ok).toBe(true);
    await reading;
    expect(seen).toEqual(upTo(1_000));
    expect(await streamOf(redis, sessionId)).toEqual({ seqs: upTo(1_000), others: ["RUN_COMPLETED"] });

    // Every script call: how many arguments it carried (SLOWLOG keeps 32, then says how many
    // more) and how long it held Redis.
    const log = (await redis.slowlog("GET", 100_000)) as [number, number, number, string[]][];
    const calls = log
      .filter(([, , , args]) => /^eval/i.test(args[0] ?? ""))
      .map(([, , micros, args]) => {
        const more = /^\.\.\. \((\d+) more arguments\)$/.exec(args.at(-1) ?? "");
        return { micros, args: more ? args.length - 1 + Number(more[1]) : args.length };
      });
    const longest = Math.max(...calls.map((c) => c.micros));
    console.log(
      `replay of 1,000 × 1 KB: ${calls.length} script calls, at most ${Math.max(...calls.map((c) => c.args))} arguments, the longest ${longest} µs`,
    );
    expect(calls.length).toBeGreaterThanOrEqual(Math.ceil((1_000 * 1_000) / CHUNK.bytes));
    // A chunk's entries take 3 arguments each, and a call has 10 more (command, sha, keys, header).
    for (const call of calls) expect(call.args).toBeLessThanOrEqual(3 * CHUNK.entries + 10);
  }, 60_000);

  it("a writer SIGKILLed between two chunks leaves a stream the next writer completes, each seq once", async () => {
    const sessionId = "s-killed";
    const seqKey = `${PREFIX}:events-seq:${sessionId}`;
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        join(import.meta.dirname, "support/replay-writer.ts"),
        url,
        PREFIX,
        sessionId,
        "5000",
        "1000",
        JSON.stringify(CHUNK),
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    // Once a few chunks are in, writes are held (CLIENT PAUSE WRITE holds script calls) and the
    // writer is killed while its next chunk waits: that chunk never runs.
    for (;;) {
      const seq = Number((await redis.hget(seqKey, "seq")) ?? 0);
      if (seq >= 200) break;
      if (child.exitCode !== null) throw new Error("the writer ended before it was killed");
      await new Promise((r) => setTimeout(r, 1));
    }
    await redis.call("CLIENT", "PAUSE", "10000", "WRITE");
    child.kill("SIGKILL");
    await exited;
    await redis.call("CLIENT", "UNPAUSE");
    const left = await streamOf(redis, sessionId);
    expect(left.seqs.length).toBeGreaterThanOrEqual(200);
    expect(left.seqs.length).toBeLessThan(5_000);
    expect(left.seqs).toEqual(upTo(left.seqs.length));
    expect(left.others).toEqual([]);
    expect(Number(await redis.hget(seqKey, "seq"))).toBe(left.seqs.length);

    // The next writer sends the whole history again, as one that knows nothing would.
    const writer = new EventWriter(redis, PREFIX, RETENTION, undefined, true, 0, {}, CHUNK);
    const result = await writer.write(sessionId, replayHistory(5_000, 1_000), [
      { type: "RUN_COMPLETED", runId: "r1", outcome: "completed" },
    ]);
    expect(result.ok).toBe(true);
    if (result.ok) expect(result.written).toBe(5_000 - left.seqs.length + 1);
    expect(await streamOf(redis, sessionId)).toEqual({ seqs: upTo(5_000), others: ["RUN_COMPLETED"] });
  }, 90_000);
});
