/**
 * A DNS server for tests (UDP on a loopback address): it records every question in order and
 * answers each as `zone` says: addresses (A or AAAA records of the asked type; none of the
 * other type, NOERROR), `nxdomain` (no such name), `servfail` (the server failed), or `silent`
 * (never answered).
 */
import { createSocket, type Socket } from "node:dgram";
import { isIP } from "node:net";

export type FakeDnsAnswer = string[] | "nxdomain" | "servfail" | "silent";

export type FakeDns = {
  /** `host:port`, for `dns.setServers`. */
  server: string;
  /** Every question asked, in order: `name A` / `name AAAA` (the name lowercased). */
  questions: string[];
  close(): Promise<void>;
};

/** A query's first question: its name, type and where the question ends; null if unread. */
function question(message: Buffer): { name: string; type: number; end: number } | null {
  let at = 12;
  const labels: string[] = [];
  while (at < message.length) {
    const length = message[at]!;
    if (length === 0) {
      if (at + 5 > message.length) return null;
      return { name: labels.join(".").toLowerCase(), type: message.readUInt16BE(at + 1), end: at + 5 };
    }
    if (length > 63) return null;
    labels.push(message.toString("latin1", at + 1, at + 1 + length));
    at += 1 + length;
  }
  return null;
}

/** An address's record data (4 bytes for IPv4, 16 for IPv6). */
function rdata(address: string): Buffer {
  if (isIP(address) === 4) return Buffer.from(address.split(".").map(Number));
  const [head, tail] = address.split("::") as [string, string | undefined];
  const words = (part: string | undefined) =>
    part ? part.split(":").map((w) => Number.parseInt(w, 16)) : [];
  const front = words(head);
  const back = words(tail);
  const all = [...front, ...Array<number>(8 - front.length - back.length).fill(0), ...back];
  const out = Buffer.alloc(16);
  for (const [i, word] of all.entries()) out.writeUInt16BE(word, i * 2);
  return out;
}

const RCODE = { nxdomain: 3, servfail: 2 } as const;

function reply(
  query: Buffer,
  asked: { type: number; end: number },
  answer: string[] | "nxdomain" | "servfail",
): Buffer {
  const type = asked.type === 28 ? 6 : 4;
  const records =
    typeof answer === "string"
      ? []
      : answer
          .filter((address) => isIP(address) === type && (asked.type === 1 || asked.type === 28))
          .map((address) => {
            const data = rdata(address);
            const head = Buffer.from([0xc0, 0x0c, 0, asked.type, 0, 1, 0, 0, 0, 60, 0, data.length]);
            return Buffer.concat([head, data]);
          });
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // the id
  header.writeUInt16BE(0x8180 | (typeof answer === "string" ? RCODE[answer] : 0), 2); // a response and its code
  header.writeUInt16BE(1, 4); // one question
  header.writeUInt16BE(records.length, 6);
  return Buffer.concat([header, query.subarray(12, asked.end), ...records]);
}

/** Starts a fake DNS server on `host:port` answering by `zone` (a name lowercased, no root dot). */
export async function startFakeDns(
  zone: (name: string) => FakeDnsAnswer,
  port: number,
  host = "127.0.0.1",
): Promise<FakeDns> {
  const socket: Socket = createSocket("udp4");
  const questions: string[] = [];
  socket.on("message", (message, from) => {
    const asked = question(message);
    if (!asked) return;
    questions.push(`${asked.name} ${asked.type === 28 ? "AAAA" : asked.type === 1 ? "A" : asked.type}`);
    const answer = zone(asked.name);
    if (answer === "silent") return;
    socket.send(reply(message, asked, answer), from.port, from.address);
  });
  await new Promise<void>((resolve, reject) => {
    socket.once("error", reject);
    socket.bind(port, host, () => resolve());
  });
  return {
    server: `${host}:${port}`,
    questions,
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}
