/**
 * The lookup of model-provider connections (dns-lookup.ts): its decisions on DNS answers
 * (pure), and a lookup against a DNS server that never answers failing within its limit,
 * with a message naming the host, instead of waiting (test/model-dns-stuck.test.ts runs it in
 * a worker).
 */
import { createSocket, type Socket } from "node:dgram";
import dns from "node:dns";
import { mkdtempSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { boundedLookup, decideLookup, fixedAddresses } from "../src/worker/models/dns-lookup.js";
import { parseHosts } from "../src/worker/models/hosts-file.js";

describe("decideLookup", () => {
  it("takes every address found, IPv4 first", () => {
    expect(decideLookup({ addresses: ["10.0.0.1"] }, { addresses: ["fd00::1"] })).toEqual({
      outcome: "addresses",
      addresses: [
        { address: "10.0.0.1", family: 4 },
        { address: "fd00::1", family: 6 },
      ],
    });
    expect(decideLookup({ code: "ETIMEOUT" }, { addresses: ["fd00::1"] })).toEqual({
      outcome: "addresses",
      addresses: [{ address: "fd00::1", family: 6 }],
    });
  });

  it("says there is no such name only when DNS answered so for every family asked", () => {
    expect(decideLookup({ code: "ENOTFOUND" }, { code: "ENODATA" })).toEqual({ outcome: "no_such_name" });
    expect(decideLookup({ code: "ENOTFOUND" }, null)).toEqual({ outcome: "no_such_name" });
    expect(decideLookup({ code: "ENOTFOUND" }, { code: "ECANCELLED" })).toEqual({
      outcome: "failed",
      code: "ECANCELLED",
    });
    expect(decideLookup({ code: "ECONNREFUSED" }, null)).toEqual({ outcome: "failed", code: "ECONNREFUSED" });
    // SERVFAIL: the search goes on, as glibc's does; unless the other family's query failed otherwise.
    expect(decideLookup({ code: "ENOTFOUND" }, { code: "ESERVFAIL" })).toEqual({ outcome: "server_failed" });
    expect(decideLookup({ code: "ESERVFAIL" }, { code: "ETIMEOUT" })).toEqual({
      outcome: "failed",
      code: "ETIMEOUT",
    });
  });

  it("knows IP addresses and localhost without asking", () => {
    expect(fixedAddresses("10.1.2.3")).toEqual([{ address: "10.1.2.3", family: 4 }]);
    expect(fixedAddresses("LocalHost.")?.map((a) => a.address)).toEqual(["127.0.0.1", "::1"]);
    expect(fixedAddresses("api.localhost")).not.toBeNull();
    expect(fixedAddresses("api.openai.com")).toBeNull();
  });
});

describe("parseHosts", () => {
  it("reads every name of a line, without comments, in the file's order", () => {
    const names = parseHosts(
      "127.0.0.1 localhost\n# 10.0.0.9 hidden.test\n10.1.1.1  Gateway.Model.test gw # pinned\nfd00::7 gateway.model.test\nnot-an-ip bad.test\n",
    );
    expect(names.get("gateway.model.test")).toEqual([
      { address: "10.1.1.1", family: 4 },
      { address: "fd00::7", family: 6 },
    ]);
    expect(names.get("gw")).toEqual([{ address: "10.1.1.1", family: 4 }]);
    expect(names.has("hidden.test")).toBe(false);
    expect(names.has("bad.test")).toBe(false);
  });
});

describe("boundedLookup against a DNS server that never answers", () => {
  let server: Socket;
  let asked = 0;
  let servers: string[];
  beforeAll(async () => {
    servers = dns.getServers();
    server = createSocket("udp4");
    server.on("message", () => {
      asked++;
    });
    await new Promise<void>((resolve) => server.bind(0, "127.0.0.1", resolve));
    dns.setServers([`127.0.0.1:${(server.address() as AddressInfo).port}`]);
  });
  afterAll(() => {
    dns.setServers(servers);
    server.close();
  });

  it("fails within its limit, naming the host", async () => {
    const lookup = boundedLookup(300);
    const result = await new Promise<{ error: NodeJS.ErrnoException | null; addresses: unknown }>((resolve) =>
      lookup("model.invalid-host.test", { all: true }, (error, addresses) => resolve({ error, addresses })),
    );
    expect(asked).toBeGreaterThan(0);
    expect(result.error?.message).toBe("DNS lookup of model.invalid-host.test got no answer within 300 ms");
    expect(result.error?.code).toBe("ETIMEOUT");
  });

  it("answers localhost without asking", async () => {
    const before = asked;
    const lookup = boundedLookup(300);
    const address = await new Promise<string>((resolve, reject) =>
      lookup("localhost", { family: 4 }, (error, found) =>
        error ? reject(error) : resolve(found as string),
      ),
    );
    expect(address).toBe("127.0.0.1");
    expect(asked).toBe(before);
  });
  it("takes a host pinned in the hosts file, as the system's lookup does, without asking DNS", async () => {
    const before = asked;
    const hosts = join(mkdtempSync(join(tmpdir(), "hosts-")), "hosts");
    writeFileSync(hosts, "10.9.8.7 pinned.model.test\n");
    const lookup = boundedLookup(300, hosts);
    const found = await new Promise<unknown>((resolve, reject) =>
      lookup("Pinned.Model.Test", { all: true }, (error, addresses) =>
        error ? reject(error) : resolve(addresses),
      ),
    );
    expect(found).toEqual([{ address: "10.9.8.7", family: 4 }]);
    expect(asked).toBe(before);
    // Changed in place: read again.
    writeFileSync(hosts, "10.9.8.70 pinned.model.test\n");
    const again = await new Promise<unknown>((resolve, reject) =>
      lookup("pinned.model.test", { family: 4 }, (error, address) =>
        error ? reject(error) : resolve(address),
      ),
    );
    expect(again).toBe("10.9.8.70");
  });
});
