/**
 * Batch webhooks (contracts §9): the URL checks at submit (http/https only, no
 * credentials, the operator's allowlist and private-address refusal), the signature and
 * its verification, the backoff (more than 24 h of attempts), and the crash-safety of the
 * delivery: a batch that ended while no sweeper ran — or whose delivery job was lost
 * between recording the end and queueing it — is still delivered once a sweeper runs.
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import { createServer as createNetServer } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { loadConfig } from "../src/shared/config.js";
import { MAX_TIMER_MS } from "../src/shared/config-schema.js";
import { ValidationError } from "../src/shared/errors.js";
import { QUEUES, WEBHOOK_ATTEMPTS } from "../src/shared/queues.js";
import { signWebhook, verifyWebhookSignature } from "../src/shared/webhook-signature.js";
import {
  checkWebhookUrl,
  isPrivateAddress,
  postWebhook,
  webhookBackoffMs,
  webhookSettingsFromEnv,
} from "../src/shared/webhooks.js";
import { type RunningSweeper, startSweeper } from "../src/sweeper/sweeper-process.js";
import { createFleetEnv, type FleetEnv, waitFor } from "./support/fleet-env.js";
import { aWholeWideScan } from "./support/sweeps.js";

const SECRET = "whsec-webhooks-test";

/**
 * A webhook receiver on a free port: `take` gets each delivery's body and headers; the
 * request is answered 204 unless it says false (then it is left unanswered).
 */
