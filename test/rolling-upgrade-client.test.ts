/**
 * A rolling upgrade (README, Upgrading): clients of this release meet APIs of the last one.
 * That API's events route knows only `?after=` and answers any other query parameter with
 * `400 {"field": "run"}`; `stream()` and `streamResume()` name their run (`?run=RUN_ID`) and
 * failed with `FleetApiError: run: is not a parameter of this route` against it (its message
 * had been queued: the caller then waited on a run it could not follow). They now follow the
 * session as that API's own client does, from the last event read if there was one.
 * That API also ignores `GET /v1/sessions/:id?afterSeq=N` and sends every message:
 * `getSession(id, { afterSeq })` gave a reader that had the first N messages them again.
 * `messages()` pages with `?limit=`: against such APIs it reads the rest in one answer.
 */
import type { Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FleetClient, type FleetEvent } from "../src/producer/client.js";
import { type ApiProxy, startApiProxy } from "./support/api-proxy.js";
import { createFleetEnv, type FleetEnv } from "./support/fleet-env.js";

/**
 * A proxy to the API that answers an events request naming `?run=` as the last release's API
 * does (the exact body it sends), after letting `servedFirst` such requests through.
 */
function lastReleaseEventsProxy(target: string, servedFirst = 0): Promise<ApiProxy> {
  let served = 0;
  return startApiProxy(target, (req, res, forward) => {
    // Its session route takes no query parameter and ignores any: `afterSeq` does nothing.
    if (req.url && /^\/v1\/sessions\/[^/?]+\?/.test(req.url))
      req.url = req.url.slice(0, req.url.indexOf("?"));
    if (req.url?.includes("/events?run=") && served++ >= servedFirst) {
      res.writeHead(400, { "content-type": "application/json; charset=utf-8" });
      res.end(
        JSON.stringify({
          error: { code: "invalid_request", message: "run: is not a parameter of this route", field: "run" },
        }),
      );
      return;
    }
    forward();
  });
}

const agent = {
  model: {
    provider: "scripted" as const,
    steps: [
      { text: "looking", toolCalls: [{ name: "sleep", arguments: { ms: 300 } }], delayMs: 200 },
      { text: "done", delayMs: 200 },
    ],
  },
  tools: ["sleep"],
};

describe("a client of this release against the last release's API", () => {
  let fleet: FleetEnv;
  let base: string;
  const proxies: Server[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("rollingclient");
    base = (await fleet.startApi()).api.url;
    await fleet.spawnWorker();
  }, 60_000);
  afterAll(async () => {
    for (const server of proxies) {
      server.closeAllConnections();
      server.close();
    }
    await fleet?.close();
  });

  async function clientVia(servedFirst = 0): Promise<FleetClient> {
    const proxy = await lastReleaseEventsProxy(base, servedFirst);
    proxies.push(proxy.server);
    return new FleetClient({ baseUrl: proxy.url });
  }

  const summary = (events: FleetEvent[]) =>
    events.filter((e) => e.type !== "MESSAGE_DELTA").map((e) => `${e.type}:${e.data.runId}`);

  it("stream() yields its run's events once, from RUN_STARTED to RUN_COMPLETED", async () => {
    const client = await clientVia();
    const { id } = await client.createSession({ agent });
    const events: FleetEvent[] = [];
    for await (const event of client.stream(id, "go", { signal: AbortSignal.timeout(20_000) }))
      events.push(event);
    const runId = events[0]?.data.runId;
    expect(events[0]?.type).toBe("RUN_STARTED");
    expect(events.at(-1)?.type).toBe("RUN_COMPLETED");
    expect(events.every((e) => e.data.runId === runId)).toBe(true);
    expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
    // Every message the run stored, once each.
    const session = await client.getSession(id);
    expect(events.filter((e) => e.type === "MESSAGE")).toHaveLength(session.messages.length);
  }, 30_000);

  it("a stream served first by this release's API goes on after its last event, with nothing twice", async () => {
    // The first connect names the run and is served; the connection then breaks (the API behind
    // the load balancer is replaced by one of the last release) and the reconnect is refused.
    const client = await clientVia(1);
    const { id } = await client.createSession({ agent });
    const events: FleetEvent[] = [];
    let broke = false;
    for await (const event of client.stream(id, "go", { signal: AbortSignal.timeout(20_000) })) {
      events.push(event);
      if (!broke && event.type === "MESSAGE") {
        broke = true;
        for (const server of proxies) server.closeAllConnections();
      }
    }
    expect(broke).toBe(true);
    expect(events[0]?.type).toBe("RUN_STARTED");
    expect(events.at(-1)?.type).toBe("RUN_COMPLETED");
    expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
    expect(summary(events).filter((s) => s.startsWith("RUN_STARTED"))).toHaveLength(1);
  }, 30_000);

  it("getSession(id, { afterSeq }) gives only the messages after that seq", async () => {
    const client = await clientVia();
    const { id } = await client.createSession({ agent });
    for await (const event of client.stream(id, "go", { signal: AbortSignal.timeout(20_000) })) void event;
    const whole = await client.getSession(id);
    expect(whole.messages.length).toBeGreaterThan(3);
    const rest = await client.getSession(id, { afterSeq: 2 });
    expect(rest.messages.map((m) => m.seq)).toEqual(whole.messages.slice(2).map((m) => m.seq));
  }, 30_000);

  it("messages() reads the rest at once from an API that ignores `limit`, or refuses it (400 naming it)", async () => {
    const client = await clientVia();
    const { id } = await client.createSession({ agent });
    for await (const event of client.stream(id, "go", { signal: AbortSignal.timeout(20_000) })) void event;
    const whole = (await client.getSession(id)).messages.map((m) => m.seq);
    const ignoring: number[] = [];
    for await (const m of client.messages(id, { afterSeq: 1, pageSize: 1 })) ignoring.push(m.seq);
    expect(ignoring).toEqual(whole.slice(1));
    // The release before this one: `afterSeq` known, any other parameter a 400 naming it.
    const refusing = await startApiProxy(base, (req, res, forward) => {
      const name = req.url?.match(/[?&](limit|runsLimit|runsBefore)=/)?.[1];
      if (!name) return forward();
      res.writeHead(400, { "content-type": "application/json; charset=utf-8" });
      res.end(
        JSON.stringify({
          error: {
            code: "invalid_request",
            message: `${name}: is not a parameter of this route`,
            field: name,
          },
        }),
      );
    });
    proxies.push(refusing.server);
    const old: number[] = [];
    for await (const m of new FleetClient({ baseUrl: refusing.url }).messages(id, {
      afterSeq: 1,
      pageSize: 1,
    }))
      old.push(m.seq);
    expect(old).toEqual(whole.slice(1));
  }, 30_000);
});
