/**
 * `fleet api` stops within a known bound after SIGTERM whatever its clients do. After the drain
 * (FLEET_API_DRAIN_MS) it stops taking connections, closes the idle ones at once and waits for
 * the busy ones API_BUSY_CONNECTIONS_WAIT_MS; any still open then are closed, said in one line
 * with their count. Before, its stop waited for every connection to end, and `fleet api`
 * exited 1 at its deadline ("api not stopped 12 s after the signal") while a client trickled a
 * body, did not read a streamed answer (a batch's results), or even had its request answered
 * just after the stop began (its keep-alive connection then idle for Fastify's 72 s); and an
 * answer ended but not yet written out (a big one to a slow reader) was cut at once: a client
 * reading it after the stop began got 4.6 MB of 12 MB.
 * Each case is a real `fleet api` on a real database, with a raw TCP client doing the one
 * thing; a session created during the drain shows that answered requests are kept. The times
 * measured are printed.
 */
import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_BUSY_CONNECTIONS_WAIT_MS, forcedMessage, stopStep } from "../src/producer/api-stop.js";
import { type ApiProcess, killApi, spawnApi } from "./support/api-process.js";
import { writeBigBacklog } from "./support/event-backlog.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";

const DRAIN_MS = 2_000;
const ENV = { FLEET_API_DRAIN_MS: String(DRAIN_MS), FLEET_EVENTS_MAX_BYTES: String(64 * 1024 * 1024) };
/** The one line said when busy connections are closed (api-stop.ts). */
const FORCED = /still busy \d+ ms after the API stopped taking connections/g;
/** About 12 MB of history: more than the loopback socket's buffers hold (4 MB to send). */
const BIG_HISTORY = [
  { role: "user", content: "q".repeat(6_000_000) },
  { role: "assistant", content: "a".repeat(6_000_000), stopReason: "end_turn" },
];
const AGENT = { model: { provider: "scripted", steps: [{ text: "ok" }] } };

/** A client's own TCP connection: what it has received, and whether the server closed it. */
type Raw = { socket: Socket; received: () => string; closed: () => boolean };

function openRaw(port: number): Promise<Raw> {
  const socket = connect(port, "127.0.0.1");
  let received = "";
  let closed = false;
  socket.on("data", (chunk: Buffer) => {
    received += chunk.toString("latin1");
  });
  socket.on("error", () => {});
  socket.on("close", () => {
    closed = true;
  });
  return new Promise((resolve, reject) => {
    socket.once("connect", () => resolve({ socket, received: () => received, closed: () => closed }));
    socket.once("error", reject);
  });
}

/** Sends one keep-alive request on `raw` and reads its whole answer (Content-Length). */
async function exchange(raw: Raw, method: string, path: string, body?: unknown): Promise<number> {
  const from = raw.received().length;
  const payload = body === undefined ? "" : JSON.stringify(body);
  raw.socket.write(
    `${method} ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: keep-alive\r\n` +
      (body === undefined ? "" : `content-type: application/json\r\ncontent-length: ${payload.length}\r\n`) +
      `\r\n${payload}`,
  );
  let status = 0;
  await waitFor(
    () => {
      const text = raw.received().slice(from);
      const end = text.indexOf("\r\n\r\n");
      if (end < 0) return false;
      const length = Number(/content-length: (\d+)/i.exec(text.slice(0, end))?.[1] ?? Number.NaN);
      status = Number(text.slice(9, 12));
      return text.length - end - 4 >= length;
    },
    20_000,
    `the answer to ${method} ${path}`,
  );
  return status;
}

/**
 * Reads until the head of an answer has come, then reads nothing more: the socket is paused
 * in the data event that completes the head, not at a later poll, by which time a client on a
 * loaded machine had read a whole 12 MB answer (the stop then found nothing busy to close).
 */
async function headThenPause(raw: Raw, request: string): Promise<string> {
  const from = raw.received().length;
  const pauseAtHead = () => {
    if (!raw.received().slice(from).includes("\r\n\r\n")) return;
    raw.socket.pause();
    raw.socket.off("data", pauseAtHead);
  };
  // After openRaw's listener, which has added the chunk to what was received.
  raw.socket.on("data", pauseAtHead);
  raw.socket.write(request);
  await waitFor(() => raw.received().slice(from).includes("\r\n\r\n"), 20_000, "the answer's head");
  return raw.received().slice(from, from + raw.received().slice(from).indexOf("\r\n"));
}

/** Whether a new connection to `port` is refused: the API has stopped taking connections. */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(false);
    });
    socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code === "ECONNREFUSED"));
  });
}

/** Resolves once the API's drain is over and its port closed (its stop under way). */
async function stopBegun(api: ApiProcess): Promise<void> {
  await waitFor(() => refused(api.port), 20_000, "the API's port closed");
}