async function startReceiver(
  take: (body: string, headers: IncomingHttpHeaders) => unknown,
): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (d) => {
      body += d;
    });
    req.on("end", () => {
      if (take(body, req.headers) !== false) res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}/` };
}

describe("webhook URLs, signatures and backoff", () => {
  const settings = webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET: "s" });
  const refused = (url: string, s = settings) => {
    try {
      checkWebhookUrl(url, s, "webhook.url");
      return null;
    } catch (error) {
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe("webhook.url");
      return (error as Error).message;
    }
  };

  it("accepts http(s) URLs only, without credentials; the operator may allowlist and refuse private addresses", () => {
    expect(refused("https://example.com/hook")).toBeNull();
    expect(refused("http://127.0.0.1:8080/hook")).toBeNull();
    expect(refused("file:///etc/passwd")).toMatch(/http/);
    expect(refused("gopher://example.com/")).toMatch(/http/);
    expect(refused("not a url")).toMatch(/valid URL/);
    expect(refused("https://user:pw@example.com/")).toMatch(/credentials/);
    expect(refused("https://example.com/", webhookSettingsFromEnv({}))).toMatch(/FLEET_WEBHOOK_SECRET/);
    const strict = webhookSettingsFromEnv({
      FLEET_WEBHOOK_SECRET: "s",
      FLEET_WEBHOOK_DENY_PRIVATE: "1",
      FLEET_WEBHOOK_ALLOWED_URLS: "https://hooks.example.com/,http://10.1.2.3/",
    });
    expect(refused("https://hooks.example.com/a", strict)).toBeNull();
    expect(refused("https://HOOKS.example.com/a", strict)).toBeNull();
    expect(refused("https://other.example.com/a", strict)).toMatch(/FLEET_WEBHOOK_ALLOWED_URLS/);
    // Compared as parsed URLs, not as strings: a host that merely starts like an entry is another host.
    const hosts = webhookSettingsFromEnv({
      FLEET_WEBHOOK_SECRET: "s",
      FLEET_WEBHOOK_ALLOWED_URLS: "https://hooks.example.com,http://127.0.0.1:3102/in",
    });
    for (const url of [
      "https://hooks.example.com.evil.net/x",
      "https://hooks.example.comevil.net/",
      "http://hooks.example.com/x",
      "http://127.0.0.1:31022/in",
      "http://127.0.0.1:3102/inside",
      "http://127.0.0.1:3102/",
    ])
      expect(refused(url, hosts), url).toMatch(/FLEET_WEBHOOK_ALLOWED_URLS/);
    expect(refused("http://127.0.0.1:3102/in/batch", hosts)).toBeNull();
    expect(() => webhookSettingsFromEnv({ FLEET_WEBHOOK_ALLOWED_URLS: "ftp://x" })).toThrow(
      /FLEET_WEBHOOK_ALLOWED_URLS\[0\]/,
    );
    expect(refused("http://10.1.2.3/x", strict)).toMatch(/private/);
    // `on` (how FLEET_FAIR_DISPATCH is spelled) turns the guard on; a value it cannot read stops the role.
    for (const on of ["on", "ON", "true", "yes", "1"])
      expect(webhookSettingsFromEnv({ FLEET_WEBHOOK_DENY_PRIVATE: on }).denyPrivate, on).toBe(true);
    for (const off of ["off", "0", "false", "no", "", undefined])
      expect(webhookSettingsFromEnv({ FLEET_WEBHOOK_DENY_PRIVATE: off }).denyPrivate, off).toBe(false);
    expect(() => webhookSettingsFromEnv({ FLEET_WEBHOOK_DENY_PRIVATE: "maybe" })).toThrow(
      /FLEET_WEBHOOK_DENY_PRIVATE/,
    );
    // How soon a delivery whose sweeper died is sent again: 10 s lock, 5 s check by default.
    expect(settings).toMatchObject({ lockMs: 10_000, stallCheckMs: 5_000 });
    expect(
      webhookSettingsFromEnv({ FLEET_WEBHOOK_LOCK_MS: "2000", FLEET_WEBHOOK_STALL_CHECK_MS: "500" }),
    ).toMatchObject({ lockMs: 2_000, stallCheckMs: 500 });
    for (const [name, value] of [
      ["FLEET_WEBHOOK_LOCK_MS", "999"],
      ["FLEET_WEBHOOK_LOCK_MS", "10s"],
      ["FLEET_WEBHOOK_STALL_CHECK_MS", "0"],
      ["FLEET_WEBHOOK_STALL_CHECK_MS", "1.5"],
    ] as const)
      expect(() => webhookSettingsFromEnv({ [name]: value }), `${name}=${value}`).toThrow(
        new RegExp(`${name}.*whole number of milliseconds`),
      );
    const deny = webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET: "s", FLEET_WEBHOOK_DENY_PRIVATE: "1" });
    for (const url of [
      "http://[::ffff:127.0.0.1]:31022/hook",
      "http://[::ffff:7f00:1]/",
      "http://[::ffff:a9fe:a9fe]/latest",
      "http://[64:ff9b::a9fe:a9fe]/",
      "http://[2002:a9fe:a9fe::]/",
      "http://0x7f.1/",
      "http://2130706433/",
      "http://localhost/",
      // The same name with its root dot, and names under it (RFC 6761: loopback): at submit too,
      // not only when a delivery resolves them (they were accepted, then failed for a day).
      "http://localhost./",
      "http://app.localhost:8080/hook",
      "http://app.localhost./",
    ])
      expect(refused(url, deny), url).toMatch(/private/);
    for (const address of [
      "127.0.0.1",
      "10.0.0.1",
      "192.168.1.1",
      "172.16.0.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
      "224.0.0.1",
      "255.255.255.255",
      "::",
      "::1",
      "fd00::1",
      "fe80::1",
      "ff02::1",
      "::ffff:127.0.0.1",
      "::ffff:7f00:1",
      "::ffff:a9fe:a9fe",
      "64:ff9b::7f00:1",
      // Notations that reach an IPv4 address they embed (found by the attacker review): 6to4
      // of 127.0.0.1, Teredo, IPv4-translated; and the documentation prefix.
      "2002:7f00:1::",
      "2001:0:4136:e378:8000:63bf:80ff:fffe",
      "::ffff:0:7f00:1",
      "2001:db8::1",
      "100::1",
      // The IPv4 documentation ranges, like IPv6's (RFC 5737), and IPv6's newer one (RFC 9637):
      // never on the Internet, so a webhook naming one can only reach something of the operator's.
      "192.0.2.1",
      "198.51.100.7",
      "203.0.113.200",
      "::ffff:203.0.113.1",
      "3fff::1",
    ])
      expect(isPrivateAddress(address), address).toBe(true);
    for (const address of ["8.8.8.8", "172.32.0.1", "2606:4700::1111", "::ffff:808:808", "not an address"])
      expect(isPrivateAddress(address), address).toBe(false);
  });

  it("FLEET_WEBHOOK_LOCK_MS and _STALL_CHECK_MS past the longest timer are refused at start, naming the variable", () => {
    // Node fires a longer timer after 1 ms: STALL_CHECK_MS=3000000000 (meant as "never look")
    // ran BullMQ's stalled-job script on Redis every millisecond, in every sweeper.
    for (const name of ["FLEET_WEBHOOK_LOCK_MS", "FLEET_WEBHOOK_STALL_CHECK_MS"]) {
      expect(webhookSettingsFromEnv({ [name]: String(MAX_TIMER_MS) })).toBeDefined();
      expect(() => loadConfig({ [name]: "3000000000" }), name).toThrow(
        new RegExp(`${name}.*at most ${MAX_TIMER_MS}`),
      );
    }
  });

  it("one deadline for a whole attempt: a receiver that trickles its headers fails it; a trickled body is not waited for", async () => {
    const sockets = new Set<import("node:net").Socket>();
    const trickle = createNetServer((socket) => {
      sockets.add(socket);
      socket.on("error", () => {});
      // Headers one byte at a time, never finished: the socket is never idle for long.
      const head = "HTTP/1.1 200 OK\r\nX-Slow: ".split("");
      const timer = setInterval(
        () => (socket.destroyed ? clearInterval(timer) : socket.write(head.shift() ?? "x")),
        50,
      );
    });
    const slowBody = createServer((_req, res) => {
      res.writeHead(202, { "content-type": "text/plain" });
      const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(".")), 50);
    });
    await Promise.all([
      new Promise<void>((r) => trickle.listen(0, "127.0.0.1", r)),
      new Promise<void>((r) => slowBody.listen(0, "127.0.0.1", r)),
    ]);
    const portOf = (server: { address(): unknown }) => (server.address() as { port: number }).port;
    const quick = { ...settings, timeoutMs: 400 };
    try {
      await expect(postWebhook(`http://127.0.0.1:${portOf(trickle)}/hook`, "{}", {}, quick)).rejects.toThrow(
        /no answer within 400 ms/,
      );
      expect(await postWebhook(`http://127.0.0.1:${portOf(slowBody)}/hook`, "{}", {}, quick)).toBe(202);
    } finally {
      for (const socket of sockets) socket.destroy();
      slowBody.closeAllConnections();
      await Promise.all([new Promise((r) => trickle.close(r)), new Promise((r) => slowBody.close(r))]);
    }
  });

  it("a delivery checks the allowlist again: a URL stored before it was set (or narrowed) is not sent to", async () => {
    let hits = 0;
    const { server, url } = await startReceiver(() => {
      hits++;
    });
    try {
      const open = webhookSettingsFromEnv({ FLEET_WEBHOOK_SECRET: "s" });
      expect(await postWebhook(`${url}in/..%2fadmin`, "{}", {}, open)).toBe(204);
      expect(hits).toBe(1);
      const narrowed = webhookSettingsFromEnv({
        FLEET_WEBHOOK_SECRET: "s",
        FLEET_WEBHOOK_ALLOWED_URLS: `${url}in`,
      });
      for (const stored of [`${url}in/..%2fadmin`, `${url}other`])
        await expect(postWebhook(stored, "{}", {}, narrowed), stored).rejects.toThrow(
          /not under an entry of FLEET_WEBHOOK_ALLOWED_URLS/,
        );
      expect(hits).toBe(1);
      expect(await postWebhook(`${url}in/hook`, "{}", {}, narrowed)).toBe(204);
      expect(hits).toBe(2);
    } finally {
      await new Promise((r) => server.close(r));
    }
  });

  it("signs t.body with HMAC-SHA256 and verifies it within a tolerance", () => {
    const body = '{"id":"b"}';
    const header = signWebhook(SECRET, body, 1_700_000_000);
    expect(header).toMatch(/^t=1700000000,v1=[0-9a-f]{64}$/);
    expect(verifyWebhookSignature(SECRET, body, header, 300, 1_700_000_100)).toBe(true);
    expect(verifyWebhookSignature(SECRET, `${body} `, header, 300, 1_700_000_100)).toBe(false);
    expect(verifyWebhookSignature(SECRET, body, header, 300, 1_700_001_000)).toBe(false);
    // An empty secret verifies nothing: anyone can sign with it (a receiver's unset variable).
    const forged = signWebhook("", body, 1_700_000_000);
    expect(verifyWebhookSignature("", body, forged, 300, 1_700_000_100)).toBe(false);
    // Only the header as the fleet writes it: no MAC with more after it, no t in other notation.
    expect(verifyWebhookSignature(SECRET, body, `${header}zz`, 300, 1_700_000_100)).toBe(false);
    const mac = header.split("v1=")[1]!;
    expect(verifyWebhookSignature(SECRET, body, `t=1.7e9,v1=${mac}`, 300, 1_700_000_100)).toBe(false);
  });

  it("backs off exponentially up to an hour, over more than 24 h in all", () => {
    let total = 0;
    for (let attempt = 1; attempt < WEBHOOK_ATTEMPTS; attempt++)
      total += webhookBackoffMs({ retryBaseMs: 1_000 }, attempt);
    expect(total).toBeGreaterThan(24 * 3_600_000);
    expect(webhookBackoffMs({ retryBaseMs: 1_000 }, 30)).toBeLessThanOrEqual(3_600_000 * 1.1);
    expect(QUEUES.webhooks.defaultJobOptions.attempts).toBe(WEBHOOK_ATTEMPTS);
  });
});

