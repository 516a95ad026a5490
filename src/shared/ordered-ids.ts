/**
 * Session ids that sort in the order they are made: UUIDv7 (RFC 9562), whose first 48 bits
 * are the time in ms and whose last 74 (less version and variant) are random, so a text
 * comparison of two ids (Postgres's `order by id`: any collation, the hyphens fall at the
 * same places) puts the earlier first. A batch's results come in session-id order and are
 * read on with `?after=SESSION_ID`: with random ids, a session appended to an open batch after
 * a read began could sort before its `after` and be missed. An append takes the batch's row
 * first and makes its ids after that, greater than the batch's greatest (`after` here), so
 * another process's clock behind this one's, or two ids in one ms, still sort in commit order.
 */
import { randomBytes } from "node:crypto";

/** The 74 bits after the time, version and variant aside. */
const TAIL_BITS = 74n;
const TAIL_MAX = (1n << TAIL_BITS) - 1n;
const RAND_B_MASK = (1n << 62n) - 1n;

export type RandomBytes = (size: number) => Buffer;

/**
 * Random bytes taken from one `random` call for a whole batch of ids, in the order the ids use
 * them: a batch of 50 made 50 calls, each its own Buffer (the API's id making was ~3 % of its
 * CPU per session in `npm run bench`). Asked again, for the rest, only when it runs out (tails
 * that overflow into the next ms take more than planned).
 */
class RandomPool {
  private bytes: Buffer;
  private at = 0;

  constructor(
    private readonly random: RandomBytes,
    size: number,
  ) {
    this.bytes = random(size);
  }

  /** The next `bits` random bits (at most 80): the next ⌈bits / 8⌉ bytes, big-endian, masked. */
  bits(bits: number): bigint {
    const size = Math.ceil(bits / 8);
    if (this.at + size > this.bytes.length) {
      this.bytes = this.random(Math.max(size, 64));
      this.at = 0;
    }
    const at = this.at;
    this.at += size;
    // Up to 6 bytes read as one number, the rest (at most 4) as another before it.
    const low = Math.min(size, 6);
    let value = BigInt(this.bytes.readUIntBE(at + size - low, low));
    if (size > low) value |= BigInt(this.bytes.readUIntBE(at, size - low)) << BigInt(8 * low);
    return value & ((1n << BigInt(bits)) - 1n);
  }
}

/** Bytes a fresh tail (73 bits) takes from the pool; a step (48 bits) takes 6. */
const FRESH_BYTES = 10;
const STEP_BYTES = 6;

function format(ms: number, tail: bigint): string {
  const hex =
    ms.toString(16).padStart(12, "0") +
    (0x7000n | (tail >> 62n)).toString(16) +
    ((2n << 62n) | (tail & RAND_B_MASK)).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * Where ids after `after` start: its time when that is not before `nowMs` (a clock behind, the
 * same ms), with its tail when it is a UUIDv7 (the next ones count up from it).
 */
function startAfter(after: string | null, nowMs: number): { ms: number; tail: bigint | null } {
  const hex = after?.replaceAll("-", "").toLowerCase() ?? "";
  if (!/^[0-9a-f]{32}$/.test(hex)) return { ms: nowMs, tail: null };
  const afterMs = Number.parseInt(hex.slice(0, 12), 16);
  if (afterMs < nowMs) return { ms: nowMs, tail: null };
  const version = Number.parseInt(hex[12]!, 16);
  // A version above 7 sorts after any of ours with the same time: the next ms, then.
  if (version > 7) return { ms: afterMs + 1, tail: null };
  if (version < 7) return { ms: afterMs, tail: null };
  const tail = (BigInt(`0x${hex.slice(13, 16)}`) << 62n) | (BigInt(`0x${hex.slice(16)}`) & RAND_B_MASK);
  return { ms: afterMs, tail };
}

/**
 * `count` UUIDv7 ids in ascending order, each greater (as text) than `after` when it is a UUID:
 * made at `nowMs`, or at `after`'s time when that is not earlier, counting up from its tail by
 * 1 + a random 48-bit step (pure but for `random`).
 */
export function orderedIds(
  count: number,
  nowMs: number,
  after: string | null = null,
  random: RandomBytes = randomBytes,
): string[] {
  let { ms, tail } = startAfter(after, Math.floor(nowMs));
  const ids: string[] = [];
  if (count <= 0) return ids;
  const pool = new RandomPool(random, (tail === null ? FRESH_BYTES : STEP_BYTES) + (count - 1) * STEP_BYTES);
  for (let i = 0; i < count; i++) {
    // A fresh tail leaves half its range for the ids that count up from it.
    tail = tail === null ? pool.bits(73) : tail + 1n + pool.bits(48);
    if (tail > TAIL_MAX) {
      ms += 1;
      tail = pool.bits(73);
    }
    ids.push(format(ms, tail));
  }
  return ids;
}
