/**
 * A model host known only through resolv.conf's `search` domains (a short name, as Kubernetes
 * gives its Services) is looked up through c-ares within the lookup's limit, the names asked
 * in glibc's order (dns-lookup.ts, resolv-conf.ts), never through the system's getaddrinfo:
 * that ran on libuv's thread pool (shared with fs and crypto), where a DNS server that never
 * answered for the search-domain names held a thread for as long as glibc waits.
 *
 * A fake DNS server of this test's (UDP, 127.0.0.1:8453) answers; the resolv.conf is a file
 * of this test's, given to the lookup. `dns.lookup` (getaddrinfo) is watched: it must not be
 * called, and if it is, it answers with an address no DNS server here gives.
 */
import dns from "node:dns";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { boundedLookup } from "../src/worker/models/dns-lookup.js";
import { type FakeDns, startFakeDns } from "./support/fake-dns.js";

const SYSTEM_ANSWER = "192.0.2.99";

let fake: FakeDns;
let servers: string[];
let dir: string;
let hosts: string;
const systemLookups: string[] = [];

beforeAll(async () => {
  servers = dns.getServers();
  fake = await startFakeDns((name) => {
    if (name === "gateway.corp.test") return ["10.20.30.40", "fd00::40"];
    if (name === "api.model.corp.test") return ["10.20.30.41"];
    if (name === "api.model") return ["10.20.30.42"];
    if (name.endsWith(".hang.test")) return "silent";
    if (name.endsWith(".broken.test")) return "servfail";
    return "nxdomain";
  }, 8453);
  dns.setServers([fake.server]);
  dir = mkdtempSync(join(tmpdir(), "dns-search-"));
  hosts = join(dir, "hosts");
  writeFileSync(hosts, "127.0.0.1 localhost\n");
});

afterAll(async () => {
  dns.setServers(servers);
  await fake.close();
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  fake.questions.length = 0;
  systemLookups.length = 0;
  const system = (host: string) => {
    systemLookups.push(host);
    return [{ address: SYSTEM_ANSWER, family: 4 }];
  };
  vi.spyOn(dns.promises, "lookup").mockImplementation((async (host: string) => system(host)) as never);
  vi.spyOn(dns, "lookup").mockImplementation(((host: string, _options: unknown, callback: unknown) =>
    (callback as (e: null, a: unknown) => void)(null, system(host))) as never);
});

afterEach(() => {
  vi.restoreAllMocks();
});

/** A resolv.conf of this test's with `text`. */
function resolvConf(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

function lookUp(
  host: string,
  conf: string,
  timeoutMs = 2_000,
): Promise<{ error: NodeJS.ErrnoException | null; addresses: unknown }> {
  const lookup = boundedLookup(timeoutMs, hosts, conf);
  return new Promise((resolve) =>
    lookup(host, { all: true }, (error, addresses) => resolve({ error, addresses })),
  );
}

describe("boundedLookup with resolv.conf's search domains", () => {
  it("finds a short name under a search domain, asking the search list first, as glibc does", async () => {
    const conf = resolvConf("short", "nameserver 10.255.255.1\nsearch other.test corp.test\n");
    const found = await lookUp("gateway", conf);
    expect(systemLookups).toEqual([]);
    expect(found).toEqual({
      error: null,
      addresses: [
        { address: "10.20.30.40", family: 4 },
        { address: "fd00::40", family: 6 },
      ],
    });
    expect(fake.questions.filter((q) => q.endsWith(" A"))).toEqual([
      "gateway.other.test A",
      "gateway.corp.test A",
    ]);
  });

  it("asks a name with ndots dots as it is first, then under the search domains", async () => {
    const conf = resolvConf("ndots", "search corp.test\noptions timeout:1 ndots:2\n");
    // One dot, fewer than ndots: the search list first.
    expect((await lookUp("api.model", conf)).addresses).toEqual([{ address: "10.20.30.41", family: 4 }]);
    expect(fake.questions.filter((q) => q.endsWith(" A"))).toEqual(["api.model.corp.test A"]);
    fake.questions.length = 0;
    // With ndots 1 it is asked as it is first.
    const first = resolvConf("ndots1", "search corp.test\n");
    expect((await lookUp("api.model", first)).addresses).toEqual([{ address: "10.20.30.42", family: 4 }]);
    expect(fake.questions.filter((q) => q.endsWith(" A"))).toEqual(["api.model A"]);
    expect(systemLookups).toEqual([]);
  });

  it("fails within its limit when the DNS server never answers for a search-domain name", async () => {
    const conf = resolvConf("hang", "search hang.test corp.test\n");
    const result = await lookUp("gateway", conf, 300);
    expect(systemLookups).toEqual([]);
    expect(result.error?.message).toBe("DNS lookup of gateway got no answer within 300 ms");
    expect(result.error?.code).toBe("ETIMEOUT");
    expect(fake.questions).toContain("gateway.hang.test A");
  });

  it("goes on past a search domain whose server fails, as glibc does, and says so if nothing is found", async () => {
    const conf = resolvConf("servfail", "search broken.test corp.test\n");
    expect((await lookUp("gateway", conf)).addresses).toEqual([
      { address: "10.20.30.40", family: 4 },
      { address: "fd00::40", family: 6 },
    ]);
    const result = await lookUp("missing", conf);
    expect(result.error?.code).toBe("ESERVFAIL");
    expect(result.error?.message).toBe("DNS lookup of missing failed (ESERVFAIL)");
    expect(fake.questions.filter((q) => q.endsWith(" A"))).toEqual([
      "gateway.broken.test A",
      "gateway.corp.test A",
      "missing.broken.test A",
      "missing.corp.test A",
      "missing A",
    ]);
    expect(systemLookups).toEqual([]);
  });

  it("fails naming every name it asked when none exists", async () => {
    const conf = resolvConf("none", "search corp.test other.test\n");
    const result = await lookUp("missing.example", conf);
    expect(systemLookups).toEqual([]);
    expect(result.error?.code).toBe("ENOTFOUND");
    expect(result.error?.message).toBe(
      "DNS lookup of missing.example found no such name (asked missing.example, missing.example.corp.test, missing.example.other.test)",
    );
  });

  it("asks a name with its root dot only as it is", async () => {
    const conf = resolvConf("root", "search corp.test\n");
    const result = await lookUp("gateway.", conf);
    expect(systemLookups).toEqual([]);
    expect(result.error?.code).toBe("ENOTFOUND");
    expect(fake.questions.filter((q) => q.endsWith(" A"))).toEqual(["gateway A"]);
  });
});