describe("webhook delivery survives a missing sweeper and a lost job", () => {
  let fleet: FleetEnv;
  let client: FleetClient;
  let sweeper: RunningSweeper | undefined;
  let server: Server;
  let url: string;
  const received: { body: string; signature: string; deliveryId: string }[] = [];

  beforeAll(async () => {
    fleet = await createFleetEnv("webhooks", { env: { FLEET_WEBHOOK_SECRET: SECRET } });
    ({ client } = await fleet.startApi());
    ({ server, url } = await startReceiver((body, headers) => {
      received.push({
        body,
        signature: String(headers["fleet-signature"]),
        deliveryId: String(headers["fleet-delivery-id"]),
      });
    }));
  }, 60_000);
  afterAll(async () => {
    await sweeper?.stop();
    server?.close();
    await fleet?.close();
  });

  it("delivers for a batch that ended before any sweeper ran, and one whose job was lost", async () => {
    // Given no input, nothing runs: both batches have ended as soon as they exist.
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
    const early = await client.createBatch([{ agent, customId: "e" }], { webhook: { url } });
    const lost = await client.createBatch([{ agent, customId: "l" }], { webhook: { url } });
    // The end of `lost` was recorded, as a sweeper does just before it queues the delivery —
    // which never happened (that sweeper died in between).
    await fleet.database.sql`update batches set ended_at = now() where id = ${lost.id}`;
    expect(received).toHaveLength(0);
    sweeper = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    await waitFor(() => received.length >= 2, 20_000, "both deliveries");
    const ids = received.map((r) => JSON.parse(r.body).id).sort();
    expect(ids).toEqual([early.id, lost.id].sort());
    for (const r of received) expect(verifyWebhookSignature(SECRET, r.body, r.signature)).toBe(true);
    // The delivery id (not signed) is the signed body's id, as README tells receivers to check.
    for (const r of received) expect(r.deliveryId).toBe(`webhook-${JSON.parse(r.body).id}`);
    await waitFor(
      async () => (await client.getBatch(lost.id)).webhook?.deliveredAt != null,
      5_000,
      "the delivery recorded",
    );
    // Delivered: never again, though a whole pass of the sweeper (which queues what batch ends
    // owe) has run since.
    await aWholeWideScan(sweeper);
    expect(received).toHaveLength(2);
  }, 40_000);

  it("Postgres restored to before a delivery was recorded: the webhook is delivered again, under the same delivery id", async () => {
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
    const batch = await client.createBatch([{ agent, customId: "r" }], { webhook: { url } });
    const mine = () => received.filter((r) => JSON.parse(r.body).id === batch.id);
    await waitFor(() => mine().length === 1, 20_000, "the first delivery");
    await waitFor(
      async () => (await client.getBatch(batch.id)).webhook?.deliveredAt != null,
      5_000,
      "the delivery recorded",
    );
    // The restore: Postgres back to before the batch ended; Redis keeps the completed job.
    await fleet.database
      .sql`update batches set ended_at = null, webhook_delivered_at = null where id = ${batch.id}`;
    await waitFor(() => mine().length === 2, 20_000, "the delivery Postgres owes again");
    const [first, second] = mine();
    expect(second!.deliveryId).toBe(first!.deliveryId);
    expect(verifyWebhookSignature(SECRET, second!.body, second!.signature)).toBe(true);
    await waitFor(
      async () => (await client.getBatch(batch.id)).webhook?.deliveredAt != null,
      5_000,
      "the second delivery recorded",
    );
    // Delivered again: and then not a third time, in a whole pass of the sweeper.
    await aWholeWideScan(sweeper!);
    expect(mine()).toHaveLength(2);
  }, 60_000);
});

