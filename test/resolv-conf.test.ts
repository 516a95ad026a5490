/**
 * resolv.conf's search list, read as glibc reads it, and the names a host name is asked as,
 * in glibc's order (resolv-conf.ts; test/dns-search-domains.test.ts asks them of a DNS server).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseResolvConf, searchConfig, searchNames } from "../src/worker/models/resolv-conf.js";

const KUBERNETES =
  "nameserver 10.96.0.10\nsearch team.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n";

describe("parseResolvConf", () => {
  it("reads the search list and ndots", () => {
    expect(parseResolvConf(KUBERNETES, {}, "pod-1")).toEqual({
      search: ["team.svc.cluster.local", "svc.cluster.local", "cluster.local"],
      ndots: 5,
      noTldQuery: false,
    });
  });

  it("takes the last of `domain` and `search`, without root dots or comment lines", () => {
    expect(parseResolvConf("search a.test b.test\ndomain c.test. d.test\n", {}, "h").search).toEqual([
      "c.test",
    ]);
    expect(
      parseResolvConf("domain c.test\n# search x.test\n;search y.test\nsearch\ta.test  b.test.\r\n", {}, "h"),
    ).toEqual({ search: ["a.test", "b.test"], ndots: 1, noTldQuery: false });
  });

  it("falls back to the host name's domain, and takes LOCALDOMAIN and RES_OPTIONS over the file", () => {
    expect(parseResolvConf("nameserver 10.0.0.1\n", {}, "worker-1.corp.test").search).toEqual(["corp.test"]);
    expect(parseResolvConf("nameserver 10.0.0.1\n", {}, "worker-1").search).toEqual([]);
    expect(parseResolvConf("search file.test\n", {}, "worker-1.corp.test").search).toEqual(["file.test"]);
    const env = { LOCALDOMAIN: "env.test  other.test", RES_OPTIONS: "ndots:3 no-tld-query" };
    expect(parseResolvConf("search file.test\noptions ndots:2 timeout:1\n", env, "h.corp.test")).toEqual({
      search: ["env.test", "other.test"],
      ndots: 3,
      noTldQuery: true,
    });
    expect(parseResolvConf("search file.test\n", { LOCALDOMAIN: "" }, "h.corp.test").search).toEqual([]);
  });

  it("caps ndots at 15, as glibc does", () => {
    expect(parseResolvConf("options ndots:40\n", {}, "h").ndots).toBe(15);
    expect(parseResolvConf("options ndots:0 rotate\n", {}, "h").ndots).toBe(0);
  });
});

describe("searchNames", () => {
  const kubernetes = parseResolvConf(KUBERNETES, {}, "pod-1");

  it("asks a name with fewer than ndots dots under each search domain first", () => {
    expect(searchNames("gateway", kubernetes)).toEqual([
      "gateway.team.svc.cluster.local",
      "gateway.svc.cluster.local",
      "gateway.cluster.local",
      "gateway",
    ]);
    expect(searchNames("api.openai.com", kubernetes)).toEqual([
      "api.openai.com.team.svc.cluster.local",
      "api.openai.com.svc.cluster.local",
      "api.openai.com.cluster.local",
      "api.openai.com",
    ]);
  });

  it("asks a name with ndots dots or more as it is first", () => {
    const config = { search: ["corp.test"], ndots: 1, noTldQuery: false };
    expect(searchNames("api.openai.com", config)).toEqual(["api.openai.com", "api.openai.com.corp.test"]);
    expect(searchNames("gateway", config)).toEqual(["gateway.corp.test", "gateway"]);
  });

  it("asks a name with its root dot only as it is, and the root domain once", () => {
    const config = { search: ["corp.test", ""], ndots: 1, noTldQuery: false };
    expect(searchNames("gateway.", config)).toEqual(["gateway."]);
    expect(searchNames("gateway", config)).toEqual(["gateway.corp.test", "gateway"]);
  });

  it("never asks a name without a dot as it is with no-tld-query", () => {
    const config = { search: ["corp.test"], ndots: 1, noTldQuery: true };
    expect(searchNames("gateway", config)).toEqual(["gateway.corp.test"]);
    expect(searchNames("api.model", config)).toEqual(["api.model", "api.model.corp.test"]);
  });
});

describe("searchConfig", () => {
  it("reads the file again when it changes, and takes glibc's defaults without one", () => {
    const dir = mkdtempSync(join(tmpdir(), "resolv-conf-"));
    try {
      const path = join(dir, "resolv.conf");
      writeFileSync(path, "search a.test\n");
      expect(searchConfig(path, {}, "h").search).toEqual(["a.test"]);
      writeFileSync(path, "search bb.test\noptions ndots:2\n");
      expect(searchConfig(path, {}, "h")).toEqual({ search: ["bb.test"], ndots: 2, noTldQuery: false });
      expect(searchConfig(join(dir, "none"), {}, "h")).toEqual({ search: [], ndots: 1, noTldQuery: false });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