async function createSession(url: string, body: Record<string, unknown>): Promise<string> {
  const response = await fetch(`${url}/v1/sessions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ agent: AGENT, ...body }),
  });
  const text = await response.text();
  expect(response.status, text).toBe(201);
  return (JSON.parse(text) as { id: string }).id;
}

describe("fleet api after SIGTERM, whatever its clients do", () => {
  let fleet: FleetEnv;
  beforeAll(async () => {
    fleet = await createFleetEnv("apistopclients");
  });
  afterAll(async () => fleet?.close());

  /** SIGTERM (unless sent already); during the drain a session is created, its 201 read whole. */
  async function signalAndServe(api: ApiProcess, name: string): Promise<string> {
    if (!api.signalled()) api.signal();
    await waitFor(
      async () => {
        const health = await fetch(`${api.url}/healthz`);
        await health.text();
        return health.status === 503;
      },
      10_000,
      "/healthz at 503",
    );
    return createSession(api.url, { metadata: { during: name } });
  }

  /**
   * The stop after SIGTERM (signalAndServe, unless `answered` says it was done): exit 0,
   * before drain + wait + 5 s, the session created during the drain stored, `client` closed
   * by the server. Returns the lines saying busy connections were closed.
   */
  async function stopAndCheck(
    name: string,
    api: ApiProcess,
    client: Raw,
    answered?: string,
  ): Promise<string[]> {
    answered ??= await signalAndServe(api, name);
    const { code, afterSignalMs } = await api.exited;
    console.log(`[api-stop] ${name}: exit ${code} ${afterSignalMs} ms after SIGTERM (drain ${DRAIN_MS} ms)`);
    expect(code, api.output()).toBe(0);
    expect(afterSignalMs).toBeLessThan(DRAIN_MS + API_BUSY_CONNECTIONS_WAIT_MS + 5_000);
    const stored = await fleet.database.sql`select id from sessions where id = ${answered}`;
    expect(stored).toHaveLength(1);
    // A paused client sees the end once it reads again.
    client.socket.resume();
    await waitFor(() => client.closed(), 10_000, "the client's connection closed by the server");
    const forced = api.output().match(FORCED) ?? [];
    console.log(`[api-stop] ${name}: ${forced.length} forced-close line(s)`, forced);
    return forced;
  }

  it("(a) an idle keep-alive connection: served during the drain, closed at the stop, nothing forced", async () => {
    const api = await spawnApi(fleet, ENV);
    try {
      const client = await openRaw(api.port);
      expect(await exchange(client, "GET", "/v1/sessions")).toBe(200);
      api.signal();
      // The same connection, during the drain: answered, then idle again.
      await waitFor(async () => (await exchange(client, "GET", "/healthz")) === 503, 10_000, "503");
      expect(await exchange(client, "POST", "/v1/sessions", { agent: AGENT })).toBe(201);
      const answeredOnIt = JSON.parse(
        client.received().slice(client.received().lastIndexOf("\r\n\r\n") + 4),
      ) as {
        id: string;
      };
      const forced = await stopAndCheck("(a) idle keep-alive", api, client);
      expect(forced).toEqual([]);
      const stored = await fleet.database.sql`select id from sessions where id = ${answeredOnIt.id}`;
      expect(stored).toHaveLength(1);
    } finally {
      killApi(api);
    }
  }, 90_000);

  it("(b) a client sending its body slowly, never finishing: closed after the wait, said once", async () => {
    const api = await spawnApi(fleet, ENV);
    const client = await openRaw(api.port);
    const ticker = setInterval(() => {
      if (client.socket.writable) client.socket.write(" ");
    }, 200);
    try {
      client.socket.write(
        "POST /v1/sessions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 1000000\r\n\r\n{",
      );
      const forced = await stopAndCheck("(b) slow body", api, client);
      expect(forced).toHaveLength(1);
      expect(api.output()).toMatch(/"connections":1\b/);
    } finally {
      clearInterval(ticker);
      client.socket.destroy();
      killApi(api);
    }
  }, 90_000);

  it("(b) a client whose body is still arriving when the stop begins: answered whole, then closed, nothing forced", async () => {
    const api = await spawnApi(fleet, ENV);
    try {
      const client = await openRaw(api.port);
      const body = JSON.stringify({ agent: AGENT, metadata: { case: "b2" } });
      client.socket.write(
        `POST /v1/sessions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, -1)}`,
      );
      const answered = await signalAndServe(api, "b2");
      await stopBegun(api);
      client.socket.write(body.slice(-1));
      await waitFor(() => /\r\n\r\n\{"id":"[^"]+"\}/.test(client.received()), 10_000, "the 201");
      expect(client.received()).toMatch(/^HTTP\/1\.1 201 /);
      const id = /\{"id":"([^"]+)"\}/.exec(client.received())![1]!;
      const forced = await stopAndCheck("(b) body finished after the stop began", api, client, answered);
      expect(forced).toEqual([]);
      expect(await fleet.database.sql`select id from sessions where id = ${id}`).toHaveLength(1);
    } finally {
      killApi(api);
    }
  }, 90_000);

  it("(c) a client reading a big answer only after the stop began: gets it whole, nothing forced", async () => {
    const api = await spawnApi(fleet, ENV);
    try {
      const big = await createSession(api.url, { messages: BIG_HISTORY });
      const client = await openRaw(api.port);
      const status = await headThenPause(
        client,
        `GET /v1/sessions/${big} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`,
      );
      expect(status).toMatch(/^HTTP\/1\.1 200/);
      const answered = await signalAndServe(api, "c2");
      await stopBegun(api);
      client.socket.resume();
      const text = client.received();
      const length = Number(/content-length: (\d+)/i.exec(text)![1]);
      const start = text.indexOf("\r\n\r\n") + 4;
      await waitFor(
        () => client.closed() || client.received().length - start >= length,
        20_000,
        "the whole answer or the end",
      );
      expect(client.received().length - start).toBe(length);
      const forced = await stopAndCheck("(c) big answer read after the stop began", api, client, answered);
      expect(forced).toEqual([]);
    } finally {
      killApi(api);
    }
  }, 90_000);

  it("(c) a client not reading a big answer: closed after the wait, said once", async () => {
    const api = await spawnApi(fleet, ENV);
    try {
      const big = await createSession(api.url, {
        messages: BIG_HISTORY,
      });
      const client = await openRaw(api.port);
      const status = await headThenPause(
        client,
        `GET /v1/sessions/${big} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`,
      );
      expect(status).toMatch(/^HTTP\/1\.1 200/);
      const forced = await stopAndCheck("(c) unread big answer", api, client);
      expect(forced).toHaveLength(1);
      expect(api.output()).toMatch(/"connections":1\b/);
    } finally {
      killApi(api);
    }
  }, 90_000);

  it("(c) a client not reading a streamed answer (a batch's results): closed after the wait, said once", async () => {
    const api = await spawnApi(fleet, ENV);
    try {
      // Four sessions of 3 MB outputs: about 12 MB of NDJSON, sent as the client reads.
      const created = await fetch(`${api.url}/v1/batches`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          sessions: Array.from({ length: 4 }, () => ({
            agent: AGENT,
            messages: [
              { role: "user", content: "q" },
              { role: "assistant", content: "a".repeat(3_000_000), stopReason: "end_turn" },
            ],
          })),
        }),
      });
      const batch = (await created.json()) as { id: string };
      expect(created.status).toBe(201);
      const client = await openRaw(api.port);
      const status = await headThenPause(
        client,
        `GET /v1/batches/${batch.id}/results HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`,
      );
      expect(status).toMatch(/^HTTP\/1\.1 200/);
      const forced = await stopAndCheck("(c) unread streamed answer", api, client);
      expect(forced).toHaveLength(1);
      expect(api.output()).toMatch(/"connections":1\b/);
    } finally {
      killApi(api);
    }
  }, 90_000);

  it("(d) an event stream whose reader reads nothing: ended by the stop", async () => {
    const api = await spawnApi(fleet, ENV);
    try {
      const id = await createSession(api.url, {});
      const client = await openRaw(api.port);
      const status = await headThenPause(
        client,
        `GET /v1/sessions/${id}/events HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: text/event-stream\r\n\r\n`,
      );
      expect(status).toMatch(/^HTTP\/1\.1 200/);
      // 12 MB of events the paused reader cannot take.
      await writeBigBacklog(fleet, id, 4_000, 64 * 1024 * 1024);
      const forced = await stopAndCheck("(d) unread event stream", api, client);
      // The stream closes its connection itself: its wait for the reader asks every second
      // whether the API stops (event-stream-drain.ts).
      expect(forced).toEqual([]);
    } finally {
      killApi(api);
    }
  }, 90_000);
});

describe("the stop's next step", () => {
  it("is over once the server closed, waits within the wait, then closes what is open", () => {
    expect(stopStep(true, 10_000, 3_000)).toBe("stopped");
    expect(stopStep(false, 2_999, 3_000)).toBe("wait");
    expect(stopStep(false, 3_000, 3_000)).toBe("force");
    expect(forcedMessage(1, 3_000)).toMatch(/^1 connection still busy 3000 ms after/);
    expect(forcedMessage(2, 3_000)).toMatch(/^2 connections still busy/);
  });
});