describe("a sweeper killed during a delivery", () => {
  /** Short, so the test waits seconds, not the defaults' 15 s (10 s lock, 5 s stall check); the
   * lock renewed every 2 s leaves a busy machine 2 s of event-loop stall before it lapses. */
  const LOCK_MS = 4_000;
  const STALL_CHECK_MS = 500;
  let fleet: FleetEnv;
  let client: FleetClient;
  let server: Server;
  let url: string;
  const received: { batchId: string; deliveryId: string; attempt: string; signed: boolean }[] = [];
  /** The first request is held, unanswered, as a receiver that is slow when its sender dies. */
  let hold = true;
  /** The second sweeper, in this process (it starts sooner than a child). */
  let survivor: RunningSweeper | undefined;

  beforeAll(async () => {
    fleet = await createFleetEnv("webhookkill", {
      env: {
        FLEET_WEBHOOK_SECRET: SECRET,
        FLEET_WEBHOOK_LOCK_MS: String(LOCK_MS),
        FLEET_WEBHOOK_STALL_CHECK_MS: String(STALL_CHECK_MS),
      },
    });
    ({ client } = await fleet.startApi());
    ({ server, url } = await startReceiver((body, headers) => {
      received.push({
        batchId: JSON.parse(body).id,
        deliveryId: String(headers["fleet-delivery-id"]),
        attempt: String(headers["fleet-delivery-attempt"]),
        signed: verifyWebhookSignature(SECRET, body, String(headers["fleet-signature"])),
      });
      if (!hold) return true;
      hold = false;
      return false;
    }));
  }, 60_000);
  afterAll(async () => {
    await survivor?.stop();
    server?.closeAllConnections();
    server?.close();
    await fleet?.close();
  });

  it("not sent again while its sweeper lives; another sweeper sends it again once it is killed, under the same delivery id, as attempt 2", async () => {
    const first = await fleet.spawnSweeper();
    const agent = { model: { provider: "scripted" as const, steps: [{ text: "ok" }] } };
    const batch = await client.createBatch([{ agent, customId: "k" }], { webhook: { url } });
    await waitFor(() => received.length === 1, 20_000, "the first delivery to arrive");
    const arrivedAt = Date.now();
    // A second sweeper beside the first, while the receiver holds the first request longer
    // than a lock lasts unrenewed: the stalled-job checks of both (each records its time in
    // BullMQ's `stalled-check` key) run past the moment the lock would have lapsed (it was
    // taken before the request arrived), and find it renewed — the delivery is not sent
    // twice at once.
    survivor = await startSweeper({ ...loadConfig(fleet.env), logLevel: "silent" }, { serveMetrics: false });
    const checkKey = `${fleet.config.prefix}:${QUEUES.webhooks.name}:stalled-check`;
    const checks = new Set<number>();
    await waitFor(
      async () => {
        const at = Number(await fleet.redis.get(checkKey));
        if (at > arrivedAt) checks.add(at);
        // One check marks the active job; one after the lock's lapse would move it, were it not renewed.
        return checks.size >= 2 && Math.max(...checks) > arrivedAt + LOCK_MS;
      },
      20_000,
      "stalled-job checks past the lock's time",
    );
    const jobKey = `${fleet.config.prefix}:${QUEUES.webhooks.name}:${QUEUES.webhooks.jobId({ batchId: batch.id })}`;
    expect(Number((await fleet.redis.hget(jobKey, "stc")) ?? 0)).toBe(0); // never found stalled
    expect(received).toHaveLength(1);
    // The sweepers run with the durations configured: the lock and the check's mark expire within them.
    expect(await fleet.redis.pttl(`${jobKey}:lock`)).toBeGreaterThan(0);
    expect(await fleet.redis.pttl(`${jobKey}:lock`)).toBeLessThanOrEqual(LOCK_MS);
    expect(await fleet.redis.pttl(checkKey)).toBeLessThanOrEqual(STALL_CHECK_MS);
    first.child.kill("SIGKILL");
    await first.exited;
    // The killed sweeper's lock lapses (FLEET_WEBHOOK_LOCK_MS) and a stalled-job check of the
    // other (every FLEET_WEBHOOK_STALL_CHECK_MS) finds it.
    await waitFor(() => received.length === 2, 25_000, "the delivery sent again");
    expect(received.map((r) => [r.batchId, r.attempt, r.signed])).toEqual([
      [batch.id, "1", true],
      [batch.id, "2", true],
    ]);
    expect(received[1]!.deliveryId).toBe(received[0]!.deliveryId);
    await waitFor(
      async () => (await client.getBatch(batch.id)).webhook?.deliveredAt != null,
      10_000,
      "the delivery recorded",
    );
  }, 90_000);
});
