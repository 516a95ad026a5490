/**
 * A Postgres front that speaks TLS, for tests that need TLS connections without touching the
 * shared server's configuration: it answers a client's SSLRequest with 'S' (or 'N' with
 * `refuseTls`), does the TLS handshake with a self-signed certificate for `localhost` made at
 * start (`openssl req -x509`, in a temporary directory), and pipes the cleartext to `target`
 * (a test/support/pg-proxy.ts port, so it can be blackholed). A client that starts its TLS
 * handshake at once (`sslnegotiation=direct`) is served too; one that sends its startup in the
 * clear (after an 'N') is piped as it is.
 * `secured()` counts the TLS sessions established, `plain()` the connections piped in the clear.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TLSSocket } from "node:tls";
import { freePort } from "./private-redis.js";

const SSL_REQUEST = 80877103;
const TLS_HANDSHAKE = 0x16; // the first byte of a TLS ClientHello record

export type TlsPgProxy = {
  port: number;
  /** The certificate it presents (PEM), for a client that trusts it. */
  cert: string;
  /** `databaseUrl` with its host and port swapped for the proxy's (`localhost`, the certificate's name). */
  urlFor(databaseUrl: string, params?: Record<string, string>): string;
  secured(): number;
  plain(): number;
  close(): Promise<void>;
};

/** A self-signed certificate and key for `localhost`, made with openssl (PEM). */
export function selfSignedCertificate(): { cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), "fleet-tls-"));
  try {
    execFileSync(
      "openssl",
      [
        ...["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"],
        ...["-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-days", "1"],
        ...["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
      ],
      { stdio: "ignore" },
    );
    return {
      cert: readFileSync(join(dir, "cert.pem"), "utf8"),
      key: readFileSync(join(dir, "key.pem"), "utf8"),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function startTlsPgProxy(
  target: number,
  options: { refuseTls?: boolean } = {},
): Promise<TlsPgProxy> {
  const { cert, key } = selfSignedCertificate();
  const port = await freePort();
  const open = new Set<Socket>();
  let secured = 0;
  let plain = 0;

  /** Pipes `client` (its cleartext) to the target, `first` (bytes already read) ahead. */
  const pipeOn = (client: Socket, first: Buffer) => {
    const upstream = createConnection({ host: "127.0.0.1", port: target });
    open.add(upstream);
    upstream.on("error", () => client.destroy());
    upstream.on("close", () => {
      open.delete(upstream);
      client.destroy();
    });
    client.on("close", () => upstream.destroy());
    if (first.length > 0) upstream.write(first);
    client.pipe(upstream);
    upstream.pipe(client);
  };

  const handshake = (socket: Socket, first: Buffer) => {
    // What was read past the SSLRequest, or the ClientHello itself, goes back to be read by TLS.
    if (first.length > 0) socket.unshift(first);
    const secure = new TLSSocket(socket, { isServer: true, cert, key, ALPNProtocols: ["postgresql"] });
    open.add(secure);
    secure.on("error", () => socket.destroy());
    secure.once("secure", () => {
      secured++;
      pipeOn(secure, Buffer.alloc(0));
    });
  };

  const accept = (socket: Socket) => {
    open.add(socket);
    socket.on("error", () => {});
    socket.on("close", () => open.delete(socket));
    let read = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      read = Buffer.concat([read, chunk]);
      if (read[0] === TLS_HANDSHAKE) {
        socket.off("data", onData);
        socket.pause();
        return handshake(socket, read);
      }
      if (read.length < 8) return;
      socket.off("data", onData);
      socket.pause();
      if (read.readUInt32BE(0) !== 8 || read.readUInt32BE(4) !== SSL_REQUEST) {
        plain++;
        return pipeOn(socket, read);
      }
      if (options.refuseTls) {
        socket.write("N");
        // The client goes on in the clear (or gives up).
        plain++;
        return pipeOn(socket, read.subarray(8));
      }
      socket.write("S");
      handshake(socket, read.subarray(8));
    };
    socket.on("data", onData);
  };

  const server: Server = createServer(accept);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });

  return {
    port,
    cert,
    urlFor(databaseUrl, params = {}) {
      const url = new URL(databaseUrl);
      url.hostname = "localhost";
      url.port = String(port);
      for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
      return url.toString();
    },
    secured: () => secured,
    plain: () => plain,
    async close() {
      server.close();
      for (const socket of open) socket.destroy();
    },
  };
}
