/**
 * The hosts file (/etc/hosts) for model-provider lookups (dns-lookup.ts). The system's lookup
 * reads it before DNS (nsswitch's usual `files dns`), and operators pin hosts there (Kubernetes'
 * `hostAliases`, a gateway in front of a provider): a lookup that asked DNS first would connect
 * elsewhere than every other program on the machine. Read again only when the file changes.
 */
import { readFileSync, statSync } from "node:fs";
import { isIP } from "node:net";

/** An address a lookup answers with. */
export type Address = { address: string; family: 4 | 6 };

/** The names of a hosts file and their addresses, in the file's order (pure). */
export function parseHosts(text: string): Map<string, Address[]> {
  const names = new Map<string, Address[]>();
  for (const line of text.split("\n")) {
    const [address, ...aliases] = line.replace(/#.*/, "").trim().split(/\s+/);
    const family = address ? isIP(address) : 0;
    if (family !== 4 && family !== 6) continue;
    for (const alias of aliases) {
      const name = alias.toLowerCase().replace(/\.$/, "");
      const known = names.get(name) ?? [];
      if (!known.some((a) => a.address === address)) known.push({ address: address!, family });
      names.set(name, known);
    }
  }
  return names;
}

const read = new Map<string, { mtimeMs: number; size: number; names: Map<string, Address[]> }>();

/** `host`'s addresses in the hosts file at `path`, or null (not listed, or no such file). */
export function hostsFileAddresses(host: string, path = "/etc/hosts"): Address[] | null {
  let info: { mtimeMs: number; size: number };
  try {
    info = statSync(path);
  } catch {
    return null;
  }
  let cached = read.get(path);
  if (!cached || cached.mtimeMs !== info.mtimeMs || cached.size !== info.size) {
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch {
      return null;
    }
    cached = { mtimeMs: info.mtimeMs, size: info.size, names: parseHosts(text) };
    read.set(path, cached);
  }
  return cached.names.get(host.toLowerCase().replace(/\.$/, "")) ?? null;
}
