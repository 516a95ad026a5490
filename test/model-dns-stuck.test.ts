/**
 * A model host whose DNS server never answers must not stall every other host-name lookup of
 * the worker. Model requests went through global fetch, whose connections look names up with
 * `dns.lookup`: getaddrinfo on libuv's thread pool, held until the system resolver gives up
 * (here: not within the test). libuv gives such lookups at most half of the pool's 4 threads,
 * so file tools still ran; but two stuck calls took both, and every other lookup of the process
 * queued behind them: another model provider's host that answers at once, a Postgres or Redis
 * named by host. Now provider connections look names up through c-ares (dns-lookup.ts), which
 * waits on a socket, not a thread, and within a time limit.
 *
 * A real `fleet worker` (Postgres, Redis, the API in this process) runs in a mount namespace
 * of its own whose /etc/resolv.conf names a DNS server of this test's (a UDP socket on a
 * loopback address) that reads every query and answers only for `healthy.model.test`. Six
 * sessions ask an OpenAI model at six hosts it never answers for; meanwhile a seventh asks one
 * at the healthy host (a fake OpenAI server), and an eighth runs `append_file`: both complete.
 */
import { spawn } from "node:child_process";
import { randomInt } from "node:crypto";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetClient } from "../src/producer/client.js";
import { type FakeDns, startFakeDns } from "./support/fake-dns.js";
import { type FakeOpenAI, startFakeOpenAI } from "./support/fake-openai.js";
import { createFleetEnv, FLEET_BIN, type FleetEnv, waitFor } from "./support/fleet-env.js";

const HOSTS = Array.from({ length: 6 }, (_, i) => `stuck-${i}.model.test`);
const HEALTHY = "healthy.model.test";

let fleet: FleetEnv;
let healthy: FakeOpenAI;
let client: FleetClient;
let dns: FakeDns | undefined;
let dir: string;
let worker: ReturnType<typeof spawn> | undefined;
let output = "";
let healthyUrl: string;
/** Whether the DNS server was asked for `host` (any record type). */
const queried = (host: string): boolean => dns?.questions.some((q) => q.startsWith(`${host} `)) ?? false;

beforeAll(async () => {
  // The silent server: port 53 (resolv.conf names no port) on a loopback address of its own.
  const address = `127.${randomInt(2, 250)}.${randomInt(2, 250)}.${randomInt(2, 250)}`;
  // It answers HEALTHY's A question with 127.0.0.1 (no record of any other type) and no other.
  dns = await startFakeDns((name) => (name === HEALTHY ? ["127.0.0.1"] : "silent"), 53, address);
  dir = await mkdtemp(join(tmpdir(), "fleet-dns-stuck-"));
  const resolvConf = join(dir, "resolv.conf");
  // As long as glibc lets the system resolver wait: each try 30 s, 5 tries.
  await writeFile(resolvConf, `nameserver ${address}\noptions timeout:30 attempts:5\n`);
  healthy = await startFakeOpenAI([{ text: ["an answer"] }]);
  healthyUrl = healthy.url.replace("127.0.0.1", HEALTHY);
  const origins = [...HOSTS.map((host) => `http://${host}:7401`), new URL(healthyUrl).origin];
  fleet = await createFleetEnv("model-dns-stuck", { env: { FLEET_ALLOWED_BASE_URLS: origins.join(",") } });
  ({ client } = await fleet.startApi());
  const env: Record<string, string | undefined> = {
    ...process.env,
    ...fleet.env,
    OPENAI_API_KEY: "test-key",
    WORKER_CONCURRENCY: "10",
  };
  // The default pool of 4 threads, as a worker has it.
  delete env.UV_THREADPOOL_SIZE;
  worker = spawn(
    "unshare",
    [
      "-m",
      "sh",
      "-c",
      'mount --bind "$0" /etc/resolv.conf && exec "$@"',
      resolvConf,
      process.execPath,
      FLEET_BIN,
      "worker",
    ],
    { env, stdio: ["ignore", "pipe", "pipe"] },
  );
  worker.stdout?.on("data", (d) => {
    output += d;
  });
  worker.stderr?.on("data", (d) => {
    output += d;
  });
  await waitFor(() => /fleet worker ready/.test(output) || worker!.exitCode !== null, 60_000, "worker start");
  if (worker.exitCode !== null) throw new Error(`the worker exited at start:\n${output}`);
}, 120_000);

afterAll(async () => {
  if (worker && worker.exitCode === null) {
    const exited = new Promise((resolve) => worker!.once("exit", resolve));
    worker.kill("SIGKILL");
    await exited;
  }
  await fleet?.close();
  await healthy?.close();
  await dns?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("model calls stuck resolving a host name", () => {
  it("hold up neither another provider's host nor the file tools", async () => {
    for (const host of HOSTS) {
      const session = await client.createSession({
        agent: { model: { provider: "openai", model: "gpt-test", baseUrl: `http://${host}:7401/v1` } },
      });
      await client.send(session.id, "go");
    }
    // Model calls are resolving their hosts (before the fix, two held all that libuv gives
    // lookups: the worker asked no more names).
    await waitFor(
      () => HOSTS.filter((host) => queried(host)).length >= 2,
      30_000,
      "model hosts asked of the silent DNS server",
    );
    const answered = await client.createSession({
      agent: { model: { provider: "openai", model: "gpt-test", baseUrl: healthyUrl } },
    });
    const modelRun = (await client.send(answered.id, "go")).runId;
    const tool = await client.createSession({
      agent: {
        model: {
          provider: "scripted",
          steps: [
            { toolCalls: [{ name: "append_file", arguments: { path: "dns.txt", line: "written" } }] },
            { text: "done" },
          ],
        },
        tools: ["append_file"],
      },
    });
    const toolRun = (await client.send(tool.id, "write")).runId;
    // Before: the healthy host's lookup waited behind the stuck ones; the run never ended here.
    expect((await client.waitForRun(modelRun, { timeoutMs: 45_000 })).endedReason).toBe("completed");
    expect(healthy.requests.length).toBe(1);
    expect((await client.waitForRun(toolRun, { timeoutMs: 45_000 })).endedReason).toBe("completed");
    expect(await readFile(join(fleet.env.FLEET_TOOL_DIR!, "dns.txt"), "utf8")).toBe("written\n");
    // Meanwhile at least 4 model calls were resolving a host the server never answered.
    expect(HOSTS.filter((host) => queried(host)).length).toBeGreaterThanOrEqual(4);
  }, 120_000);
});
