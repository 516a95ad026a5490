/**
 * A session page whose event stream goes silent without closing (contracts §14: "while it runs
 * it updates live from the events stream"): a network cut that sends no FIN or RST, a proxy that
 * holds the connection, a laptop's Wi-Fi that changed. The API sends `: heartbeat` every 15 s
 * on an idle stream; the page waited on its read for ever, said "live (event stream)", and
 * showed nothing of what the session did next until a reload. Now a stream that brings nothing
 * (no event, no heartbeat) for 60 s, as `fleet.events`'s `idleTimeoutMs`, is dropped and opened
 * again with `Last-Event-ID`, and the page shows what it missed. Real API, worker, Chromium; a
 * TCP proxy in front of the API that freezes the stream's connection.
 */
import { connect, createServer, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ConsoleFleet, openConsoleFleet } from "./support/console-browser.js";

/** A proxy to `port` whose `freeze()` stops the event streams it carries, leaving them open. */
async function freezingProxy(port: number) {
  const streams = new Set<Socket>();
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    const upstream = connect(port, "127.0.0.1");
    for (const s of [socket, upstream]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => sockets.delete(s));
    }
    socket.on("data", (chunk: Buffer) => {
      if (/^GET \/v1\/sessions\/[^ ]*\/events/.test(chunk.toString("latin1"))) streams.add(socket);
    });
    socket.pipe(upstream).pipe(socket);
    socket.on("close", () => upstream.destroy());
    upstream.on("close", () => socket.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  return {
    url: `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`,
    /** The streams open now get nothing more, either way; their connections stay open. */
    freeze: () => {
      for (const socket of streams) {
        socket.unpipe();
        socket.pause();
        for (const upstream of sockets) if (upstream !== socket) upstream.unpipe(socket);
      }
      const frozen = streams.size;
      streams.clear();
      return frozen;
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe("the console when its event stream goes silent", () => {
  let opened: ConsoleFleet;
  let proxy: Awaited<ReturnType<typeof freezingProxy>>;

  beforeAll(async () => {
    opened = await openConsoleFleet("consolesilentstream", { worker: true });
    proxy = await freezingProxy(Number(new URL(opened.base).port));
  }, 90_000);
  afterAll(async () => {
    await opened?.close();
    await proxy?.close();
  });

  it("opens the stream again and shows what the session did meanwhile", async () => {
    const { client, page } = opened;
    const { id } = await client.createSession({
      agent: {
        model: { provider: "scripted", steps: [{ text: "first answer" }, { text: "answer after the cut" }] },
      },
    });
    const first = await client.send(id, "first question");
    await client.waitForRun(first.runId, { timeoutMs: 20_000 });
    // The stream replays the first run's events, and the page reads the session again after
    // them: frozen only after that read, which would otherwise show the second run's answer.
    const refreshed = page.waitForResponse((response) =>
      response.url().includes(`/v1/sessions/${id}?afterSeq=`),
    );
    await page.goto(`${proxy.url}/console/sessions/${id}`);
    await page.getByText("first answer", { exact: true }).waitFor();
    await page.getByText("live (event stream)").waitFor();
    await refreshed;
    expect(proxy.freeze()).toBe(1);
    await page.waitForTimeout(1_000); // any read the replayed events asked for is done

    const t0 = Date.now();
    const second = await client.send(id, "second question");
    expect((await client.waitForRun(second.runId, { timeoutMs: 20_000 })).endedReason).toBe("completed");
    // Before: never shown (the page waited on its frozen stream, "live (event stream)").
    await page.getByText("answer after the cut", { exact: true }).waitFor({ timeout: 90_000 });
    expect(await page.locator("main").textContent()).toContain("second question");
    // Once the stream was silent for STREAM_IDLE_MS, not at once: the frozen stream was not ended.
    expect(Date.now() - t0).toBeGreaterThan(50_000);
  }, 150_000);
});
