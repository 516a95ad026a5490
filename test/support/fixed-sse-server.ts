/**
 * A model server for tests that answers every request with `body` as an event stream, whole
 * and ended: a test sets the events a provider would send (as given, replayed or out of order)
 * and calls the real SDK against `url`.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

export type FixedSseServer = {
  /** `http://127.0.0.1:PORT`. */
  readonly url: string;
  /** What the next request gets. */
  body: string;
  /** The answer's content type (default `text/event-stream`). */
  contentType: string;
  /** Headers sent besides the content type (default none). */
  headers: Record<string, string>;
  /** Requests answered so far (a test sets it back to 0): how often the step was asked. */
  requests: number;
  close(): Promise<void>;
};

export async function startFixedSse(): Promise<FixedSseServer> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      fixed.requests++;
      res.writeHead(200, { ...fixed.headers, "content-type": fixed.contentType });
      res.end(fixed.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const fixed: FixedSseServer = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    body: "",
    contentType: "text/event-stream",
    headers: {},
    requests: 0,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  return fixed;
}
