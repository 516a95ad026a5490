/**
 * A proxy in front of a test's API, for clients that meet something between them and it:
 * `handle` sees each request and either answers it itself or calls `forward()`, which
 * passes it on unchanged (and its answer back, streamed). `answerHeaders`, when given, may
 * change the headers of each answer passed back (say, a shorter Retry-After). `loseAnswer()`
 * passes the request on and drops its answer, cutting the client's connection once the API
 * has answered: a request that acted, whose client never learns so.
 */
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import type { AddressInfo } from "node:net";

export type ApiProxy = { url: string; server: Server };

export async function startApiProxy(
  target: string,
  handle: (req: IncomingMessage, res: ServerResponse, forward: () => void, loseAnswer: () => void) => void,
  answerHeaders: (headers: IncomingMessage["headers"]) => IncomingMessage["headers"] = (headers) => headers,
): Promise<ApiProxy> {
  const { hostname, port } = new URL(target);
  const server = createServer((req, res) => {
    const forward = () => {
      const upstream = httpRequest(
        { hostname, port, path: req.url, method: req.method, headers: req.headers },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answerHeaders(answer.headers));
          answer.pipe(res);
        },
      );
      upstream.on("error", () => res.destroy());
      res.on("close", () => upstream.destroy());
      req.pipe(upstream);
    };
    const loseAnswer = () => {
      const upstream = httpRequest(
        { hostname, port, path: req.url, method: req.method, headers: req.headers },
        (answer) => {
          answer.resume();
          answer.on("end", () => req.socket.destroy());
        },
      );
      req.pipe(upstream);
      res.on("close", () => upstream.destroy());
    };
    handle(req, res, forward, loseAnswer);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}
