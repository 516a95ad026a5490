/**
 * A TCP proxy in front of the shared Postgres, for a test that cuts a fleet off from it as a
 * managed failover or restart does, without touching the server other tests use:
 * - `reset()`: every connection through it is reset (RST), and so is each new one as soon as
 *   it is accepted — a restart (refused at once, like ECONNREFUSED, but each attempt counted);
 * - `blackhole()`: every connection, open or new, stays open and gets no answer: what it
 *   sends is dropped — a failover whose old primary vanished, a partition;
 * - `closeEach()`: every connection through it is closed cleanly (FIN), and so is each new one
 *   as soon as it is accepted — a proxy or load balancer with no Postgres behind it (HAProxy
 *   with no backend up, PgBouncer restarting): TCP is accepted, nothing is ever answered;
 * - `restore()`: new connections go through again; connections held in a blackhole are
 *   reset then (the address answers again, and knows none of them), unless `keepHung`, in
 *   which case they stay unanswered for good (the old primary never comes back).
 * - `dropAnswer(match)`: the next chunk a client sends that `match`es (a statement's text) is
 *   forwarded to Postgres, which runs (and commits) it; its answer, up to the ReadyForQuery
 *   that ends it, is dropped, and the client's connection is reset then — a connection that
 *   died after the commit and before its answer arrived.
 * Each connection the proxy accepts is counted in `connects`, so a test can tell a retry
 * loop from a few reconnects.
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { MessageTypes } from "../../src/shared/db/dead-links.js";
import { freePort } from "./private-redis.js";

const READY_FOR_QUERY = 0x5a;

const TARGET = { host: "127.0.0.1", port: 5432 };

export type PgProxy = {
  port: number;
  /** `databaseUrl` with its host and port swapped for the proxy's. */
  urlFor(databaseUrl: string): string;
  reset(): Promise<void>;
  blackhole(): void;
  closeEach(): void;
  restore(options?: { keepHung?: boolean }): Promise<void>;
  /**
   * Arms the cut after a commit; resolves once a matching statement was answered by Postgres
   * (its answer dropped) and its client connection reset.
   */
  dropAnswer(match: (sent: string) => boolean): Promise<void>;
  /** Connections accepted since the proxy started (including those never answered). */
  connects(): number;
  close(): Promise<void>;
};

type Pair = { client: Socket; server: Socket | null };

