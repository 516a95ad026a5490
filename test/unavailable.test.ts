/** Which errors mean "Postgres or Redis is away or refusing work" (unavailable.ts): 503, not 500. */
import { Redis, ReplyError } from "ioredis";
import postgres from "postgres";
import { describe, expect, it } from "vitest";
import { ValidationError } from "../src/shared/errors.js";
import { isServiceUnavailable } from "../src/shared/unavailable.js";
import { freePort } from "./support/private-redis.js";

const pgError = (code: string, message: string) =>
  Object.assign(new Error(message), { name: "PostgresError", code });

describe("isServiceUnavailable", () => {
  it("is true for a Postgres that refuses connections, is full, shuts down or dropped the link", async () => {
    const sql = postgres(`postgres://postgres@127.0.0.1:${await freePort()}/x`, {
      max: 1,
      connect_timeout: 2,
    });
    const refused = await sql`select 1`.catch((error: unknown) => error);
    await sql.end({ timeout: 0 });
    expect(isServiceUnavailable(refused)).toBe(true);
    expect(isServiceUnavailable(pgError("53300", "sorry, too many clients already"))).toBe(true);
    expect(
      isServiceUnavailable(pgError("57P01", "terminating connection due to administrator command")),
    ).toBe(true);
    expect(isServiceUnavailable(pgError("57P03", "the database system is starting up"))).toBe(true);
    expect(isServiceUnavailable(pgError("57014", "canceling statement due to statement timeout"))).toBe(true);
    expect(isServiceUnavailable(pgError("55P03", "canceling statement due to lock timeout"))).toBe(true);
    expect(
      isServiceUnavailable(
        Object.assign(new Error("write CONNECTION_CLOSED h:5432"), { code: "CONNECTION_CLOSED" }),
      ),
    ).toBe(true);
  });

  it("is true for a Redis that is away, out of memory (noeviction) or a replica", async () => {
    const away = new Redis(await freePort(), "127.0.0.1", {
      maxRetriesPerRequest: 0,
      retryStrategy: () => 50,
    });
    away.on("error", () => {});
    const gaveUp = await away.get("x").catch((error: unknown) => error);
    away.disconnect();
    expect((gaveUp as Error).name).toBe("MaxRetriesPerRequestError");
    expect(isServiceUnavailable(gaveUp)).toBe(true);
    expect(isServiceUnavailable(new Error("Connection is closed."))).toBe(true);
    expect(
      isServiceUnavailable(new ReplyError("OOM command not allowed when used memory > 'maxmemory'.")),
    ).toBe(true);
    expect(
      isServiceUnavailable(new ReplyError("READONLY You can't write against a read only replica.")),
    ).toBe(true);
  });

  it("is false for bad input and for bugs", () => {
    expect(isServiceUnavailable(new ValidationError("x", "bad"))).toBe(false);
    expect(isServiceUnavailable(pgError("23505", "duplicate key value violates unique constraint"))).toBe(
      false,
    );
    expect(isServiceUnavailable(pgError("42P01", 'relation "x" does not exist'))).toBe(false);
    expect(isServiceUnavailable(new ReplyError("ERR wrong number of arguments"))).toBe(false);
    expect(isServiceUnavailable(new TypeError("cannot read properties of undefined"))).toBe(false);
    expect(isServiceUnavailable("OOM")).toBe(false);
  });
});
