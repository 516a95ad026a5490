/**
 * Connections to a Postgres that stopped answering without closing them: a managed failover
 * whose old primary vanished, a partition. Nothing comes back on such a connection and nothing
 * says it is gone — the kernel retransmits for ~15 minutes, postgres.js has no statement
 * timeout — so a statement sent on it waits that long, and so does the request or the job
 * behind it, after Postgres is back elsewhere. (A restart, which resets connections, needs
 * none of this: the statements fail at once.)
 *
 * So the long-running roles' connections are made here (postgres.js's `socket` option) and
 * watched: one that has waited `silenceMs` for an answer with no byte back is destroyed with
 * an ETIMEDOUT error. Its statements fail as Postgres unavailable (the API answers 503, a
 * worker's job fails as on a reset connection, a sweeper pass is retried) and the pool opens
 * a new connection for the next one. A statement that runs longer than `silenceMs` without
 * sending anything back is cut off the same way. Connections with TLS (`sslmode` in the URL)
 * are negotiated here too (tls-negotiation.ts), so that what is watched is the cleartext.
 */
import { connect, type Socket } from "node:net";
import { NO_TLS, negotiated, type RequestedTls } from "./tls-negotiation.js";

/**
 * Whether a connection taken for lost also fails the statements waiting in its pool for a
 * connection (pure): yes when no connection of the pool heard anything from Postgres since
 * this one began to wait (`heardAt`: the pool's last byte back). Postgres is then silent to
 * the whole pool, and each of those statements would otherwise be given a new connection of
 * its own in turn, which the blackhole takes too: a window each, one after the other. No when
 * another connection still hears answers: this one ran a statement longer than the window.
 */
export function failsWaitingStatements(waitingSince: number, heardAt: number): boolean {
  return heardAt < waitingSince;
}

/** Whether a connection that has waited for an answer since `waitingSince` is taken for lost (pure). */
export function silentTooLong(waitingSince: number | null, now: number, silenceMs: number): boolean {
  return waitingSince !== null && now - waitingSince >= silenceMs;
}

const SYNC = 0x53; // 'S': ends an extended-protocol query (postgres.js sends one per query)
const QUERY = 0x51; // 'Q': a simple query
const FLUSH = 0x48; // 'H': asks for what is answered so far, without ending the query
const READY_FOR_QUERY = 0x5a; // 'Z': the server's answer to each of them, and to the startup
/**
 * What ends the server's answer to a Flush: postgres.js sends one after Parse and Describe
 * (a statement with parameters not yet prepared on the connection), whose answer ends with
 * RowDescription 'T' or NoData 'n', and after an Execute with a row limit (a cursor), ended
 * by PortalSuspended 's', CommandComplete 'C' or EmptyQueryResponse 'I'; or ErrorResponse 'E'.
 */
const FLUSH_ANSWERED = new Set([0x54, 0x6e, 0x73, 0x43, 0x49, 0x45]);

/**
 * Splits a stream of Postgres protocol messages (`[type][int32 length][body]`, in chunks cut
 * anywhere) and hands each message's type to `seen`. With `untypedFirst`, the first message
 * has no type byte (the frontend's startup message) and is handed over as type 0.
 */
export class MessageTypes {
  private rest = 0;
  private header: number[] = [];
  private untyped: boolean;

  constructor(
    private readonly seen: (type: number) => void,
    options: { untypedFirst?: boolean } = {},
  ) {
    this.untyped = options.untypedFirst ?? false;
  }

  feed(chunk: Uint8Array): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.rest > 0) {
        const n = Math.min(this.rest, chunk.length - i);
        this.rest -= n;
        i += n;
        continue;
      }
      this.header.push(chunk[i++]!);
      const size = this.untyped ? 4 : 5;
      if (this.header.length < size) continue;
      const at = size - 4;
      const h = this.header;
      const length = ((h[at]! << 24) | (h[at + 1]! << 16) | (h[at + 2]! << 8) | h[at + 3]!) >>> 0;
      const type = this.untyped ? 0 : h[0]!;
      this.header = [];
      this.untyped = false;
      this.rest = Math.max(0, length - 4);
      this.seen(type);
    }
  }
}

/**
 * Which answers a connection is owed, in order, from what went each way: a ReadyForQuery for
 * the startup and for each Sync or Query sent, and the end of an answer for each Flush (a
 * statement with parameters is first sent as Parse, Describe, Flush: no Sync until its
 * description is back). Counted from the messages themselves because postgres.js pipelines
 * statements on a busy connection: a byte back (the first statement's answer) does not mean
 * nothing else is awaited.
 */
