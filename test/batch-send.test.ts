/**
 * How `fleet batch submit` waits between tries of one part (src/commands/batch-send.ts),
 * counted through an injected sleep rather than timed: a 5xx's Retry-After is honoured
 * within [0.1 s, 8 s]; without one (no answer, a 502 of a proxy) the exponential backoff
 * stays. And what the client reads of a Retry-After (src/producer/client-errors.ts).
 */
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { LIMIT_RETRY_CAP_MS, PART_TRIES, partRetryDelayMs, sendPart } from "../src/commands/batch-send.js";
import { FleetApiError } from "../src/producer/client.js";
import { apiError } from "../src/producer/client-errors.js";

const quiet = { stderr: new Writable({ write: (_chunk, _encoding, done) => done() }) };

/** sendPart over a `send` that always fails with `error`: the waits asked for, and the tries. */
async function waitsOf(error: unknown): Promise<{ waits: number[]; tries: number }> {
  const waits: number[] = [];
  let tries = 0;
  const send = async () => {
    tries++;
    throw error;
  };
  await expect(sendPart(send, quiet, async (ms) => void waits.push(ms))).rejects.toBe(error);
  return { waits, tries };
}

const unavailable = (retryAfter?: number) =>
  new FleetApiError(503, "unavailable", "down for a deploy", undefined, undefined, retryAfter);

describe("fleet batch submit: the waits between tries of a part", () => {
  it("without a Retry-After (no answer, a bare 502), backs off 0.5, 1, 2, 4, 8 s over six tries", async () => {
    const backoff = [500, 1_000, 2_000, 4_000, 8_000];
    expect(await waitsOf(new TypeError("fetch failed"))).toEqual({ waits: backoff, tries: PART_TRIES });
    expect(await waitsOf(new FleetApiError(502, "http_error", "bad gateway"))).toEqual({
      waits: backoff,
      tries: PART_TRIES,
    });
  });

  it("a 5xx's Retry-After is honoured, never under 0.1 s nor over the backoff's 8 s cap", async () => {
    expect(await waitsOf(unavailable(0))).toEqual({ waits: [100, 100, 100, 100, 100], tries: PART_TRIES });
    expect((await waitsOf(unavailable(1))).waits).toEqual([1_000, 1_000, 1_000, 1_000, 1_000]);
    expect((await waitsOf(unavailable(3_600))).waits).toEqual([8_000, 8_000, 8_000, 8_000, 8_000]);
    expect(partRetryDelayMs(2, 0.25)).toBe(250);
  });

  it("a 4xx other than a key in use is not sent again, whatever it asks", async () => {
    const refused = new FleetApiError(400, "invalid_request", "bad", undefined, undefined, 0);
    expect(await waitsOf(refused)).toEqual({ waits: [], tries: 1 });
  });

  it("the client keeps a 5xx's Retry-After as sent, 0 too; a 429's is at least 1 s", () => {
    const answer = (status: number, retryAfter?: string) =>
      apiError(
        "POST",
        "/v1/batches",
        new Response(null, { status, headers: retryAfter ? { "retry-after": retryAfter } : {} }),
        undefined,
      ).retryAfter;
    expect(answer(503, "0")).toBe(0);
    expect(answer(503, "1")).toBe(1);
    expect(answer(502, "2")).toBe(2);
    expect(answer(503, "Wed, 21 Oct 2026 07:28:00 GMT")).toBe(1);
    expect(answer(503)).toBeUndefined();
    expect(answer(500)).toBeUndefined();
    expect(answer(429, "0")).toBe(1);
    expect(answer(400, "5")).toBeUndefined();
  });
});

describe("fleet batch submit: a part a tenant limit refuses (429)", () => {
  /** A limit that leaves room after `limitMs` of waiting: the part's tries, and the waits between them. */
  async function whileLimited(limitMs: number, retryAfter: number) {
    const waits: number[] = [];
    let waited = 0;
    let tries = 0;
    const send = async () => {
      tries++;
      if (waited < limitMs)
        throw new FleetApiError(429, "too_many_requests", "no room", undefined, undefined, retryAfter);
      return "sent";
    };
    const sleep = async (ms: number) => {
      waits.push(ms);
      waited += ms;
    };
    expect(await sendPart(send, quiet, sleep)).toBe("sent");
    return { waits, tries };
  }

  it("waits longer at each 429 of one part, never under its Retry-After: a 10-minute limit re-sends an 8 MiB part 23 times, not 121", async () => {
    const partBytes = 8 * 1024 * 1024;
    const { waits, tries } = await whileLimited(10 * 60_000, 5);
    expect(waits.slice(0, 4)).toEqual([5_000, 10_000, 20_000, 30_000]);
    for (const wait of waits) expect(wait).toBeGreaterThanOrEqual(5_000);
    for (const wait of waits) expect(wait).toBeLessThanOrEqual(LIMIT_RETRY_CAP_MS);
    // Every try sends, and the API parses, the whole part: 121 tries (968 MiB) at 5 s each before.
    expect(tries).toBe(23);
    expect((tries * partBytes) / 1024 / 1024).toBe(184);
    // A longer Retry-After (the request rate's) is honoured as it is; a shorter one starts lower.
    expect((await whileLimited(60_000, 45)).waits).toEqual([45_000, 45_000]);
    expect((await whileLimited(60_000, 1)).waits).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 30_000]);
  });
});
