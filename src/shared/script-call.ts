/**
 * ScriptCall: a Lua script called as ioredis's `defineCommand` calls it (EVAL the first time on
 * a connection, EVALSHA after it, EVAL again when Redis answers NOSCRIPT), with the command's
 * bytes written once, into one Buffer.
 *
 * Why: ioredis builds a command as one string, `"$" + length + "\r\n" + argument + "\r\n"`
 * appended argument by argument, which the socket then flattens and encodes again. For the
 * event writes (event-stream-writes.ts: many sessions' entries, each a JSON text, in one call)
 * that was about a tenth of the bytes a worker allocates per session. Here each argument's UTF-8
 * bytes are written straight into the Buffer the socket sends: `bench:scale --gc` at 1,000
 * sessions, 327 → 301 KB allocated per session (median of three alternated pairs). The bytes
 * are those ioredis would send (test/script-call.test.ts compares them), and so is the reply
 * (UTF-8 strings, as defineCommand's). Keys are sent as given: the fleet's connections have no
 * ioredis `keyPrefix` (its FLEET_PREFIX is in every key already).
 */
import { createHash } from "node:crypto";
import type { Command as IoRedisCommand, Redis } from "ioredis";
import { ioredis } from "./cjs-packages.js";

/** One argument of a script call: a string (sent as its UTF-8 bytes) or a number (as its decimal text). */
export type ScriptArg = string | number;

export class ScriptCall {
  readonly sha: string;
  /** The connections (sockets) that have been sent this script's EVAL: EVALSHA works there. */
  private readonly loaded = new WeakSet<object>();

  constructor(readonly lua: string) {
    this.sha = createHash("sha1").update(lua).digest("hex");
  }

  /** Calls the script: `args` starts with its `numKeys` keys, then its arguments. */
  call<T>(redis: Redis, numKeys: number, args: readonly ScriptArg[]): Promise<T> {
    const first = this.send(redis, numKeys, args);
    // A Redis that has lost its scripts (restarted, SCRIPT FLUSH) answers NOSCRIPT: the call
    // goes again, as EVAL on that connection (toWritable forgot it), as ioredis's Script does.
    return first.catch((error: unknown) => {
      if (!(error instanceof Error) || !error.message.includes("NOSCRIPT")) throw error;
      return this.send(redis, numKeys, args);
    }) as Promise<T>;
  }

  private send(redis: Redis, numKeys: number, args: readonly ScriptArg[]): Promise<unknown> {
    const command = new (scriptCommandClass())(this, numKeys, args);
    // `sendCommand` is the Redis's or the Cluster's: a cluster routes by the command's keys.
    return redis.sendCommand(command as unknown as IoRedisCommand) as Promise<unknown>;
  }

  /** The command's bytes for the connection `socket`: EVAL there the first time, else EVALSHA. */
  writable(socket: object, numKeys: number, args: readonly ScriptArg[]): Buffer {
    const first = !this.loaded.has(socket);
    if (first) this.loaded.add(socket);
    return commandBytes(first ? "eval" : "evalsha", first ? this.lua : this.sha, numKeys, args);
  }

  /** Redis answered NOSCRIPT on `socket`: its next call there is an EVAL. */
  forget(socket: object): void {
    this.loaded.delete(socket);
  }
}

type ScriptCommand = IoRedisCommand & { script: ScriptCall };
let ScriptCommandClass:
  | (new (
      script: ScriptCall,
      numKeys: number,
      args: readonly ScriptArg[],
    ) => ScriptCommand)
  | undefined;

/** ioredis's Command with its bytes from `commandBytes`; made at the first call (ioredis is loaded lazily). */
function scriptCommandClass(): NonNullable<typeof ScriptCommandClass> {
  ScriptCommandClass ??= class extends ioredis.Command {
    constructor(
      readonly script: ScriptCall,
      private readonly numKeys: number,
      private readonly callArgs: readonly ScriptArg[],
    ) {
      // The command's own args name its keys (a cluster routes by them, a debug log shows
      // them); the bytes sent are writable()'s.
      super("evalsha", [script.sha, numKeys, ...callArgs.slice(0, numKeys)], { replyEncoding: "utf8" });
    }

    override toWritable(socket: object): Buffer {
      const reject = this.reject;
      this.reject = (error: Error) => {
        if (error.message.includes("NOSCRIPT")) this.script.forget(socket);
        reject.call(this, error);
      };
      return this.script.writable(socket, this.numKeys, this.callArgs);
    }
  };
  return ScriptCommandClass;
}

/** Byte lengths of the arguments being encoded: reused from call to call (encoding is synchronous). */
const lengths: number[] = [];

/**
 * The RESP bytes of `name first numKeys ...args`: `*N\r\n`, then `$LEN\r\nBYTES\r\n` per
 * part, strings as UTF-8, numbers as their decimal text (what ioredis sends: `String(n)`).
 */
export function commandBytes(
  name: string,
  first: string,
  numKeys: number,
  args: readonly ScriptArg[],
): Buffer {
  const parts = args.length + 3;
  const firstBytes = Buffer.byteLength(first);
  let size = 1 + digits(parts) + 2 + part(name.length) + part(firstBytes) + part(textLength(numKeys));
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const length = typeof arg === "string" ? Buffer.byteLength(arg) : textLength(arg);
    lengths[i] = length;
    size += part(length);
  }
  const bytes = Buffer.allocUnsafe(size);
  bytes[0] = 0x2a; // *
  let at = writeDigits(bytes, 1, parts);
  at = writeCrlf(bytes, at);
  at = writePart(bytes, at, name, name.length);
  at = writePart(bytes, at, first, firstBytes);
  at = writePart(bytes, at, numKeys, textLength(numKeys));
  for (let i = 0; i < args.length; i++) at = writePart(bytes, at, args[i]!, lengths[i]!);
  return bytes;
}

/** Bytes of a bulk string of `length` bytes: `$`, its length's digits, CRLF, the bytes, CRLF. */
function part(length: number): number {
  return 1 + digits(length) + 2 + length + 2;
}

/** A whole number from 0 up is written digit by digit; any other number as `String(n)`. */
function isDigits(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0;
}

function textLength(n: number): number {
  return isDigits(n) ? digits(n) : String(n).length;
}

function digits(n: number): number {
  let count = 1;
  while (n >= 10) {
    n = Math.floor(n / 10);
    count++;
  }
  return count;
}

function writeDigits(bytes: Buffer, at: number, n: number): number {
  const end = at + digits(n);
  let i = end;
  do {
    bytes[--i] = 0x30 + (n % 10);
    n = Math.floor(n / 10);
  } while (n > 0);
  return end;
}

function writeCrlf(bytes: Buffer, at: number): number {
  bytes[at] = 0x0d;
  bytes[at + 1] = 0x0a;
  return at + 2;
}

function writePart(bytes: Buffer, at: number, value: ScriptArg, length: number): number {
  bytes[at] = 0x24; // $
  at = writeCrlf(bytes, writeDigits(bytes, at + 1, length));
  if (typeof value === "string") at += bytes.write(value, at, "utf8");
  else if (isDigits(value)) at = writeDigits(bytes, at, value);
  else at += bytes.write(String(value), at, "latin1");
  return writeCrlf(bytes, at);
}
