/**
 * An `Idempotency-Key` held by a request that is still being answered, however long it takes
 * (contracts §9): a retry waits for its answer; the key is taken over only when its request
 * died (nothing renews the claim any more).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fastify } from "../src/producer/api-packages.js";
import { idempotencyHooks } from "../src/producer/idempotency-hooks.js";
import { IdempotencyStore } from "../src/shared/store/idempotency.js";
import { readAnswer } from "./support/answer.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

/** Resolves once `check` holds, asking every 20 ms; rejects after `ms` saying what never held. */
async function until(what: string, check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`never: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe("Idempotency-Key of a slow request", () => {
  let fleet: FleetEnv;

  beforeAll(async () => {
    fleet = await createFleetEnv("idemslow");
  }, 60_000);
  afterAll(() => fleet?.close());

  it("a request still being answered past the takeover bound keeps its key: the retry waits and replays, one effect", async () => {
    const { sql } = fleet.database;
    const real = new IdempotencyStore(fleet.database);
    let waiting!: () => void;
    const retryWaits = new Promise<void>((resolve) => {
      waiting = resolve;
    });
    const store = {
      begin: real.begin.bind(real),
      complete: real.complete.bind(real),
      release: real.release.bind(real),
      wait: (...args: Parameters<IdempotencyStore["wait"]>) => {
        waiting();
        return real.wait(...args);
      },
      renew: real.renew.bind(real),
    };
    const app = fastify({ logger: false });
    app.decorateRequest("tenant", "");
    idempotencyHooks(app, store, { renewEveryMs: 50 });
    let acted = 0;
    let finish!: () => void;
    const gate = new Promise<void>((resolve) => {
      finish = resolve;
    });
    app.post("/v1/slow", async (_request, reply) => {
      acted++;
      const n = acted;
      await gate;
      return reply.code(201).send({ n });
    });
    const url = await app.listen({ port: 0, host: "127.0.0.1" });
    try {
      const send = () =>
        fetch(`${url}/v1/slow`, {
          method: "POST",
          headers: { "content-type": "application/json", "idempotency-key": "slow-1" },
          body: JSON.stringify({ x: 1 }),
        }).then(readAnswer);
      const first = send();
      await until("the first request acts", () => acted === 1);
      // It has been at it for longer than a dead request's key is held (as if 200 s had passed).
      await sql`update idempotency_keys set created_at = now() - interval '200 seconds' where key = 'slow-1'`;
      await until(
        "the live request renews its claim",
        async () =>
          (
            await sql<{ fresh: boolean }[]>`
              select created_at > now() - interval '60 seconds' as fresh from idempotency_keys where key = 'slow-1'`
          )[0]!.fresh,
      );
      const second = send();
      await Promise.race([retryWaits, until("the retry acts", () => acted === 2)]);
      finish();
      const answers = await Promise.all([first, second]);
      expect(answers.map((a) => a.status)).toEqual([201, 201]);
      expect(answers.map((a) => a.json.n)).toEqual([1, 1]);
      expect(acted).toBe(1);
    } finally {
      finish();
      await app.close();
    }
  });
});