export async function startPgProxy(): Promise<PgProxy> {
  const port = await freePort();
  let mode: "up" | "blackhole" | "refusing" | "closing" = "up";
  let connects = 0;
  const pairs = new Set<Pair>();
  /** Connections frozen by a blackhole: reset or kept hung by `restore`. */
  const hung = new Set<Socket>();
  /** The armed `dropAnswer`, until a client sends what it matches. */
  let dropping: { match: (sent: string) => boolean; done: () => void } | null = null;

  const hang = (pair: Pair) => {
    for (const socket of [pair.client, pair.server]) {
      if (!socket) continue;
      socket.unpipe();
      socket.removeAllListeners("data");
      // Read and drop: nothing the other side sends arrives anywhere.
      socket.on("data", () => {});
    }
    hung.add(pair.client);
    if (pair.server) pair.server.destroy();
    pairs.delete(pair);
  };

  const accept = (client: Socket) => {
    connects++;
    client.on("error", () => {});
    if (mode === "refusing") {
      client.resetAndDestroy();
      return;
    }
    if (mode === "closing") {
      // Read what comes (a socket closed with unread data would be reset instead) and end it.
      client.resume().end();
      return;
    }
    const pair: Pair = { client, server: null };
    if (mode === "blackhole") {
      hang(pair);
      return;
    }
    const upstream = createConnection(TARGET);
    pair.server = upstream;
    pairs.add(pair);
    upstream.on("error", () => client.destroy());
    client.on("close", () => {
      pairs.delete(pair);
      if (!hung.has(client)) upstream.destroy();
    });
    upstream.on("close", () => {
      if (!hung.has(client)) client.destroy();
    });
    // Forwarded by hand (not piped) so that `dropAnswer` can swallow one answer: what the
    // server sends is parsed into messages all along, to find the ReadyForQuery that ends it.
    let cut: (() => void) | null = null;
    const answers = new MessageTypes((type) => {
      if (cut && type === READY_FOR_QUERY) {
        const done = cut;
        cut = null;
        client.resetAndDestroy();
        upstream.destroy();
        done();
      }
    });
    client.on("data", (chunk: Buffer) => {
      if (dropping && !cut && dropping.match(chunk.toString("latin1"))) {
        cut = dropping.done;
        dropping = null;
      }
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      const swallowing = cut !== null;
      answers.feed(chunk);
      if (!swallowing && !client.destroyed) client.write(chunk);
    });
  };

  const server: Server = createServer(accept);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });

  return {
    port,
    urlFor(databaseUrl) {
      const url = new URL(databaseUrl);
      url.hostname = "127.0.0.1";
      url.port = String(port);
      return url.toString();
    },
    async reset() {
      mode = "refusing";
      for (const pair of pairs) {
        pair.client.resetAndDestroy();
        pair.server?.destroy();
      }
      pairs.clear();
      for (const socket of hung) socket.resetAndDestroy();
      hung.clear();
    },
    blackhole() {
      mode = "blackhole";
      for (const pair of [...pairs]) hang(pair);
    },
    closeEach() {
      mode = "closing";
      for (const pair of pairs) {
        // Ended here only: the server's close must not reset the client's connection.
        pair.server
          ?.removeAllListeners("close")
          .removeAllListeners("error")
          .on("error", () => {});
        pair.server?.destroy();
        pair.client.resume().end();
      }
      pairs.clear();
      for (const socket of hung) socket.end();
      hung.clear();
    },
    async restore(options = {}) {
      if (!options.keepHung) {
        for (const socket of hung) socket.resetAndDestroy();
        hung.clear();
      }
      mode = "up";
    },
    dropAnswer(match) {
      return new Promise<void>((resolve) => {
        dropping = { match, done: resolve };
      });
    },
    connects: () => connects,
    async close() {
      server.close();
      for (const pair of pairs) {
        pair.client.destroy();
        pair.server?.destroy();
      }
      for (const socket of hung) socket.destroy();
    },
  };
}

/**
 * What the API at `apiUrl` answers for session `id` every 2 s for `ms` (while the proxy cuts
 * it off): `<s since start> s: <status> <body>`, "no answer in 30 s" for a request that hung.
 */
export async function apiAnswersDuring(apiUrl: string, id: string, ms: number): Promise<string[]> {
  const start = Date.now();
  const answers: string[] = [];
  while (Date.now() - start < ms) {
    answers.push(await apiAnswer(apiUrl, id, start));
    await pause(2_000);
  }
  return answers;
}

/** The same, asked every 2 s (the first at once) until `over` settles: the outage ends on a condition. */
export async function apiAnswersUntil(apiUrl: string, id: string, over: Promise<unknown>): Promise<string[]> {
  let ended = false;
  const end = over.then(
    () => (ended = true),
    () => (ended = true),
  );
  const start = Date.now();
  const answers: string[] = [];
  do {
    answers.push(await apiAnswer(apiUrl, id, start));
    await Promise.race([pause(2_000), end]);
  } while (!ended);
  return answers;
}

const pause = (wait: number) => new Promise((r) => setTimeout(r, wait));

async function apiAnswer(apiUrl: string, id: string, start: number): Promise<string> {
  const answer = await Promise.race([
    fetch(`${apiUrl}/v1/sessions/${id}`).then(async (r) => `${r.status} ${await r.text()}`),
    pause(30_000).then(() => "no answer in 30 s"),
  ]).catch((error) => `fetch failed: ${error}`);
  return `${Math.round((Date.now() - start) / 1000)} s: ${answer}`;
}

/** Each answer of `apiAnswersDuring` a 503 `unavailable`: no stack, no hang. */
export const UNAVAILABLE_ANSWER = /^\d+ s: 503 \{"error":\{"code":"unavailable"/;
