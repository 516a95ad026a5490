/**
 * A TLS Redis Cluster named by host (`rediss+cluster://host:port`, as managed clusters are,
 * their certificates naming hosts, not IPs). ioredis resolved the seed host to an IP and made
 * its TLS connection to the IP, whose check against the certificate failed: the start check
 * said Redis was unreachable and every command waited for ever. The cluster here has a
 * certificate for `localhost` only and announces its nodes by host name (ElastiCache's way).
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "./support/redis-cluster.js";

const run = promisify(execFile);

describe("a TLS cluster named by host", () => {
  let dir: string;
  const children: ChildProcess[] = [];
  const ports: number[] = [];

  const tlsCli = (port: number, ...args: string[]) =>
    run("redis-cli", ["--tls", "--cacert", join(dir, "ca.pem"), "-p", String(port), ...args], {
      timeout: 30_000,
    });

  async function until(check: () => Promise<boolean>, what: string): Promise<void> {
    for (let tries = 0; tries < 200; tries++) {
      if (await check().catch(() => false)) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`gave up waiting for ${what}`);
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "fleet-redis-tls-"));
    const ssl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
    ssl(
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      "ca.key",
      "-out",
      "ca.pem",
      "-days",
      "1",
      "-subj",
      "/CN=test CA",
    );
    ssl(
      "req",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      "srv.key",
      "-out",
      "srv.csr",
      "-subj",
      "/CN=localhost",
    );
    execFileSync("sh", ["-c", "printf 'subjectAltName=DNS:localhost\\n' > ext"], { cwd: dir });
    ssl(
      "x509",
      "-req",
      "-in",
      "srv.csr",
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-out",
      "srv.pem",
      "-days",
      "1",
      "-extfile",
      "ext",
    );
    const taken = new Set<number>();
    for (let i = 0; i < 3; i++) ports.push(await freePort(taken));
    for (const port of ports)
      children.push(
        spawn(
          "redis-server",
          [
            ...["--port", "0", "--tls-port", String(port), "--bind", "127.0.0.1", "--dir", dir],
            ...["--save", "", "--appendonly", "no", "--logfile", join(dir, `${port}.log`)],
            ...["--tls-cert-file", join(dir, "srv.pem"), "--tls-key-file", join(dir, "srv.key")],
            ...[
              "--tls-ca-cert-file",
              join(dir, "ca.pem"),
              "--tls-auth-clients",
              "no",
              "--tls-cluster",
              "yes",
            ],
            ...["--cluster-enabled", "yes", "--cluster-config-file", join(dir, `nodes-${port}.conf`)],
            ...["--cluster-announce-hostname", "localhost", "--cluster-preferred-endpoint-type", "hostname"],
          ],
          { stdio: "ignore" },
        ),
      );
    for (const port of ports)
      await until(async () => /PONG/.test((await tlsCli(port, "ping")).stdout), `TLS redis on ${port}`);
    await run(
      "redis-cli",
      [
        "--tls",
        "--cacert",
        join(dir, "ca.pem"),
        "--cluster",
        "create",
        ...ports.map((p) => `127.0.0.1:${p}`),
        "--cluster-yes",
      ],
      { timeout: 30_000 },
    );
    for (const port of ports)
      await until(
        async () => /cluster_state:ok/.test((await tlsCli(port, "cluster", "info")).stdout),
        "cluster_state:ok",
      );
  }, 60_000);

  afterAll(async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((done) => {
            if (child.exitCode !== null || child.signalCode !== null) return done();
            child.once("exit", () => done());
            child.kill("SIGKILL");
          }),
      ),
    );
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("passes the start check and answers a write and a read", async () => {
    const { stdout } = await run(
      process.execPath,
      [
        "--import",
        "tsx",
        resolve(import.meta.dirname, "fixtures/tls-cluster-probe.ts"),
        `rediss+cluster://localhost:${ports[0]}`,
      ],
      {
        cwd: resolve(import.meta.dirname, ".."),
        env: { ...process.env, NODE_EXTRA_CA_CERTS: join(dir, "ca.pem") },
        timeout: 30_000,
      },
    );
    expect(JSON.parse(stdout.trim().split("\n").at(-1)!)).toEqual({ preflight: "ok", write: "ok" });
  }, 40_000);
});
