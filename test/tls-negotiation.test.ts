/**
 * The pure parts of the TLS the watched socket factory negotiates (tls-negotiation.ts): what
 * a URL asks for, read as postgres.js reads it (checked against postgres.js's own parse, so an
 * upgrade that reads it otherwise shows here); the tls.connect options of postgres.js's
 * `secure()`; what the one-byte answer to the SSLRequest leads to.
 */
import postgres from "postgres";
import { afterEach, describe, expect, it } from "vitest";
import { afterAnswer, requestedTls, tlsOptions } from "../src/shared/db/tls-negotiation.js";

const BASE = "postgres://u@db.example:5432/fleet";

describe("TLS negotiated by the watched sockets", () => {
  const saved = { PGSSL: process.env.PGSSL, PGSSLNEGOTIATION: process.env.PGSSLNEGOTIATION };
  afterEach(() => {
    for (const [name, value] of Object.entries(saved))
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
  });

  it("reads ssl and sslnegotiation from a URL and PGSSL* as postgres.js does", async () => {
    const cases: [string, Record<string, string>][] = [
      ["", {}],
      ["?sslmode=require", {}],
      ["?sslmode=prefer", {}],
      ["?sslmode=allow", {}],
      ["?sslmode=verify-full", {}],
      ["?sslmode=disable", {}],
      ["?sslmode=disable", { PGSSL: "require" }],
      ["?ssl=true", {}],
      ["?ssl=false", {}],
      ["?sslmode=require&sslrootcert=system", {}],
      ["?sslmode=require&sslmode=disable", {}],
      ["?sslmode=", { PGSSL: "prefer" }],
      ["", { PGSSL: "require" }],
      ["", { PGSSL: "require", PGSSLNEGOTIATION: "direct" }],
      ["?sslmode=require&sslnegotiation=direct", {}],
      ["?sslmode=require&sslnegotiation=postgres", { PGSSLNEGOTIATION: "direct" }],
    ];
    for (const [query, env] of cases) {
      delete process.env.PGSSL;
      delete process.env.PGSSLNEGOTIATION;
      Object.assign(process.env, env);
      const url = BASE + query;
      const sql = postgres(url);
      // postgres.js's types do not list `sslnegotiation`.
      const parsed = sql.options as typeof sql.options & { sslnegotiation: string | null };
      const theirs = { ssl: parsed.ssl, direct: parsed.sslnegotiation === "direct" };
      await sql.end();
      expect(requestedTls(url, env), `${query} ${JSON.stringify(env)}`).toEqual(theirs);
    }
  });

  it("connects with the options of postgres.js's secure() for each mode", () => {
    expect(tlsOptions("require", false, "db.example")).toEqual({
      servername: "db.example",
      rejectUnauthorized: false,
    });
    expect(tlsOptions("prefer", false, "127.0.0.1")).toEqual({
      servername: undefined,
      rejectUnauthorized: false,
    });
    expect(tlsOptions("allow", true, "db.example")).toEqual({
      servername: "db.example",
      ALPNProtocols: ["postgresql"],
      rejectUnauthorized: false,
    });
    // Verified (Node's default) for verify-full, verify-ca, true.
    for (const ssl of ["verify-full", "verify-ca", true])
      expect(tlsOptions(ssl, false, "db.example")).toEqual({ servername: "db.example" });
    expect(tlsOptions({ ca: "PEM", servername: "other" }, false, "db.example")).toEqual({
      servername: "other",
      ca: "PEM",
    });
  });

  it("goes on after the SSLRequest's answer as the mode allows", () => {
    const S = Uint8Array.of(0x53);
    const N = Uint8Array.of(0x4e);
    expect(afterAnswer(S, "require")).toBe("tls");
    expect(afterAnswer(N, "prefer")).toBe("plain");
    expect(afterAnswer(N, "allow")).toBe("plain");
    for (const ssl of ["require", "verify-full", true])
      expect(afterAnswer(N, ssl)).toEqual({ error: expect.stringMatching(/does not accept TLS/) });
    // Bytes after the answer were not sent by the server through TLS: refused (CVE-2021-23222).
    expect(afterAnswer(Uint8Array.of(0x53, 0x52), "require")).toEqual({
      error: expect.stringMatching(/more than one byte/),
    });
    expect(afterAnswer(Uint8Array.of(0x45), "prefer")).toEqual({
      error: expect.stringMatching(/not 'S' or 'N'/),
    });
  });
});
