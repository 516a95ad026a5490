/**
 * ScriptCall (src/shared/script-call.ts) sends a script call's bytes from one Buffer: they are
 * the bytes ioredis's own Command would send, and the call behaves as a `defineCommand`
 * script does (EVAL first on a connection, EVALSHA after, EVAL again after NOSCRIPT).
 */
import { Command } from "ioredis";
import { describe, expect, it } from "vitest";
import { commandBytes, ScriptCall } from "../src/shared/script-call.js";
import { commandCalls, ownRedisForFile } from "./support/private-redis.js";

const ECHO = "return {KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], #ARGV}";

describe("commandBytes", () => {
  it("writes the bytes ioredis's Command writes, for text of every width, numbers and empty strings", () => {
    const args = [
      "{t}:events:a",
      "{t}:seq:a",
      0,
      42,
      1_000_000,
      1.5,
      -3,
      "",
      '{"type":"MESSAGE","text":"plain"}',
      "é and ü, two bytes",
      "日本語, three",
      "😀 four, and a lone \ud800 surrogate",
      "x".repeat(5_000),
    ];
    for (const [name, first] of [
      ["evalsha", "0123456789abcdef0123456789abcdef01234567"],
      ["eval", `${ECHO} -- é`],
    ] as const) {
      const ours = commandBytes(name, first, 2, args);
      const theirs = new Command(name, [first, 2, ...args]).toWritable({});
      expect(ours.equals(Buffer.from(theirs))).toBe(true);
    }
  });
});

describe("ScriptCall", () => {
  const own = ownRedisForFile();

  it("evaluates the script once per connection, then calls it by sha, and loads it again after NOSCRIPT", async () => {
    const redis = own.redis;
    const script = new ScriptCall(ECHO);
    const args = ["k1", "k2", "é", 7, "", '{"a":1}', "😀"];
    const expected = ["k1", "k2", "é", "7", "", '{"a":1}', "😀", 5];
    await redis.config("RESETSTAT");

    expect(await script.call(redis, 2, args)).toEqual(expected);
    expect(await commandCalls(redis)).toMatchObject({ eval: 1 });
    expect(await script.call(redis, 2, args)).toEqual(expected);
    const second = await commandCalls(redis);
    expect(second).toMatchObject({ eval: 1, evalsha: 1 });

    await redis.script("FLUSH");
    expect(await script.call(redis, 2, args)).toEqual(expected);
    expect(await commandCalls(redis)).toMatchObject({ eval: 2 });
    expect(await script.call(redis, 2, args)).toEqual(expected);
    expect(await commandCalls(redis)).toMatchObject({ eval: 2 });
  });

  it("rejects with Redis's error when the script fails", async () => {
    const script = new ScriptCall("return redis.error_reply('BAD no such thing')");
    await expect(script.call(own.redis, 0, [])).rejects.toThrow("BAD no such thing");
  });
});