export class OwedAnswers {
  /** READY_FOR_QUERY or FLUSH for each answer owed, oldest first. */
  private readonly owed: number[] = [];
  readonly sent = new MessageTypes(
    (type) => {
      if (type === 0 || type === SYNC || type === QUERY) this.owed.push(READY_FOR_QUERY);
      else if (type === FLUSH) this.owed.push(FLUSH);
    },
    { untypedFirst: true },
  );
  readonly received = new MessageTypes((type) => {
    if (type === READY_FOR_QUERY) {
      // Everything sent before its Sync has been answered, flushed or not.
      const at = this.owed.indexOf(READY_FOR_QUERY);
      this.owed.splice(0, at + 1);
    } else if (this.owed[0] === FLUSH && FLUSH_ANSWERED.has(type)) this.owed.shift();
  });

  get waiting(): boolean {
    return this.owed.length > 0;
  }
}

/** The subset of postgres.js's parsed options the socket factory reads. */
type SocketOptions = { host: string[]; port: number[]; path?: string | false; connect_timeout?: number };

type Named = Socket & { host?: string; port?: number };

/**
 * postgres.js `socket` option: a connection to the (single) host, or its Unix socket, watched for silence.
 * postgres.js writes its startup message as soon as it gets the socket; Node holds it until
 * the connection is up (or, with TLS, until the handshake is done), and a refused or reset
 * connect fails through the socket's own `error` and `close`, as it does with postgres.js's own socket.
 * `tls`: what the URL asks for (tls-negotiation.ts `requestedTls`); it is negotiated here, and
 * postgres.js, given `ssl: false`, does not do it again on the socket it gets.
 */
export function watchedSockets(
  silenceMs: number,
  tls: RequestedTls = NO_TLS,
  now: () => number = () => performance.now(),
) {
  // When any connection of this pool (one factory per pool) last heard from Postgres.
  const pool = { heardAt: Number.NEGATIVE_INFINITY };
  return (options: SocketOptions): Socket | Promise<Socket> => {
    const host = options.host[0]!;
    const port = options.port[0]!;
    const raw: Named = options.path ? connect({ path: options.path }) : connect({ host, port });
    // postgres.js names these in its own errors (CONNECT_TIMEOUT host:port).
    raw.host = host;
    raw.port = port;
    if (!tls.ssl) return watched(raw, host, port, silenceMs, now, pool);
    // postgres.js's connect timeout starts once it has the socket: the SSLRequest's answer has its own.
    const timeoutMs = (options.connect_timeout || 30) * 1_000;
    return negotiated(raw, tls, host, port, timeoutMs).then((socket) =>
      socket.destroyed ? socket : watched(socket, host, port, silenceMs, now, pool),
    );
  };
}

/** `socket` (what postgres.js reads and writes: the cleartext), watched for silence. */
function watched(
  socket: Socket,
  host: string,
  port: number,
  silenceMs: number,
  now: () => number,
  pool: { heardAt: number },
): Socket {
  const answers = new OwedAnswers();
  // Since when the connection has been owed an answer with nothing heard (null: owed none).
  let waitingSince: number | null = null;
  const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
  socket.write = ((...args: unknown[]) => {
    const [data, encoding] = args;
    answers.sent.feed(
      typeof data === "string"
        ? Buffer.from(data, typeof encoding === "string" ? (encoding as BufferEncoding) : "utf8")
        : (data as Uint8Array),
    );
    if (answers.waiting) waitingSince ??= now();
    return write(...args);
  }) as Socket["write"];
  socket.on("data", (chunk: Buffer) => {
    answers.received.feed(chunk);
    pool.heardAt = now();
    // Heard from: the silence is counted again from here while more answers are owed.
    waitingSince = answers.waiting ? now() : null;
  });
  const timer = setInterval(
    () => {
      if (!silentTooLong(waitingSince, now(), silenceMs)) return;
      clearInterval(timer);
      const error = Object.assign(
        new Error(
          `Postgres at ${host}:${port} sent nothing for ${Math.round(silenceMs / 1000)} s on a connection waiting for an answer: taken for lost`,
        ),
        // `failQueued`: postgres.js (scripts/patch-postgres.mjs, patch 4) fails the statements
        // waiting in the pool for a connection with this error too.
        { code: "ETIMEDOUT", failQueued: failsWaitingStatements(waitingSince!, pool.heardAt) },
      );
      socket.destroy(error);
    },
    Math.max(50, Math.min(1_000, Math.floor(silenceMs / 4))),
  );
  timer.unref();
  socket.once("close", () => clearInterval(timer));
  return socket;
}

/** Whether connections to `url` can be made here: one host (postgres.js goes round several itself). */
export function watchable(url: string): boolean {
  try {
    return !new URL(url).host.includes(",");
  } catch {
    return false;
  }
}
