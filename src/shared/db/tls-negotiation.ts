/**
 * TLS to Postgres negotiated by the `socket` factory (dead-links.ts) instead of postgres.js,
 * so that the socket postgres.js reads and writes — the one watched for silence — carries the
 * cleartext. postgres.js would drop the factory's socket's listeners and talk through a TLS
 * socket of its own made on it (its `secure()`), out of the watch's sight; it is told
 * `ssl: false` (client.ts) and the factory does what `secure()` does, with the same options:
 * send the SSLRequest, read the one-byte answer, `tls.connect` on the socket for 'S'. Unlike
 * `secure()`, an 'N' goes on in the clear only for `prefer` and `allow` (for the others it is
 * an error, where postgres.js tried TLS anyway and failed obscurely), and an answer with bytes
 * after it (injected by someone in the middle, CVE-2021-23222) is refused. With
 * `sslnegotiation=direct` the TLS handshake starts at once, ALPN `postgresql`, as postgres.js's.
 */
import { isIP, Socket } from "node:net";
import { type ConnectionOptions, connect as tlsConnect } from "node:tls";

/** postgres.js's `ssl`: false, a mode ('require', 'prefer', 'verify-full'…), true, or tls.connect options. */
export type Ssl = false | true | string | Record<string, unknown>;
export type RequestedTls = { ssl: Ssl; direct: boolean };
export const NO_TLS: RequestedTls = { ssl: false, direct: false };

/**
 * The `ssl` and `sslnegotiation` postgres.js makes of a connection URL (and PGSSL,
 * PGSSLNEGOTIATION) when no option sets them: its parseOptions, for these two (pure).
 */
export function requestedTls(
  url: string,
  env: Record<string, string | undefined> = process.env,
): RequestedTls {
  const query: Record<string, string> = {};
  for (const [name, value] of new URL(url).searchParams) query[name] = value;
  if (query.sslmode) {
    query.ssl = query.sslmode;
    delete query.sslmode;
  }
  if (query.sslrootcert === "system") query.ssl = "verify-full";
  const setting = (name: string): string | false | undefined => {
    const value = Object.hasOwn(query, name) ? query[name]! : undefined;
    if (value === undefined) return env[`PG${name.toUpperCase()}`] || undefined;
    return value === "disable" || value === "false" ? false : value;
  };
  return { ssl: setting("ssl") ?? false, direct: setting("sslnegotiation") === "direct" };
}

/** The options of `tls.connect` (but its socket) postgres.js's `secure()` uses for `ssl` (pure). */
export function tlsOptions(ssl: Ssl, direct: boolean, host: string): ConnectionOptions {
  const options: ConnectionOptions = { servername: isIP(host) ? undefined : host };
  if (direct) options.ALPNProtocols = ["postgresql"];
  if (ssl === "require" || ssl === "allow" || ssl === "prefer") options.rejectUnauthorized = false;
  else if (typeof ssl === "object") Object.assign(options, ssl);
  return options;
}

const SSL_REQUEST = Buffer.from([0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]); // length 8, code 80877103
const YES = 0x53; // 'S'
const NO = 0x4e; // 'N'

/** What to do after the server's answer to the SSLRequest (pure): TLS, go on in the clear, or an error. */
export function afterAnswer(answer: Uint8Array, ssl: Ssl): "tls" | "plain" | { error: string } {
  if (answer.length > 1)
    return { error: "answered the SSLRequest with more than one byte (something in the middle?)" };
  if (answer[0] === YES) return "tls";
  if (answer[0] === NO)
    return ssl === "prefer" || ssl === "allow"
      ? "plain"
      : {
          error: `does not accept TLS (answered 'N' to the SSLRequest), and ssl/sslmode ${JSON.stringify(ssl)} requires it`,
        };
  return {
    error: `answered the SSLRequest with ${JSON.stringify(String.fromCharCode(answer[0]!))}, not 'S' or 'N'`,
  };
}

type Named = Socket & { host?: string; port?: number };

/** A socket that fails with `error` (its `error` and `close` come on the next tick, once postgres.js listens). */
function failed(error: Error, host: string, port: number): Socket {
  const socket: Named = new Socket();
  socket.host = host;
  socket.port = port;
  socket.destroy(error);
  return socket;
}

/** The first chunk `raw` receives, or the error it fails with (ETIMEDOUT-like after `timeoutMs`). */
function firstChunk(raw: Socket, where: string, timeoutMs: number): Promise<Buffer | Error> {
  return new Promise((resolve) => {
    const done = (result: Buffer | Error) => {
      clearTimeout(timer);
      raw.off("data", done);
      raw.off("error", done);
      raw.off("close", closed);
      resolve(result);
    };
    const closed = () =>
      done(
        Object.assign(
          new Error(`Postgres at ${where} closed the connection before answering the SSLRequest`),
          { code: "CONNECTION_CLOSED" },
        ),
      );
    const timer = setTimeout(() => {
      raw.destroy();
      done(
        Object.assign(
          new Error(
            `Postgres at ${where} did not answer the SSLRequest within ${Math.round(timeoutMs / 1000)} s`,
          ),
          { code: "CONNECT_TIMEOUT" },
        ),
      );
    }, timeoutMs);
    raw.on("data", done);
    raw.on("error", done);
    raw.on("close", closed);
  });
}

/**
 * The socket postgres.js is to talk through on `raw` (just connecting to `host`:`port`): a TLS
 * socket made on it, `raw` itself (in the clear), or one failing with why not. Resolves, never
 * rejects (a rejected factory leaves postgres.js's connection slot stuck), and only after an
 * await, so that the failing socket's error is emitted once postgres.js listens to it.
 */
export async function negotiated(
  raw: Socket,
  tls: RequestedTls,
  host: string,
  port: number,
  timeoutMs: number,
): Promise<Socket> {
  const where = `${host}:${port}`;
  if (tls.direct)
    await Promise.resolve(); // (a failure below comes after an await, as said above)
  else {
    raw.write(SSL_REQUEST);
    const answer = await firstChunk(raw, where, timeoutMs);
    if (answer instanceof Error) return failed(answer, host, port);
    const next = afterAnswer(answer, tls.ssl);
    if (next === "plain") return raw;
    if (next !== "tls") {
      raw.destroy();
      const error = Object.assign(new Error(`Postgres at ${where} ${next.error}`), { code: "TLS_REFUSED" });
      return failed(error, host, port);
    }
  }
  try {
    const secure: Named = tlsConnect({ ...tlsOptions(tls.ssl, tls.direct, host), socket: raw });
    secure.host = host;
    secure.port = port;
    return secure;
  } catch (error) {
    raw.destroy();
    return failed(error as Error, host, port);
  }
}
