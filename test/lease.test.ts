/** The per-session lease on a real Redis (a unique key prefix), and the run-job catalogue. */
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ValidationError } from "../src/shared/errors.js";
import { ownerOf, SessionLease } from "../src/shared/lease.js";
import { parseRunJob, QUEUES } from "../src/shared/queues.js";

const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
const PREFIX = `t-lease-${randomUUID().slice(0, 8)}`;

let redis: Redis;
let lease: SessionLease;

beforeAll(() => {
  redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  lease = new SessionLease(redis, PREFIX, 5_000);
});

afterAll(async () => {
  const keys = await redis.keys(`${PREFIX}:*`);
  if (keys.length > 0) await redis.del(...keys);
  await redis.quit();
});

describe("SessionLease", () => {
  it("gives a token to the first acquirer and null to the second", async () => {
    const session = randomUUID();
    const token = await lease.acquire(session, "w1");
    expect(token).toEqual(expect.any(String));
    expect(await lease.acquire(session, "w2")).toBeNull();
    expect(await lease.holder(session)).toBe(token);
    expect(ownerOf(token!)).toBe("w1");
    expect(lease.key(session)).toBe(`${PREFIX}:lease:${session}`);
    // Another session is independent.
    expect(await lease.acquire(randomUUID(), "w1")).toEqual(expect.any(String));
  });

  it("renews only with the holder's token", async () => {
    const session = randomUUID();
    const token = (await lease.acquire(session, "w1"))!;
    await redis.pexpire(lease.key(session), 1_000);
    expect(await lease.renew(session, "not-the-token")).toBe(false);
    expect(await redis.pttl(lease.key(session))).toBeLessThanOrEqual(1_000);
    const beforeRenew = Date.now();
    expect(await lease.renew(session, token)).toBe(true);
    expect(await lease.lastRenewal(session)).toBeGreaterThanOrEqual(beforeRenew);
    expect(await redis.pttl(lease.key(session))).toBeGreaterThan(1_000);
    expect(await lease.renew(randomUUID(), token)).toBe(false);
  });

  it("hold renews its own key, takes back a gone one, and leaves another holder's alone", async () => {
    const session = randomUUID();
    const token = (await lease.acquire(session, "w1"))!;
    await redis.pexpire(lease.key(session), 1_000);
    expect(await lease.hold(session, token)).toBe("renewed");
    expect(await redis.pttl(lease.key(session))).toBeGreaterThan(1_000);
    await redis.del(lease.key(session)); // expired while Redis was away, or Redis restarted empty
    expect(await lease.hold(session, token)).toBe("retaken");
    expect(await lease.holder(session)).toBe(token);
    expect(await redis.pttl(lease.key(session))).toBeGreaterThan(1_000);
    await redis.set(lease.key(session), "w2/other");
    expect(await lease.hold(session, token)).toBe("lost");
    expect(await lease.holder(session)).toBe("w2/other");
    // The sweeper's seize is SET NX: it fails on a held lease and holds a free one.
    expect(await lease.seize(session, "sweeper")).toBeNull();
    await redis.del(lease.key(session));
    const seized = await lease.seize(session, "sweeper");
    expect(seized).toMatch(/^sweeper\//);
    expect(await lease.hold(session, token)).toBe("lost");
  });

  it("releases only with the holder's token", async () => {
    const session = randomUUID();
    const token = (await lease.acquire(session, "w1"))!;
    expect(await lease.release(session, "not-the-token")).toBe(false);
    expect(await lease.holder(session)).toBe(token);
    expect(await lease.release(session, token)).toBe(true);
    expect(await lease.holder(session)).toBeNull();
    expect(await lease.release(session, token)).toBe(false);
    const next = await lease.acquire(session, "w1");
    expect(next).not.toBeNull();
    expect(next).not.toBe(token);
  });

  it("expires after its ttl and can be taken again; the old token is then useless", async () => {
    const short = new SessionLease(redis, PREFIX, 200);
    const session = randomUUID();
    const old = (await short.acquire(session, "w1"))!;
    expect(await short.acquire(session, "w2")).toBeNull();
    await new Promise((r) => setTimeout(r, 300));
    expect(await short.holder(session)).toBeNull();
    const fresh = await short.acquire(session, "w2");
    expect(fresh).not.toBeNull();
    expect(await short.renew(session, old)).toBe(false);
    expect(await short.release(session, old)).toBe(false);
    expect(await short.holder(session)).toBe(fresh);
  });
});

describe("parseRunJob", () => {
  it("accepts both job names with a valid payload", () => {
    for (const name of ["run", "resume"]) {
      expect(parseRunJob(name, { sessionId: "s", runId: "r" })).toEqual({
        name,
        payload: { sessionId: "s", runId: "r" },
      });
    }
    expect(QUEUES.runs.jobId({ sessionId: "s", runId: "r" })).toBe("run-r");
  });

  it("rejects an unknown job name", () => {
    expect(() => parseRunJob("sweep", { sessionId: "s", runId: "r" })).toThrow(ValidationError);
    try {
      parseRunJob("sweep", { sessionId: "s", runId: "r" });
    } catch (error) {
      expect((error as ValidationError).field).toBe("job.name");
    }
  });

  it.each([
    ["a missing sessionId", { runId: "r" }],
    ["an empty sessionId", { sessionId: "", runId: "r" }],
    ["a numeric sessionId", { sessionId: 42, runId: "r" }],
  ])("rejects %s naming job.data.sessionId", (_what, data) => {
    let error: unknown;
    try {
      parseRunJob("run", data);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe("job.data.sessionId");
    expect((error as ValidationError).message).toMatch(/^job\.data\.sessionId: /);
  });

  it("drops unknown fields (a newer release's: nothing of them is read, a key neither) and rejects non-object payloads", () => {
    expect(parseRunJob("run", { sessionId: "s", runId: "r", apiKey: "x" }).payload).toEqual({
      sessionId: "s",
      runId: "r",
    });
    expect(() => parseRunJob("run", null)).toThrow(ValidationError);
    expect(() => parseRunJob("resume", "s")).toThrow(ValidationError);
  });
});
