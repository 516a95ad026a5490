/**
 * Writing a batch's events (`SESSION_ENDED`, `BATCH_COMPLETED`) to its own stream, each once
 * whichever API process writes it: one Lua script adds the entries the done set has not seen.
 */
import type { Redis } from "ioredis";
import type { EventsCounter } from "../shared/event-writer.js";
import { type EventRetention, eventsNotifyChannel } from "../shared/events.js";
import type { BatchEventWrite } from "./batch-event-sync.js";
import { batchStreamKeys } from "./batch-stream-check.js";

/**
 * KEYS: stream, done set, fingerprints (batch-stream-check.ts). ARGV: maxEvents (unused),
 * maxAgeMs, channel, member, then (member, fingerprint or '', type, data)... A batch's stream
 * is not trimmed by count: the done set lets each session in once (and BATCH_COMPLETED once),
 * so it is bounded by the batch's size, and trimming it to the per-session FLEET_EVENTS_MAX
 * would drop SESSION_ENDED events of a larger batch before a reader from its start sees them.
 * It expires as a whole, maxAgeMs after its last write.
 */
const BATCH_APPEND_SCRIPT = `
local written = 0
for i = 5, #ARGV, 4 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    redis.call('XADD', KEYS[1], '*', 'type', ARGV[i + 2], 'data', ARGV[i + 3])
    if ARGV[i + 1] ~= '' then redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
    written = written + 1
  end
end
if written > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIRE', KEYS[3], ARGV[2]) end
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return written
`;

type RedisWithBatchAppend = {
  fleetBatchEventsAppend(
    stream: string,
    done: string,
    fps: string,
    ...args: (string | number)[]
  ): Promise<number>;
};

/** Defines the script's command on the connection, once. */
export function defineBatchEventsAppend(connection: Redis): void {
  const redis = connection as unknown as Partial<RedisWithBatchAppend>;
  if (!redis.fleetBatchEventsAppend)
    connection.defineCommand("fleetBatchEventsAppend", { numberOfKeys: 3, lua: BATCH_APPEND_SCRIPT });
}

/** Writes batch events to the batch's stream, each once whoever writes it (the done set). */
export function batchEventWriter(
  deps: {
    redis: Redis;
    prefix: string;
    retention: EventRetention;
    metrics: { eventsWritten?: EventsCounter };
  },
  batchId: string,
): BatchEventWrite {
  const { stream: key, done, fingerprints } = batchStreamKeys(deps.prefix, batchId);
  return async (entries) => {
    if (entries.length === 0) return;
    const args: (string | number)[] = [
      deps.retention.maxEvents,
      deps.retention.maxAgeMs,
      eventsNotifyChannel(deps.prefix),
      key,
    ];
    for (const [member, type, data, fp] of entries) args.push(member, fp ?? "", type, JSON.stringify(data));
    const written = await (deps.redis as unknown as RedisWithBatchAppend).fleetBatchEventsAppend(
      key,
      done,
      fingerprints,
      ...args,
    );
    if (written > 0) deps.metrics.eventsWritten?.inc({ type: entries[0]![1] }, written);
  };
}
